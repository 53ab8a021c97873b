"""What a sandbox can leave behind, and a bounded wait for it to be gone.

Plain functions with no pytest in them: the unprivileged runner (sbx_checks.py)
imports this file too."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Callable, Iterable

from harness.sandbox.namespace import NETNS_DIR, processes_in


def alive(pid: int) -> bool:
    """Running (a zombie is dead: it only waits for its parent to reap it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def leftovers(
    name: str | None,
    net_inode: int | None,
    lock_path: str | Path | None,
    pids: Iterable[int] = (),
    born_before: float | None = None,
) -> dict[str, object]:
    """Everything of one sandbox that still exists; {} when nothing does.

    `pids`: processes known to have been inside (the guardian included), so a
    survivor is found even after its namespace's inode was reused.
    `born_before`: a boot_clock() taken before the sandbox was stopped. A freed
    namespace's inode is reused, by another test's sandbox too (the suite runs
    in parallel): with it only processes older than that count as ours."""
    found: dict[str, object] = {}
    known = sorted(p for p in set(pids) if alive(p))
    if known:
        found["known_pids_alive"] = {p: _cmd(p) for p in known}
    if net_inode is not None:
        inside = [p for p in processes_in(net_inode) if alive(p) and _born_before(p, born_before)]
        if inside:
            found["pids_in_namespace"] = {p: _cmd(p) for p in inside}
    if name:
        if os.path.lexists(NETNS_DIR / name):
            found["netns_entry"] = str(NETNS_DIR / name)
        with open("/proc/self/mountinfo") as f:
            mounts = [line.strip() for line in f if name in line]
        if mounts:
            found["mounts"] = mounts
    if lock_path is not None and os.path.lexists(lock_path):
        found["lock_file"] = str(lock_path)
    return found


def boot_clock() -> float:
    """Seconds since boot, the clock /proc/PID/stat's start time counts in
    (wall-clock start times go through btime, whole seconds only)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _born_before(pid: int, t: float | None) -> bool:
    if t is None:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return False
    return ticks / os.sysconf("SC_CLK_TCK") < t


def _cmd(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()[:120]
    except OSError:
        return "?"


def wait_until(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    """Poll `condition` until truthy; TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        time.sleep(0.01)


def wait_gone(info: dict, timeout_s: float) -> tuple[dict, float]:
    """Poll until nothing of the sandbox described by `info` (as printed by
    sbx_owner.py) is left, up to `timeout_s`. Returns (leftovers, seconds)."""
    t0, born_before = time.monotonic(), boot_clock()  # the owner is already gone: nothing of it is born later
    pids = list(info.get("pids", [])) + [info["guardian_pid"]]
    while True:
        left = leftovers(info["name"], info["net_inode"], info["lock_path"], pids, born_before)
        elapsed = time.monotonic() - t0
        if not left or elapsed >= timeout_s:
            return left, elapsed
        time.sleep(0.01)


async def await_until(condition: Callable[[], object], timeout_s: float, what: str) -> object:
    """wait_until for coroutines: polls without blocking the event loop."""
    import asyncio

    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise TimeoutError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.01)
