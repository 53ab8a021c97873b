"""Waiting for a condition with a deadline: the only way tests synchronise.
(tests/harness/sandbox keeps its own copy in sbx_helpers.py: those modules are copied
alone into the unprivileged user's tree.)"""

from __future__ import annotations

import asyncio
import time


def wait_until(cond, timeout: float, what: str, interval: float = 0.02):
    """Poll ``cond`` until truthy and return its value; fail naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


async def await_until(cond, timeout: float, what: str, interval: float = 0.02):
    """wait_until without blocking the event loop; ``cond`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while True:
        value = await cond() if asyncio.iscoroutinefunction(cond) else cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(interval)
