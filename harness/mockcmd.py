"""`kstress mock`: run the mock LLM in the foreground until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import TextIO

from mock import MockServer, MockSettings


async def serve_mock(settings: MockSettings, out: TextIO = sys.stdout) -> None:
    """Serve until SIGINT or SIGTERM. The ready line is the contract with
    whoever started us: `mock listening on http://HOST:PORT`."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with MockServer(settings) as server:
            print(f"mock listening on {server.url}", file=out, flush=True)
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
