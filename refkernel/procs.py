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
import subprocess
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
        # Also after a clean exit: kill stragglers it left in its group. (A group
        # with a member keeps its id reserved; an emptied one could in theory
        # have its number recycled in between -- a full pid_max cycle away.)
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


class _Resident:
    """A resident child watched through a pidfd. Started with plain Popen:
    asyncio's subprocess transport kills its child when the loop closes, which
    would hide the ``leak-children`` fault (and is not ours to rely on)."""

    def __init__(self, name: str, popen: subprocess.Popen, on_exit: Callable[["_Resident"], None]) -> None:
        self.name = name
        self.popen = popen
        self.pid = popen.pid
        self.exited = asyncio.Event()
        self._on_exit = on_exit
        self._loop = asyncio.get_running_loop()
        self._pidfd: int | None = os.pidfd_open(popen.pid)
        self._loop.add_reader(self._pidfd, self._reap)

    def _reap(self) -> None:
        self.detach()
        self.popen.wait()  # readable pidfd: it has exited, this does not block
        self.exited.set()
        self._on_exit(self)

    def detach(self) -> None:
        if self._pidfd is not None:
            self._loop.remove_reader(self._pidfd)
            os.close(self._pidfd)
            self._pidfd = None

    async def stop(self, grace: float) -> None:
        if not self.exited.is_set():
            killpg(self.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(self.exited.wait(), grace)
            except asyncio.TimeoutError:
                killpg(self.pid, signal.SIGKILL)
                await self.exited.wait()
        killpg(self.pid, signal.SIGKILL)  # what it forked into its group


class Residents:
    """Resident children: started by a tool, outlive their turn, killed at
    shutdown. Reaped (and forgotten) as soon as they exit on their own."""

    def __init__(self, cwd: Path, limit: int, leak: bool) -> None:
        self._cwd = cwd
        self._limit = limit
        self._leak = leak
        self._procs: dict[str, _Resident] = {}
        self.started = 0

    def __len__(self) -> int:
        return len(self._procs)

    def listing(self) -> list[dict[str, Any]]:
        return [{"name": n, "pid": r.pid} for n, r in self._procs.items()]

    async def start(self, name: str, argv: list[str]) -> _Resident:
        if name in self._procs:
            raise ValueError(f"a resident named {name!r} is already running (pid {self._procs[name].pid}); pick another name")
        if len(self._procs) >= self._limit:
            raise ValueError(f"{len(self._procs)} resident children are running, the limit is {self._limit} (--max-residents)")
        popen = subprocess.Popen(
            argv,
            cwd=self._cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=preexec(not self._leak),
        )
        res = _Resident(name, popen, self._exited)
        self._procs[name] = res
        self.started += 1
        log.info("resident %s started: pid %d argv %s", name, res.pid, argv)
        return res

    def _exited(self, res: _Resident) -> None:
        if self._procs.get(res.name) is res:
            del self._procs[res.name]
        log.info("resident %s (pid %d) exited with %s", res.name, res.pid, res.popen.returncode)

    async def aclose(self, grace: float) -> None:
        residents = list(self._procs.values())
        if self._leak:
            # the fault: forget them, as a kernel without a shutdown hook does
            log.warning("leak-children: leaving %d resident children running", len(residents))
            for r in residents:
                r.detach()
            self._procs.clear()
            return
        await asyncio.gather(*(r.stop(grace) for r in residents))

    def kill_now(self) -> None:
        """Last resort when the graceful path ran out of time."""
        if not self._leak:
            for r in self._procs.values():
                killpg(r.pid, signal.SIGKILL)


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
