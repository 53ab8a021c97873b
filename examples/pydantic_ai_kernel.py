#!/bin/sh
# This file is a sh script and a Python program at once. kstress records the
# sha256 of the target's `bin`, so the bin must be the bridge itself, not a
# launcher in front of it; and `#!/usr/bin/env python3` would pick whatever
# python3 is first on PATH, which has no pydantic-ai. sh runs the line below
# (the project's venv python, or $KSTRESS_EXAMPLE_PYTHON); Python reads it as
# an expression of string literals and goes on.
"exec" "${KSTRESS_EXAMPLE_PYTHON:-${0%/*}/../.venv/bin/python}" "$0" "$@"
"""A small agent kernel on pydantic-ai, speaking kstress's socket protocol v1.

    KERNEL_TOKEN=... OPENAI_BASE_URL=http://.../v1 OPENAI_API_KEY=... \\
        examples/pydantic_ai_kernel.py --socket PATH --data-dir DIR [--sequential]

The agent loop, tool scheduling and tool-result messages are pydantic-ai's own
(`Agent.run`); this file adds only the socket front (auth, input -> response or
error, stats) and the tools the mock's default catalog names: `lookup`,
`cmd_run`, `knowledge_create`, `img_describe`, `ocr`, `resident_start`,
`notify`. docs/framework-example.md tells how kstress drives it and what it showed.

Scheduling (pydantic-ai 2.x, read in pydantic_ai/_tool_execution.py,
`_ToolCallProcessor._call_tools` and `_segment_by_barriers`): the calls of one
model response are cut into segments at every `sequential=True` tool; the
segments run one after another, the calls inside a segment concurrently, and a
sequential tool is a segment of its own. So a `sequential=True` tool is a
*barrier*: the calls before it finish, it runs alone, the calls after it start
afterwards. `parallel_execution_mode('sequential')` makes every call a barrier.
Results go back in declared order either way: `_call_tools` appends them
`sorted(tool_parts_by_index)`, not as they complete.

Imports nothing of kstress: like the reference kernel, it is a system under
test, not part of the harness. (No `from __future__` import: nothing may come
before it, and the sh line above must.)
"""

import argparse
import asyncio
import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pydantic_ai
from openai import AsyncOpenAI
from pydantic_ai import Agent, RunContext, Tool
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelTimeoutError,
    UnexpectedModelBehavior,
    UsageLimitExceeded,
)
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.usage import UsageLimits

log = logging.getLogger("pydantic-ai-bridge")

PROTOCOL = 1
MAX_FRAME = 1024 * 1024
MAX_OUTPUT = 64 * 1024
MAX_WRITE_BUFFER = 8 * 1024 * 1024
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
# a successful result must never read as a failure (docs/protocol.md)
_ERRORISH = re.compile(r"(?i)^\s*error\b")
SYSTEM_PROMPT = "You are a test agent. Call the tools you are asked for, then answer with the text you are given."


@dataclasses.dataclass
class Settings:
    socket: Path
    data_dir: Path
    token: str
    model: str
    llm_api: str
    sequential: bool
    max_steps: int
    llm_timeout_s: float
    max_retries: int
    tool_timeout_s: float
    auth_timeout_s: float


@dataclasses.dataclass
class Stats:
    executed: int = 0
    failed: int = 0
    abandoned: int = 0
    tool_calls: int = 0
    connections_total: int = 0
    bad_frames: int = 0
    auth_failures: int = 0
    auth_timeouts: int = 0
    slow_readers: int = 0
    running: int = 0
    peak_queued: int = 0


