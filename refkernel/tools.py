"""The kernel's tools, and how a batch of calls is scheduled (``--batch``).

Result convention: a failed tool's result text starts with ``ERROR: ``; a
successful one never does (the harness's error pattern is ``^\\s*error\\b``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
from typing import Any, Awaitable, Callable, Sequence

from . import procs
from .convo import Result, ToolCall, ToolSpec
from .settings import KernelSettings

log = logging.getLogger("refkernel")

MAX_OUTPUT = 64 * 1024  # bytes of a command's output kept in its result
MAX_CONTENT = 1 << 20
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_ERRORISH = re.compile(r"(?i)^\s*error\b")


class ToolFailed(Exception):
    """Raised inside a tool: becomes an ``ERROR: <message>`` result."""


def _obj(**props: Any) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _fn(name: str, description: str, params: dict[str, Any]) -> ToolSpec:
    return ToolSpec(name, description, params)


_S = {"type": "string"}

TOOLS: list[ToolSpec] = [
    _fn("lookup", "Look a key up in the knowledge base (read-only, fast).", _obj(key=_S, query=_S)),
    _fn("cmd_run", "Run a shell command in the data directory; returns its output and exit status.", _obj(command=_S)),
    _fn("knowledge_create", "Create a knowledge entry (a file in the data directory).", _obj(title=_S, content=_S)),
    _fn("img_describe", "Describe an image file.", _obj(path=_S)),
    _fn("ocr", "Read the text in an image file.", _obj(path=_S)),
    _fn(
        "resident_start",
        "Start a long-running resident process that outlives this turn.",
        _obj(name=_S, argv={"type": "array", "items": _S, "minItems": 1}),
    ),
    _fn("notify", "Broadcast a notification to every connected client.", _obj(text=_S)),
]

# Which tools may run at the same time as others. knowledge_create updates the
# knowledge index (read-modify-write); resident_start and notify have effects
# outside the turn. An unknown tool is treated as unsafe.
PARALLEL_SAFE = {
    "lookup": True,
    "cmd_run": True,
    "knowledge_create": False,
    "img_describe": True,
    "ocr": True,
    "resident_start": False,
    "notify": False,
}


def _str_arg(args: dict[str, Any], key: str, limit: int = 64 * 1024) -> str:
    v = args.get(key)
    if not isinstance(v, str):
        raise ToolFailed(f"argument {key!r} must be a string, got {type(v).__name__}")
    if len(v) > limit:
        raise ToolFailed(f"argument {key!r} is {len(v)} characters long, the limit is {limit}")
    return v


class Toolbox:
    def __init__(
        self,
        settings: KernelSettings,
        residents: procs.Residents,
        media: procs.MediaWorker,
        broadcast: Callable[[dict[str, Any]], int],
    ) -> None:
        self.s = settings
        self.residents = residents
        self.media = media
        self.broadcast = broadcast
        self.knowledge = settings.data_dir / "knowledge"
        self._impl: dict[str, Callable[[dict[str, Any]], Awaitable[str]]] = {
            "lookup": self.lookup,
            "cmd_run": self.cmd_run,
            "knowledge_create": self.knowledge_create,
            "img_describe": lambda a: self.media_op("img_describe", a),
            "ocr": lambda a: self.media_op("ocr", a),
            "resident_start": self.resident_start,
            "notify": self.notify,
        }
        self.cmd_running = 0

    # --- one call ---------------------------------------------------------------

    async def run(self, call: ToolCall) -> Result:
        impl = self._impl.get(call.name)
        try:
            if impl is None:
                raise ToolFailed(f"unknown tool {call.name!r}; this kernel has {', '.join(self._impl)}")
            try:
                args = json.loads(call.arguments) if call.arguments.strip() else {}
            except ValueError as exc:
                raise ToolFailed(f"the arguments of {call.name} are not valid JSON ({exc}): {call.arguments[:200]!r}") from None
            if not isinstance(args, dict):
                raise ToolFailed(f"the arguments of {call.name} must be a JSON object, got {type(args).__name__}")
            out = await impl(args)
            if _ERRORISH.search(out):
                out = "output:\n" + out  # a success must never read as a failure
            return Result(call, True, out)
        except ToolFailed as exc:
            message = str(exc)
        except Exception as exc:  # a bug in a tool must fail the call, not the batch
            log.exception("tool %s crashed", call.name)
            message = f"internal error in {call.name}: {exc!r}"
        if self.s.has("swallow-tool-errors"):
            # the fault: the failure text is passed on as if it were the output
            return Result(call, True, message)
        return Result(call, False, f"ERROR: {message}")

    # --- the tools --------------------------------------------------------------

    async def lookup(self, args: dict[str, Any]) -> str:
        key = _str_arg(args, "key", 1024)
        query = _str_arg(args, "query", 4096) if "query" in args else ""
        digest = hashlib.sha256(f"{key}\0{query}".encode()).hexdigest()[:16]
        return f"lookup {key}: entry {digest} (query {query!r})"

    async def cmd_run(self, args: dict[str, Any]) -> str:
        command = _str_arg(args, "command")
        self.cmd_running += 1
        spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(
            "/bin/sh",
            "-c",
            command,
            cwd=self.s.data_dir,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=procs.preexec(True),
        ))
        try:
            proc = await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # Cancelled mid-spawn (the client left, shutdown): the child may
            # exist already, and asyncio's own cleanup would SIGKILL the shell
            # alone, not what it has forked. Let the spawn finish, stop the group.
            try:
                await procs.stop_process(await spawn, 0.5)
            except OSError:
                pass  # it never started
            finally:
                self.cmd_running -= 1
            raise
        except OSError as exc:
            self.cmd_running -= 1
            raise ToolFailed(f"cannot start /bin/sh: {exc}") from None
        kept = bytearray()
        dropped = 0
        timed_out = False
        try:
            assert proc.stdout is not None
            try:
                async with asyncio.timeout(self.s.tool_timeout):
                    while chunk := await proc.stdout.read(65536):
                        room = MAX_OUTPUT - len(kept)
                        kept += chunk[:room]
                        dropped += max(0, len(chunk) - room)
                    await proc.wait()
            except TimeoutError:
                timed_out = True
        finally:
            # Kills what the command left in its group too; also on cancellation.
            await procs.stop_process(proc, 0.5)
            self.cmd_running -= 1
        out = kept.decode("utf-8", "replace")
        if dropped:
            out += f"\n[... {dropped} more bytes of output dropped]"
        if timed_out:
            raise ToolFailed(f"command timed out after {self.s.tool_timeout:g} s (--tool-timeout) and was killed\n{out}")
        rc = proc.returncode
        if rc != 0:
            why = f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exited with status {rc}"
            raise ToolFailed(f"command {why}\n{out}")
        return out if out else "(no output, exit status 0)"

    async def knowledge_create(self, args: dict[str, Any]) -> str:
        title = _str_arg(args, "title", 128)
        content = _str_arg(args, "content", MAX_CONTENT)
        if not _NAME_RE.fullmatch(title):
            raise ToolFailed(f"title {title!r} is not usable as a file name: use 1-128 of A-Z a-z 0-9 _ . - (not starting with . _ -)")
        self.knowledge.mkdir(mode=0o700, exist_ok=True)
        path = self.knowledge / f"{title}.md"
        tmp = path.with_name(f".{title}.{os.getpid()}.tmp")
        data = content.encode()
        try:
            tmp.write_bytes(data)
            os.replace(tmp, path)
            # The index is a read-modify-write: why this tool is not parallel-safe.
            index = self.knowledge / "INDEX"
            titles = index.read_text().splitlines() if index.exists() else []
            if title not in titles:
                titles.append(title)
                index.write_text("\n".join(titles) + "\n")
        except OSError as exc:
            raise ToolFailed(f"cannot write {path}: {exc.strerror}") from None
        return f"created knowledge entry {title} ({len(data)} bytes) at knowledge/{title}.md"

    async def media_op(self, op: str, args: dict[str, Any]) -> str:
        path = _str_arg(args, "path", 4096)
        try:
            answer = await self.media.ask(op, path)
        except RuntimeError as exc:
            raise ToolFailed(f"{op} {path}: {exc}") from None
        if not answer.get("ok"):
            raise ToolFailed(f"{op} {path}: the media worker answered: {answer.get('error') or 'failure'}")
        return str(answer.get("text", ""))

    async def resident_start(self, args: dict[str, Any]) -> str:
        name = _str_arg(args, "name", 128)
        if not _NAME_RE.fullmatch(name):
            raise ToolFailed(f"resident name {name!r} is invalid: use 1-128 of A-Z a-z 0-9 _ . -")
        argv = args.get("argv")
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise ToolFailed(f"argv must be a non-empty list of strings, got {argv!r}")
        try:
            proc = await self.residents.start(name, argv)
        except ValueError as exc:
            raise ToolFailed(str(exc)) from None
        except OSError as exc:
            raise ToolFailed(f"cannot start {argv[0]!r}: {exc.strerror}") from None
        return f"resident {name} started: pid {proc.pid}"

    async def notify(self, args: dict[str, Any]) -> str:
        text = _str_arg(args, "text", 64 * 1024)
        n = self.broadcast({"type": "notify", "text": text})
        return f"notified {n} connection(s): {text}"

    # --- a batch ---------------------------------------------------------------

    @property
    def mode(self) -> str:
        """The batch mode in effect. The two scheduling faults replace the
        declared mode (serial-tools first), whatever it is."""
        if self.s.has("serial-tools"):
            return "serial"
        if self.s.has("always-parallel"):
            return "parallel"
        return self.s.batch

    async def run_batch(
        self,
        calls: list[ToolCall],
        on_start: Callable[[ToolCall], None],
        on_end: Callable[[Result], None],
    ) -> list[Result]:
        if self.s.has("first-tool-only"):
            calls = calls[:1]
        finished: list[Result] = []
        declared: list[Result | None] = [None] * len(calls)
        gate = asyncio.Semaphore(self.s.max_parallel_tools)  # one per batch: --max-parallel-tools bounds every step

        async def one(i: int) -> None:
            async with gate:
                on_start(calls[i])
                res = await self.run(calls[i])
                finished.append(res)
                declared[i] = res
                on_end(res)

        for step in schedule(calls, self.mode):
            if len(step) == 1:
                await one(step[0])
            else:
                await asyncio.gather(*(one(i) for i in step))
        results = [r for r in declared if r is not None]
        if self.s.has("completion-order"):
            results = finished
        if self.s.has("drop-last-result") and results:
            results = results[:-1]
        return results


def schedule(calls: Sequence[ToolCall], mode: str) -> list[list[int]]:
    """A batch as steps of declared indices: the calls of a step run at once,
    a step starts when the previous one has ended (settings.BATCH_MODES).

    For cmd_run, cmd_run, knowledge_create, cmd_run: whole-batch gives
    [[0], [1], [2], [3]], barrier [[0, 1], [2], [3]], parallel [[0, 1, 2, 3]].
    """
    n = len(calls)
    if mode == "serial" or n <= 1:
        return [[i] for i in range(n)]
    if mode == "parallel":
        return [list(range(n))]
    safe = [PARALLEL_SAFE.get(c.name, False) for c in calls]
    if mode == "whole-batch":
        return [list(range(n))] if all(safe) else [[i] for i in range(n)]
    if mode != "barrier":
        raise ValueError(f"unknown batch mode {mode!r}")
    steps: list[list[int]] = []
    run: list[int] = []
    for i, ok in enumerate(safe):
        if ok:
            run.append(i)
            continue
        if run:
            steps.append(run)
            run = []
        steps.append([i])
    if run:
        steps.append(run)
    return steps
