#!/bin/sh
# sh and Python at once, as examples/pydantic_ai_kernel.py: kstress records the
# sha256 of the target's bin, so the bin is the app itself; sh runs the line
# below (the project's venv python, or $KSTRESS_EXAMPLE_PYTHON), Python reads
# it as string literals and goes on.
"exec" "${KSTRESS_EXAMPLE_PYTHON:-${0%/*}/../.venv/bin/python}" "$0" "$@"
"""An agno agent served over AG-UI by agno's own AGUI interface (agno 3.1.10,
agno/os/interfaces/agui/: the router AgentOS mounts), on FastAPI and uvicorn: no kstress
code in it (issue 23 item 6). kstress drives it as a target:

    kstress batch --launch --target examples/agno.toml

Configured as a deployed app is, by its environment: ``PORT`` (it listens on
127.0.0.1:PORT, POST /agui), ``OPENAI_BASE_URL`` (its model; kstress's mock
under ``--launch``) and ``OPENAI_API_KEY``. The tools carry the names and
argument shapes of the mock's default catalog (docs/catalog.md).

``--sequential``: agno has no switch that runs a step's tool calls one at a
time (agno/models/base.py, Model.arun_function_calls, always asyncio.gather);
this flag adds one with agno's own API, a tool hook (Agent(tool_hooks=...))
holding a lock per run, so the calls of one run take turns in declared order
and runs of other sessions are not held up.

``KSTRESS_EXAMPLE_PLANT=shared-history`` plants a bug for kstress to find:
every AG-UI thread runs in one agno session, so every conversation shares
one history (kstress sessions fails it ``history foreign:...``).
"""


import argparse
import asyncio
import contextlib
import hashlib
import os
import re
import signal
import socket
import sys
import tempfile
import weakref
from pathlib import Path
from typing import Any, Callable

# no usage reports to agno's servers: a load run would send one per run
os.environ.setdefault("AGNO_TELEMETRY", "false")

import uvicorn  # noqa: E402
from agno.agent import Agent  # noqa: E402
from agno.db.in_memory import InMemoryDb  # noqa: E402
from agno.models.openai import OpenAILike  # noqa: E402
from agno.os.interfaces.agui import AGUI  # noqa: E402
from fastapi import FastAPI  # noqa: E402

PLANTS = ("shared-history",)
MAX_OUTPUT = 64 * 1024
TOOL_TIMEOUT_S = 60.0
_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
DATA = Path(os.environ.get("AGENT_DATA_DIR") or tempfile.mkdtemp(prefix="agno-agent-"))


async def lookup(key: str, query: str = "") -> str:
    """Look up an entry by key. Read-only and fast."""
    digest = hashlib.sha256(f"{key}\0{query}".encode()).hexdigest()[:16]
    return f"lookup {key}: entry {digest} (query {query!r})"


async def cmd_run(command: str) -> str:
    """Run a shell command in the data directory; returns its output."""
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command, cwd=DATA, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        # its own process group: a cancelled run kills what the command forked too
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(TOOL_TIMEOUT_S):
            out, _ = await proc.communicate()
    finally:
        # also when the run is cancelled (the client closed the stream)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.shield(proc.wait())
    text = out[:MAX_OUTPUT].decode("utf-8", "replace")
    if proc.returncode != 0:
        return f"error: command exited with status {proc.returncode}\n{text}"
    return text or "(no output, exit status 0)"


async def knowledge_create(title: str, content: str) -> str:
    """Create a knowledge entry (a file in the data directory) and add it to the index."""
    if not _NAME_RE.fullmatch(title):
        return f"error: title {title!r} is not usable as a file name: use 1-128 of A-Z a-z 0-9 _ . -"
    folder = DATA / "knowledge"
    folder.mkdir(mode=0o700, exist_ok=True)
    (folder / f"{title}.md").write_text(content)
    # a read-modify-write of the index: why this tool is not parallel-safe
    index = folder / "INDEX"
    titles = index.read_text().splitlines() if index.exists() else []
    if title not in titles:
        index.write_text("\n".join([*titles, title]) + "\n")
    return f"created knowledge entry {title} ({len(content.encode())} bytes) at knowledge/{title}.md"