class Conn:
    """One client. Frames are written whole and never awaited on: a client
    that stops reading past MAX_WRITE_BUFFER is dropped, not waited for."""

    def __init__(self, kernel: "Kernel", reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.kernel = kernel
        self.reader = reader
        self.writer = writer
        self.authed = False
        self.closed = False
        # one connection is served in order (docs/protocol.md): one worker per connection
        self.inputs: asyncio.Queue[tuple[Any, str]] = asyncio.Queue()
        self.worker: asyncio.Task[None] | None = None

    def send(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        self.writer.write(json.dumps(frame, ensure_ascii=False).encode() + b"\n")
        if self.writer.transport.get_write_buffer_size() > MAX_WRITE_BUFFER:
            self.kernel.stats.slow_readers += 1
            self.abort()

    def abort(self) -> None:
        self.closed = True
        self.writer.transport.abort()


@dataclasses.dataclass
class TurnDeps:
    """What a tool needs of the turn it runs in (pydantic-ai's `deps`)."""

    kernel: "Kernel"
    conn: Conn
    input_id: Any


# --- tools -------------------------------------------------------------------


class ToolFailed(Exception):
    pass


async def _framed(ctx: RunContext[TurnDeps], name: str, body: Any) -> str:
    """Run one tool body between its start and end frames. A failure becomes an
    `ERROR: ` result, never an exception: pydantic-ai lets a tool's exception
    end the whole run, which would turn one failed call into a failed turn."""
    deps = ctx.deps
    call_id = ctx.tool_call_id
    deps.conn.send({"type": "tool", "id": deps.input_id, "call_id": call_id, "name": name, "phase": "start"})
    try:
        out = await body
        if _ERRORISH.search(out):
            out = "output:\n" + out
        ok = True
    except ToolFailed as exc:
        out, ok = f"ERROR: {exc}", False
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - a bug in a tool fails its call, not the turn
        log.exception("tool %s crashed", name)
        out, ok = f"ERROR: internal error in {name}: {exc!r}", False
    deps.kernel.stats.tool_calls += 1
    deps.conn.send({"type": "tool", "id": deps.input_id, "call_id": call_id, "name": name, "phase": "end", "ok": ok})
    return out


async def lookup(ctx: RunContext[TurnDeps], key: str, query: str = "") -> str:
    """Look up an entry by key. Read-only and fast."""

    async def body() -> str:
        digest = hashlib.sha256(f"{key}\0{query}".encode()).hexdigest()[:16]
        return f"lookup {key}: entry {digest} (query {query!r})"

    return await _framed(ctx, "lookup", body())


async def cmd_run(ctx: RunContext[TurnDeps], command: str) -> str:
    """Run a shell command in the data directory; returns its output."""
    return await _framed(ctx, "cmd_run", _run_shell(ctx.deps.kernel, command))


async def _run_shell(kernel: "Kernel", command: str) -> str:
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
        "/bin/sh", "-c", command,
        cwd=kernel.s.data_dir, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        # its own process group: a cancelled turn kills what the command forked too
        start_new_session=True,
    ))
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        # cancelled mid-spawn: the shell may exist already, and asyncio would
        # kill the shell alone, not what it forked; stop the whole group
        with contextlib.suppress(OSError):
            late = await spawn
            with contextlib.suppress(ProcessLookupError):
                os.killpg(late.pid, signal.SIGKILL)
            await late.wait()
        raise
    except OSError as exc:
        raise ToolFailed(f"cannot start /bin/sh: {exc.strerror}") from None
    kept = bytearray()
    timed_out = False
    try:
        assert proc.stdout is not None
        try:
            async with asyncio.timeout(kernel.s.tool_timeout_s):
                while chunk := await proc.stdout.read(65536):
                    kept += chunk[: MAX_OUTPUT - len(kept)]
                await proc.wait()
        except TimeoutError:
            timed_out = True
    finally:
        # also on cancellation (the client left, shutdown, a sibling failed)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await asyncio.shield(proc.wait())
    out = kept.decode("utf-8", "replace")
    if timed_out:
        raise ToolFailed(f"command timed out after {kernel.s.tool_timeout_s:g} s and was killed\n{out}")
    if proc.returncode != 0:
        raise ToolFailed(f"command exited with status {proc.returncode}\n{out}")
    return out or "(no output, exit status 0)"


