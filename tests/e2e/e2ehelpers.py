"""Helpers of the end-to-end tests."""

from __future__ import annotations

import os
import time
from pathlib import Path

import psutil


def namespace_gone(name: str | None, inode: int | None) -> bool:
    if name and Path("/run/netns", name).exists():
        return False
    if inode:
        for p in psutil.process_iter():
            try:
                if os.stat(f"/proc/{p.pid}/ns/net").st_ino == inode:
                    return False
            except OSError:
                continue
    return True


def wait_for(cond, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.05)