async def img_describe(path: str) -> str:
    """Describe an image file."""
    return f"error: no image model is configured; cannot describe {path}"


async def ocr(path: str) -> str:
    """Read the text in an image file."""
    return f"error: no OCR model is configured; cannot read {path}"


async def resident_start(name: str, argv: list[str]) -> str:
    """Start a named background process that outlives the turn."""
    proc = await asyncio.create_subprocess_exec(
        *argv, cwd=DATA, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
    )
    RESIDENTS.append(proc)
    return f"started resident {name} (pid {proc.pid})"


async def notify(text: str) -> str:
    """Notify the user."""
    return f"notified: {text}"


RESIDENTS: list[asyncio.subprocess.Process] = []


def one_call_at_a_time() -> Callable[..., Any]:
    """A tool hook (agno's tool_hooks API) that runs the calls of one run one
    at a time. asyncio.gather starts them in declared order and an asyncio
    lock is fair, so they also run in declared order."""
    # a run's lock lives while one of its calls holds or waits for it
    locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    async def hook(function_name: str, function_call: Callable[..., Any], arguments: dict[str, Any], run_context: Any) -> Any:
        run_id = run_context.run_id if run_context is not None else ""
        lock = locks.get(run_id)
        if lock is None:
            lock = locks[run_id] = asyncio.Lock()
        async with lock:
            result = function_call(**arguments)
            if asyncio.iscoroutine(result):
                result = await result
            return result

    return hook


class SharedHistoryAgent(Agent):
    """The planted bug: every thread id is mapped to one agno session."""

    def arun(self, *args: Any, **kwargs: Any) -> Any:
        kwargs["session_id"] = "one-history-for-everyone"
        return super().arun(*args, **kwargs)


def make_agent(sequential: bool, plant: str | None) -> Agent:
    model = OpenAILike(
        id="kstress-mock",
        base_url=os.environ["OPENAI_BASE_URL"],
        api_key=os.environ.get("OPENAI_API_KEY", "kstress"),
        # retries 0: a retried 5xx would hide a fault (and triple the mock's requests)
        max_retries=0,
        timeout=120,
    )
    cls = SharedHistoryAgent if plant == "shared-history" else Agent
    return cls(
        name="kstress-agno",
        id="kstress-agno",
        model=model,
        instructions="Call the tools you are asked for, then answer with the text you are given.",
        tools=[lookup, cmd_run, knowledge_create, img_describe, ocr, resident_start, notify],
        tool_hooks=[one_call_at_a_time()] if sequential else None,
        # agno's AG-UI router hands the agent the thread's last user message
        # alone (agno/os/interfaces/agui/input.py, extract_user_input): the
        # history lives on the server, per session id (= AG-UI threadId), in a
        # db. In memory: nothing is written to disk.
        db=InMemoryDb(),
        add_history_to_context=True,
        # every earlier run, whole (tool calls and results too): kstress's
        # sessions check wants each earlier turn as it was
        num_history_runs=1000,
        telemetry=False,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequential", action="store_true", help="run a step's tool calls one at a time (a tool hook)")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")))
    a = ap.parse_args()
    plant = os.environ.get("KSTRESS_EXAMPLE_PLANT") or None
    if plant is not None and plant not in PLANTS:
        sys.exit(f"KSTRESS_EXAMPLE_PLANT={plant!r} is not a planted bug of this app; use one of {', '.join(PLANTS)} or unset it")
    agent = make_agent(a.sequential, plant)
    # agno's AGUI interface is a FastAPI router (POST /agui, GET /status), which
    # AgentOS mounts beside its REST API; mounted alone it needs FastAPI only,
    # not agno[os] (SQLAlchemy, OpenTelemetry, a scheduler, python-multipart)
    app = FastAPI()
    app.include_router(AGUI(agent=agent).get_router())
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    print(f"agent listening on http://127.0.0.1:{sock.getsockname()[1]}/agui", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for proc in RESIDENTS:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)


if __name__ == "__main__":
    main()
