"""Child processes: how they are started so that none outlives the kernel.

Every child runs in its own session (so a signal to its process group reaches
whatever it forked) and, unless the ``leak-children`` fault is on, with
``PR_SET_PDEATHSIG = SIGKILL``: if the kernel itself is SIGKILLed and gets no
chance to clean up, the kernel (the OS one) kills the child for us. The death
signal is tied to the thread that forked, so children are only ever spawned
from the event loop's (main) thread. Grandchildren (e.g. the ``sleep`` under a
``sh -c``) are not covered by it; on the graceful paths the whole process group
is killed instead.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("refkernel")

PR_SET_PDEATHSIG = 1

try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux/glibc: children get no death signal
    _prctl = None


def _die_with_parent(parent_pid: int) -> None:
    # Runs in the forked child before exec: nothing here may take a lock the
    # parent's other threads could hold (the kernel spawns from its one thread).
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)


def preexec(tied: bool) -> Callable[[], None] | None:
    return functools.partial(_die_with_parent, os.getpid()) if tied else None


def use_pidfd_watcher() -> None:
    """Reap children through pidfds instead of one thread per child (the 3.11
    default): no threads means forking with a preexec hook is safe, and
    hundreds of concurrent tool processes cost no threads."""
    if sys.version_info < (3, 12) and hasattr(os, "pidfd_open"):
        watcher = asyncio.PidfdChildWatcher()
        watcher.attach_loop(asyncio.get_running_loop())
        asyncio.set_child_watcher(watcher)


def killpg(pid: int, sig: int) -> None:
    # The child is a session leader, so its pid is its process group id.
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


async def stop_process(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM the child's group, wait ``grace``, SIGKILL it, always reap.
    Shielded from cancellation: a cancelled caller must not leave it behind."""

    async def _stop() -> None:
        if proc.returncode is None:
            killpg(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace)
            except asyncio.TimeoutError:
                pass
        # Also after a clean exit: kill stragglers it left in its group.
        killpg(proc.pid, signal.SIGKILL)
        await proc.wait()

    task = asyncio.ensure_future(_stop())
    try:
        await asyncio.shield(task)
    except asyncio.CancelledError:
        await task
        raise


@functools.lru_cache(maxsize=1)
def _devnull() -> int:
    return os.open(os.devnull, os.O_RDWR)


class Residents:
    """Resident children: started by a tool, outlive their turn, killed at
    shutdown. Reaped (and forgotten) as soon as they exit on their own."""

    def __init__(self, cwd: Path, limit: int, leak: bool) -> None:
        self._cwd = cwd
        self._limit = limit
        self._leak = leak
        self._procs: dict[str, asyncio.subprocess.Process] = {}
        self._reapers: set[asyncio.Task] = set()
        self.started = 0

    def __len__(self) -> int:
        return len(self._procs)

    def listing(self) -> list[dict[str, Any]]:
        return [{"name": n, "pid": p.pid} for n, p in self._procs.items()]

    async def start(self, name: str, argv: list[str]) -> asyncio.subprocess.Process:
        if name in self._procs:
            raise ValueError(f"a resident named {name!r} is already running (pid {self._procs[name].pid}); pick another name")
        if len(self._procs) >= self._limit:
            raise ValueError(f"{len(self._procs)} resident children are running, the limit is {self._limit} (--max-residents)")
        proc = await asyncio.create_subprocess_exec(
            *argv,
            cwd=self._cwd,
            stdin=_devnull(),
            stdout=_devnull(),
            stderr=_devnull(),
            start_new_session=True,
            preexec_fn=preexec(not self._leak),
        )
        self._procs[name] = proc
        self.started += 1
        task = asyncio.ensure_future(self._reap(name, proc))
        self._reapers.add(task)
        task.add_done_callback(self._reapers.discard)
        log.info("resident %s started: pid %d argv %s", name, proc.pid, argv)
        return proc

    async def _reap(self, name: str, proc: asyncio.subprocess.Process) -> None:
        rc = await proc.wait()
        if self._procs.get(name) is proc:
            del self._procs[name]
        log.info("resident %s (pid %d) exited with %s", name, proc.pid, rc)

    async def aclose(self, grace: float) -> None:
        procs = list(self._procs.values())
        if self._leak:
            # the fault: forget them, as a kernel without a shutdown hook does
            log.warning("leak-children: leaving %d resident children running", len(procs))
            self._procs.clear()
        else:
            await asyncio.gather(*(stop_process(p, grace) for p in procs))
        for t in list(self._reapers):
            t.cancel()
        await asyncio.gather(*self._reapers, return_exceptions=True)

    def kill_now(self) -> None:
        """Last resort when the graceful path ran out of time."""
        if not self._leak:
            for p in self._procs.values():
                killpg(p.pid, signal.SIGKILL)


WORKER_SCRIPT = Path(__file__).with_name("_mediaworker.py")


class MediaWorker:
    """The image/OCR worker: a subprocess asked over a pipe (JSON lines).
    Started on first use, restarted if it died."""

    def __init__(self, cwd: Path, reply_timeout: float = 10.0) -> None:
        self._cwd = cwd
        self._proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task | None = None
        self._pending: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._lock = asyncio.Lock()
        self._reply_timeout = reply_timeout
        self._closed = False
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def _ensure(self) -> asyncio.subprocess.Process:
        async with self._lock:
            if self._closed:
                raise RuntimeError("the kernel is shutting down")
            if not self.alive:
                # -I: the worker needs only the stdlib, not our environment
                self._proc = await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-I",
                    str(WORKER_SCRIPT),
                    cwd=self._cwd,
                    stdin=asyncio.subprocess.PIPE,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=_devnull(),
                    start_new_session=True,
                    preexec_fn=preexec(True),
                )
                self.starts += 1
                self._reader = asyncio.ensure_future(self._read(self._proc))
                log.info("media worker started: pid %d", self._proc.pid)
            assert self._proc is not None
            return self._proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        import json

        assert proc.stdout is not None
        try:
            while True:
                line = await proc.stdout.readline()
                if not line:
                    break
                try:
                    msg = json.loads(line)
                    fut = self._pending.pop(int(msg["id"]))
                except (ValueError, KeyError, TypeError):
                    log.warning("media worker sent an unreadable line: %r", line[:200])
                    continue
                if not fut.done():
                    fut.set_result(msg)
        finally:
            rc = await proc.wait()
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(RuntimeError(f"the media worker exited (status {rc}) before answering"))
            self._pending.clear()

    async def ask(self, op: str, path: str) -> dict[str, Any]:
        import json

        proc = await self._ensure()
        self._next_id += 1
        rid = self._next_id
        fut = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        assert proc.stdin is not None
        try:
            proc.stdin.write(json.dumps({"id": rid, "op": op, "path": path}).encode() + b"\n")
            await proc.stdin.drain()
            return await asyncio.wait_for(fut, self._reply_timeout)
        except asyncio.TimeoutError:
            raise RuntimeError(f"the media worker did not answer within {self._reply_timeout:g} s") from None
        except (BrokenPipeError, ConnectionResetError):
            raise RuntimeError("the media worker is gone (broken pipe)") from None
        finally:
            self._pending.pop(rid, None)

    async def aclose(self, grace: float) -> None:
        async with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None and not proc.stdin.is_closing():
                proc.stdin.close()  # EOF: the worker's cue to exit on its own
            await stop_process(proc, grace)
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    def kill_now(self) -> None:
        if self._proc is not None and self._proc.returncode is None:
            killpg(self._proc.pid, signal.SIGKILL)