async def knowledge_create(ctx: RunContext[TurnDeps], title: str, content: str) -> str:
    """Create a knowledge entry (a file in the data directory) and add it to the index."""

    async def body() -> str:
        if not _NAME_RE.fullmatch(title):
            raise ToolFailed(f"title {title!r} is not usable as a file name: use 1-128 of A-Z a-z 0-9 _ . -")
        folder = ctx.deps.kernel.s.data_dir / "knowledge"
        folder.mkdir(mode=0o700, exist_ok=True)
        path = folder / f"{title}.md"
        try:
            path.write_text(content)
            # the index is a read-modify-write: why this tool is not parallel-safe
            index = folder / "INDEX"
            titles = index.read_text().splitlines() if index.exists() else []
            if title not in titles:
                index.write_text("\n".join([*titles, title]) + "\n")
        except OSError as exc:
            raise ToolFailed(f"cannot write {path}: {exc.strerror}") from None
        return f"created knowledge entry {title} ({len(content.encode())} bytes) at knowledge/{title}.md"

    return await _framed(ctx, "knowledge_create", body())


async def _no_model(what: str, path: str) -> str:
    raise ToolFailed(f"{what} {path}: this bridge has no image model")


async def img_describe(ctx: RunContext[TurnDeps], path: str) -> str:
    """Describe an image. (No model here: always an error result.)"""
    return await _framed(ctx, "img_describe", _no_model("img_describe", path))


async def ocr(ctx: RunContext[TurnDeps], path: str) -> str:
    """Read the text in an image. (No model here: always an error result.)"""
    return await _framed(ctx, "ocr", _no_model("ocr", path))


async def resident_start(ctx: RunContext[TurnDeps], name: str, argv: list[str]) -> str:
    """Start a named background process that outlives the turn (stopped with the kernel)."""
    return await _framed(ctx, "resident_start", ctx.deps.kernel.start_resident(name, argv))


async def notify(ctx: RunContext[TurnDeps], text: str) -> str:
    """Broadcast a text to every connected client."""

    async def body() -> str:
        n = ctx.deps.kernel.broadcast({"type": "notify", "text": text})
        return f"notified {n} connection(s): {text}"

    return await _framed(ctx, "notify", body())


def make_agent(s: Settings) -> tuple[Agent[TurnDeps, str], AsyncOpenAI]:
    # max_retries=0 by default: the SDK's default 2 retries would turn the mock's
    # `!err` (a 500) into a slow success and hide the fault. --max-retries 2 puts
    # the SDK's own retry loop back, for measuring it against the mock's fault
    # schedules (docs/resilience-pydantic-ai.md). AsyncOpenAI reads
    # OPENAI_BASE_URL and OPENAI_API_KEY from the environment.
    client = AsyncOpenAI(max_retries=s.max_retries, timeout=s.llm_timeout_s)
    provider = OpenAIProvider(openai_client=client)
    # Explicit model classes: the `openai:` string prefix means the Responses API.
    model_cls = OpenAIChatModel if s.llm_api == "chat" else OpenAIResponsesModel
    tools = [
        Tool(lookup),
        Tool(cmd_run),
        # not parallel-safe (the index above); sequential=True is a barrier in 2.x
        Tool(knowledge_create, sequential=True),
        Tool(img_describe),
        Tool(ocr),
        Tool(resident_start, sequential=True),
        Tool(notify, sequential=True),
    ]
    # retries=1 is pydantic-ai's own default for tools: a call whose arguments fail
    # validation goes back to the model as a retry prompt (a tool result), as a
    # kernel reports bad arguments. It is not a transport retry.
    agent: Agent[TurnDeps, str] = Agent(model_cls(s.model, provider=provider), deps_type=TurnDeps, tools=tools, system_prompt=SYSTEM_PROMPT, retries=1)
    return agent, client


# --- the kernel -----------------------------------------------------------------


