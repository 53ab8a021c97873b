"""Helpers of the end-to-end tests."""

from __future__ import annotations

from pathlib import Path

from harness.sandbox.namespace import processes_in


def namespace_gone(name: str | None, inode: int | None) -> bool:
    if name and Path("/run/netns", name).exists():
        return False
    return not (inode and processes_in(inode))
