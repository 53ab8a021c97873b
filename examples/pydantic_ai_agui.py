#!/bin/sh
# sh and Python at once, as examples/pydantic_ai_kernel.py: kstress records the
# sha256 of the target's `bin`, so the bin is the app itself; sh runs the line
# below (the project's venv python, or $KSTRESS_EXAMPLE_PYTHON), Python reads it
# as an expression of string literals and goes on.
"exec" "${KSTRESS_EXAMPLE_PYTHON:-${0%/*}/../.venv/bin/python}" "$0" "$@"
"""A pydantic-ai agent served over AG-UI by pydantic-ai's own AGUIAdapter, on
uvicorn: a framework's own server with no kstress code in it (issue 23).

    OPENAI_BASE_URL=http://127.0.0.1:P/v1 OPENAI_API_KEY=x \\
        examples/pydantic_ai_agui.py --port PORT [--data-dir DIR] [--sequential] [--llm-url URL]

prints ``agent listening on http://127.0.0.1:PORT/agui``. The model is whatever
OPENAI_BASE_URL names (kstress sets it to its mock, `{llm_url}`). The tools are
the mock catalog's default names and argument shapes (docs/catalog.md).
docs/example-pydantic-ai-agents.md tells what kstress measured on it.

Scheduling is pydantic-ai 2.68.0's (pydantic_ai/_tool_execution.py,
`_ToolCallProcessor._call_tools`, `_segment_by_barriers`): a `sequential=True`
tool is a barrier, the calls between barriers run concurrently, results go back
in declared order. `--sequential` declares every tool `sequential=True`, so
every call is a barrier of its own: one call at a time.

KSTRESS_EXAMPLE_PLANT=shared-history plants a bug for kstress to find: one
history for every thread (the server keeps a global message list and adds it
to every run), as an app that stores conversations under one key would.
"""

import argparse
import asyncio
import contextlib
import os
import re
import signal
import socket
import sys
from pathlib import Path

import uvicorn
from openai import AsyncOpenAI
from pydantic_ai import Agent, Tool
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

PLANTS = ("shared-history",)
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
RESIDENTS: dict[str, asyncio.subprocess.Process] = {}


def make_agent(data_dir: Path, sequential: bool) -> Agent:
    # retries 0: a retried 5xx would hide a fault (and triple the mock's requests);
    # base URL and key from OPENAI_BASE_URL / OPENAI_API_KEY, the SDK's own variables
    client = AsyncOpenAI(max_retries=0, timeout=60)

    async def lookup(key: str, query: str = "") -> str:
        """Look up an entry by key. Read-only and fast."""
        return f"lookup {key}: entry (query {query!r})"

    async def cmd_run(command: str) -> str:
        """Run a shell command in the data directory; returns its output."""
        proc = await asyncio.create_subprocess_exec(
            "/bin/sh", "-c", command, cwd=data_dir, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await proc.communicate()
        finally:
            # a cancelled run (the client closed the stream) kills its command
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await asyncio.shield(proc.wait())
        text = out.decode(errors="replace")
        # a tool's exception ends the whole run in pydantic-ai: a failure is a result
        return f"ERROR: exit status {proc.returncode}\n{text}" if proc.returncode else (text or "(no output)")

    async def knowledge_create(title: str, content: str) -> str:
        """Create a knowledge entry (a file in the data directory)."""
        if not _NAME_RE.fullmatch(title):
            return f"ERROR: title {title!r} is not usable as a file name"
        folder = data_dir / "knowledge"
        folder.mkdir(exist_ok=True)
        (folder / f"{title}.md").write_text(content)
        return f"created knowledge entry {title}"

    async def img_describe(path: str) -> str:
        """Describe an image."""
        return f"ERROR: img_describe {path}: this agent has no image model"

    async def ocr(path: str) -> str:
        """Read the text in an image."""
        return f"ERROR: ocr {path}: this agent has no image model"

    async def resident_start(name: str, argv: list[str]) -> str:
        """Start a named background process that outlives the turn (stopped with the agent)."""
        if not _NAME_RE.fullmatch(name) or not argv:
            return f"ERROR: resident {name!r}: a name of A-Z a-z 0-9 _ . - and a non-empty argv"
        RESIDENTS[name] = await asyncio.create_subprocess_exec(
            *argv, cwd=data_dir, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        return f"resident {name} started"

    async def notify(text: str) -> str:
        """Send a notification."""
        return f"notified: {text}"

    # knowledge_create writes, resident_start and notify have effects outside the
    # turn: not parallel-safe (the mock's catalog), so barriers
    unsafe = {knowledge_create, resident_start, notify}
    tools = [Tool(f, sequential=sequential or f in unsafe)
             for f in (lookup, cmd_run, knowledge_create, img_describe, ocr, resident_start, notify)]
    model = OpenAIChatModel("kstress-mock", provider=OpenAIProvider(openai_client=client))
    return Agent(model, tools=tools,
                 system_prompt="Call the tools you are asked for, then answer with the text you are given.")


def make_app(agent: Agent, plant: str | None) -> Starlette:
    shared: list[ModelMessage] = []

    def keep(result) -> None:
        shared.extend(result.new_messages())

    async def run(request: Request) -> Response:
        if plant == "shared-history":
            # the planted bug: one history for every thread, prepended to the client's
            return await AGUIAdapter.dispatch_request(request, agent=agent, message_history=list(shared), on_complete=keep)
        # the default: manage_message_history='client', the history is what the client sends
        return await AGUIAdapter.dispatch_request(request, agent=agent)

    return Starlette(routes=[Route("/agui", run, methods=["POST"])])


def bind(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))  # loopback only
    return sock


def serve(app, sock: socket.socket) -> None:
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        for p in RESIDENTS.values():
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)


def parse_args(what: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=f"A pydantic-ai agent served over {what}.")
    ap.add_argument("--port", type=int, default=int(os.environ.get("PORT", "0")), help="127.0.0.1 port [default: $PORT or any]")
    ap.add_argument("--data-dir", type=Path, default=Path("."), help="where the tools work [default: .]")
    ap.add_argument("--sequential", action="store_true", help="every tool sequential=True: one call at a time")
    ap.add_argument("--llm-url", default=os.environ.get("OPENAI_BASE_URL"), help="the OpenAI base URL [default: $OPENAI_BASE_URL]")
    a = ap.parse_args()
    if not a.llm_url:
        # the SDK would fall back to OpenAI's own URL: refuse rather than send test traffic there
        ap.error("OPENAI_BASE_URL is not set: point it (or --llm-url) at the LLM (kstress sets it from {llm_url})")
    os.environ["OPENAI_BASE_URL"] = a.llm_url
    os.environ.setdefault("OPENAI_API_KEY", "kstress")
    a.plant = os.environ.get("KSTRESS_EXAMPLE_PLANT") or None
    if a.plant is not None and a.plant not in PLANTS:
        ap.error(f"KSTRESS_EXAMPLE_PLANT={a.plant!r} is not a plant: use one of {', '.join(PLANTS)} or unset it")
    a.data_dir = a.data_dir.absolute()
    return a


def main() -> None:
    a = parse_args("AG-UI")
    sock = bind(a.port)
    app = make_app(make_agent(a.data_dir, a.sequential), a.plant)
    print(f"agent listening on http://127.0.0.1:{sock.getsockname()[1]}/agui", flush=True)
    serve(app, sock)


if __name__ == "__main__":
    sys.exit(main())
