"""Helpers of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import psutil

from harness.sandbox.namespace import processes_in


def namespace_gone(name: str | None, inode: int | None, born_before: float | None = None) -> bool:
    """The namespace's /run/netns entry is gone and no process is left in it.
    A freed namespace's inode is reused, by another worker's sandbox too: with
    ``born_before`` (a time.time() taken before the sandbox was stopped) only
    processes older than that count, and a namespace made after ours was
    freed holds none of those."""
    if name and Path("/run/netns", name).exists():
        return False
    if not inode:
        return True
    left = []
    for pid in processes_in(inode):
        try:
            if born_before is None or psutil.Process(pid).create_time() < born_before:
                left.append(pid)
        except psutil.Error:
            pass
    return not left
