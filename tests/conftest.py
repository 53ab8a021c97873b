"""Shared test settings: every test must leave no process of its own behind."""

from __future__ import annotations

import time

import psutil
import pytest


def _children() -> dict[int, str]:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out[p.pid] = " ".join(p.cmdline()[:4])
        except psutil.Error:
            pass
    return out


@pytest.fixture(autouse=True)
def no_leaked_processes():
    """Fail a test that leaves a child process running (waits up to 5 s for
    stragglers that are already on their way out)."""
    before = set(_children())
    yield
    deadline = time.monotonic() + 5.0
    leaked = {}
    while time.monotonic() < deadline:
        leaked = {pid: cmd for pid, cmd in _children().items() if pid not in before}
        if not leaked:
            return
        time.sleep(0.05)  # polling a condition with a deadline, not synchronising
    for pid in leaked:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    pytest.fail(f"test leaked processes: {leaked}")
