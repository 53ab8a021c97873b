"""Helpers of the end-to-end tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

from harness.sandbox.namespace import processes_in


def namespace_gone(name: str | None, inode: int | None, born_before: float | None = None) -> bool:
    """The namespace's /run/netns entry is gone and no process is left in it.
    A freed namespace's inode is reused, by another worker's sandbox too: with
    ``born_before`` (a boot_clock() taken before the sandbox was stopped) only
    processes older than that count, and a namespace made after ours was
    freed holds none of those."""
    if name and Path("/run/netns", name).exists():
        return False
    if not inode:
        return True
    left = []
    for pid in processes_in(inode):
        try:
            if born_before is None or _started(pid) < born_before:
                left.append(pid)
        except (OSError, IndexError, ValueError):
            pass
    return not left


def boot_clock() -> float:
    """Seconds since boot: the clock /proc/PID/stat counts start times in, to
    the tick (psutil's create_time goes through btime, whole seconds only)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _started(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")