class Kernel:
    def __init__(self, s: Settings) -> None:
        self.s = s
        self.stats = Stats()
        self.agent, self.client = make_agent(s)
        self.conns: set[Conn] = set()
        self.residents: dict[str, asyncio.subprocess.Process] = {}
        self.stopping = False
        self.started = time.time()
        self.framework = f"pydantic-ai {pydantic_ai.__version__}"

    # tools' side of the kernel

    def broadcast(self, frame: dict[str, Any]) -> int:
        n = 0
        for c in list(self.conns):
            if c.authed and not c.closed:
                c.send(frame)
                n += 1
        return n

    async def start_resident(self, name: str, argv: list[str]) -> str:
        if not _NAME_RE.fullmatch(name):
            raise ToolFailed(f"resident name {name!r} is invalid: use 1-128 of A-Z a-z 0-9 _ . -")
        if not argv:
            raise ToolFailed("argv must be a non-empty list of strings")
        old = self.residents.get(name)
        if old is not None and old.returncode is None:
            raise ToolFailed(f"a resident named {name} is running already (pid {old.pid})")
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv, cwd=self.s.data_dir, stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            )
        except OSError as exc:
            raise ToolFailed(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        self.residents[name] = proc
        return f"resident {name} started: pid {proc.pid}"

    def stats_frame(self) -> dict[str, Any]:
        alive = {n: p for n, p in self.residents.items() if p.returncode is None}
        queued = sum(c.inputs.qsize() for c in self.conns)
        return {
            "type": "stats",
            **dataclasses.asdict(self.stats),
            "rejected": 0,
            "duplicates": 0,
            "queued": queued,
            "children": len(alive),
            "residents": [{"name": n, "pid": p.pid} for n, p in alive.items()],
            "connections": len(self.conns),
            "llm_state": "unknown",  # this bridge never probes its LLM
            "batch": "serial" if self.s.sequential else "barrier",
            "llm_api": self.s.llm_api,
            "framework": self.framework,
            "pid": os.getpid(),
            "uptime_s": round(time.time() - self.started, 3),
        }

    # the socket

    async def serve(self) -> None:
        self.s.socket.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.s.socket.unlink()
        old = os.umask(0o177)  # the socket is 0600 from its first instant
        try:
            server = await asyncio.start_unix_server(self.on_client, path=str(self.s.socket), limit=MAX_FRAME + 1)
        finally:
            os.umask(old)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        print(f"pydantic-ai bridge listening on {self.s.socket}", flush=True)
        await stop.wait()
        await self.shutdown(server)

    async def shutdown(self, server: asyncio.Server) -> None:
        self.stopping = True
        server.close()
        with contextlib.suppress(FileNotFoundError):
            self.s.socket.unlink()
        conns = list(self.conns)
        for c in conns:
            while not c.inputs.empty():
                input_id, _ = c.inputs.get_nowait()
                self.end_turn(c, input_id, "shutdown", "the kernel is stopping")
            if c.worker is not None:
                c.worker.cancel()  # run_turn answers its input with `shutdown`
        await asyncio.gather(*(c.worker for c in conns if c.worker is not None), return_exceptions=True)
        for c in conns:
            if not c.closed:
                c.writer.close()
                with contextlib.suppress(Exception):
                    async with asyncio.timeout(2):
                        await c.writer.wait_closed()
        for p in self.residents.values():
            if p.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGKILL)
                await p.wait()
        await self.client.close()

    async def on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.stopping:
            writer.close()
            return
        conn = Conn(self, reader, writer)
        self.conns.add(conn)
        self.stats.connections_total += 1
        try:
            await self.serve_conn(conn)
        except (ConnectionError, OSError):
            pass
        finally:
            self.conns.discard(conn)
            if conn.worker is not None and not conn.worker.done():
                # the client left: its running turn is cancelled, its tools killed
                conn.worker.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await conn.worker
            if not conn.closed:
                conn.closed = True
                writer.close()

    async def read_frame(self, conn: Conn) -> dict[str, Any] | None | str:
        """A frame, None at EOF, or the name of what was wrong with the line."""
        try:
            line = await conn.reader.readline()
        except ValueError:  # asyncio's LimitOverrunError: a line over MAX_FRAME
            return "too_large"
        if not line:
            return None
        try:
            frame = json.loads(line)
        except ValueError:
            return "bad_json"
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            return "bad_frame"
        return frame

    async def serve_conn(self, conn: Conn) -> None:
        try:
            async with asyncio.timeout(self.s.auth_timeout_s):
                first = await self.read_frame(conn)
        except TimeoutError:
            self.stats.auth_timeouts += 1
            conn.send({"type": "error", "code": "auth_timeout", "message": f"no auth frame within {self.s.auth_timeout_s:g} s"})
            return
        if first is None:
            return
        if not isinstance(first, dict) or first.get("type") != "auth":
            code = "too_large" if first == "too_large" else "auth_required"
            conn.send({"type": "error", "code": code, "message": "the first frame must be {\"type\":\"auth\",\"token\":...}"})
            return
        if first.get("token") != self.s.token:
            self.stats.auth_failures += 1
            conn.send({"type": "error", "code": "auth_failed", "message": "wrong or missing token"})
            return
        conn.authed = True
        conn.send({"type": "response", "kind": "auth", "ok": True, "protocol": PROTOCOL})
        conn.worker = asyncio.create_task(self.conn_worker(conn))
        while True:
            frame = await self.read_frame(conn)
            if frame is None:
                return
            if frame == "too_large":
                self.stats.bad_frames += 1
                conn.send({"type": "error", "code": "too_large", "message": f"a frame over {MAX_FRAME} bytes"})
                return
            if isinstance(frame, str):
                self.stats.bad_frames += 1
                conn.send({"type": "error", "code": frame, "message": "a frame is one JSON object with a string type, one per line"})
                continue
            self.on_frame(conn, frame)

    def on_frame(self, conn: Conn, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "stats":
            conn.send(self.stats_frame())
            return
        if kind == "auth":
            self.stats.bad_frames += 1
            conn.send({"type": "error", "code": "bad_frame", "message": "auth was sent twice"})
            return
        if kind != "input":
            conn.send({"type": "error", "code": "unknown_type", "message": f"unknown frame type {kind!r}; a client sends auth, input or stats"})
            return
        input_id, text = frame.get("id"), frame.get("text")
        if isinstance(input_id, bool) or not (isinstance(input_id, int) or (isinstance(input_id, str) and 1 <= len(input_id) <= 256)):
            self.stats.bad_frames += 1
            conn.send({"type": "error", "code": "bad_frame", "message": "input needs an id: an integer or a string of 1-256 characters"})
            return
        problem = None
        if not isinstance(text, str) or not text:
            problem = "input needs a non-empty string text"
        elif frame.get("priority") not in (None, "normal", "interrupt"):
            problem = "priority must be \"interrupt\" or absent"
        elif "session" in frame:
            problem = "this bridge keeps no sessions: send inputs without a session field"
        if problem:
            self.stats.bad_frames += 1
            conn.send({"type": "error", "id": input_id, "code": "bad_frame", "message": problem})
            return
        # priority "interrupt" is accepted and queued like any input: this bridge
        # does not preempt (its contract says interrupts = false)
        conn.inputs.put_nowait((input_id, text))

    async def conn_worker(self, conn: Conn) -> None:
        while True:
            input_id, text = await conn.inputs.get()
            # counted here, not at arrival: an input an idle worker is about to
            # take is not waiting
            self.stats.peak_queued = max(self.stats.peak_queued, sum(c.inputs.qsize() for c in self.conns))
            await self.run_turn(conn, input_id, text)

    def end_turn(self, conn: Conn, input_id: Any, code: str, message: str) -> None:
        self.stats.executed += 1
        self.stats.failed += 1
        conn.send({"type": "error", "id": input_id, "code": code, "message": message})

    async def run_turn(self, conn: Conn, input_id: Any, text: str) -> None:
        deps = TurnDeps(self, conn, input_id)
        mode = "sequential" if self.s.sequential else "parallel"
        self.stats.running += 1
        try:
            # the framework's own run-scoped mode, not a lock of ours: every call a barrier
            with Agent.parallel_tool_call_execution_mode(mode):
                result = await self.agent.run(text, deps=deps, usage_limits=UsageLimits(request_limit=self.s.max_steps))
        except asyncio.CancelledError:
            if self.stopping:
                self.end_turn(conn, input_id, "shutdown", "the kernel is stopping")
            else:
                self.stats.abandoned += 1
            raise
        except UsageLimitExceeded as exc:
            self.end_turn(conn, input_id, "max_steps", str(exc))
        except ModelTimeoutError as exc:
            self.end_turn(conn, input_id, "llm_timeout", str(exc))
        except ModelConnectionError as exc:
            # the SDK says "Connection error." both when nothing answers and when
            # the LLM cut its response; only the cause tells them apart
            code = "llm_unreachable" if _never_connected(exc) else "llm_error"
            self.end_turn(conn, input_id, code, f"{exc} ({_root_cause(exc)})")
        except (ModelAPIError, UnexpectedModelBehavior) as exc:
            self.end_turn(conn, input_id, "llm_error", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - one input's bug ends that turn, not the kernel
            log.exception("turn %r crashed", input_id)
            self.end_turn(conn, input_id, "internal", f"{type(exc).__name__}: {exc}")
        else:
            self.stats.executed += 1
            conn.send({"type": "response", "id": input_id, "text": result.output})
        finally:
            self.stats.running -= 1


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        cur = cur.__cause__ or cur.__context__
    return out


def _never_connected(exc: BaseException) -> bool:
    # by name: the SDK's transport is httpx or httpx2 depending on its version
    return any(isinstance(c, ConnectionRefusedError) or type(c).__name__ == "ConnectError" for c in _causes(exc))


def _root_cause(exc: BaseException) -> str:
    last = _causes(exc)[-1]
    return f"{type(last).__name__}: {last}"


def parse_args(argv: list[str] | None = None) -> Settings:
    p = argparse.ArgumentParser(description="A small agent kernel on pydantic-ai, speaking kstress's socket protocol v1.")
    p.add_argument("--socket", required=True, type=Path, help="Unix socket to listen on.")
    p.add_argument("--data-dir", type=Path, default=Path("."), help="Where the tools work and write. [default: .]")
    p.add_argument("--model", default="kstress-mock", help="Model name sent to the LLM. [default: kstress-mock]")
    p.add_argument("--llm-api", choices=("chat", "responses"), default="chat",
                   help="OpenAI chat completions (OpenAIChatModel) or Responses (OpenAIResponsesModel). [default: chat]")
    p.add_argument("--sequential", action="store_true",
                   help="Every tool call runs alone: pydantic-ai's parallel_execution_mode('sequential').")
    p.add_argument("--max-steps", type=int, default=8, help="LLM requests one turn may make. [default: 8]")
    p.add_argument("--llm-timeout", type=float, default=30.0,
                   help="The openai client's timeout: seconds it waits for a connection, a response or the next bytes of a stream. [default: 30]")
    p.add_argument("--max-retries", type=int, default=0,
                   help="The openai client's max_retries: retries after the first attempt (the SDK's own default is 2). [default: 0]")
    p.add_argument("--tool-timeout", type=float, default=120.0, help="Seconds one shell command may take. [default: 120]")
    p.add_argument("--auth-timeout", type=float, default=10.0, help="Seconds a new connection has to authenticate. [default: 10]")
    a = p.parse_args(argv)
    # the token only from the environment: on a command line any local user reads it with ps
    token = os.environ.get("KERNEL_TOKEN")
    if not token:
        p.error("KERNEL_TOKEN is not set: the auth token comes from the environment, never from argv")
    if not os.environ.get("OPENAI_BASE_URL"):
        # the SDK would fall back to OpenAI's own URL: refuse rather than send test traffic there
        p.error("OPENAI_BASE_URL is not set: point it at the LLM (kstress sets it from {llm_url})")
    if not os.environ.get("OPENAI_API_KEY"):
        p.error("OPENAI_API_KEY is not set (any value does for the mock)")
    if a.max_steps < 1:
        p.error("--max-steps must be at least 1")
    if not 0 <= a.max_retries <= 100:
        p.error(f"--max-retries {a.max_retries} is out of range: give a whole number from 0 to 100 (the SDK's default is 2)")
    if not a.llm_timeout > 0:
        p.error(f"--llm-timeout {a.llm_timeout:g} must be above 0 seconds (the SDK's default is 600)")
    return Settings(
        socket=a.socket.absolute(), data_dir=a.data_dir.absolute(), token=token, model=a.model, llm_api=a.llm_api,
        sequential=a.sequential, max_steps=a.max_steps, llm_timeout_s=a.llm_timeout, max_retries=a.max_retries, tool_timeout_s=a.tool_timeout,
        auth_timeout_s=a.auth_timeout,
    )


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    s = parse_args(argv)
    asyncio.run(Kernel(s).serve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
