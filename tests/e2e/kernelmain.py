"""What every test kernel of this folder shares (badkernels, forgekernel,
hostilekernel, refskernel): serve protocol v1 connections on a unix socket
until SIGINT or SIGTERM, print the ready line kstress waits for, and remove
the socket at the end. Standard library only: the sandbox runs these with
the project's interpreter, and a script's own folder is on its sys.path."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
from typing import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def serve_unix(path: str, handler: Handler, what: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = await asyncio.start_unix_server(handler, path, backlog=4096)
    print(f"{what} listening on {path}", flush=True)
    async with server:
        await stop.wait()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def kernel_args(modes: tuple[str, ...] = ()) -> argparse.Namespace:
    """The flags kstress starts a kernel with (`--socket S --llm-url U
    --data-dir D`, a token), and a mode first when the kernel has several;
    anything else is not its business."""
    ap = argparse.ArgumentParser()
    if modes:
        ap.add_argument("mode", choices=modes)
    ap.add_argument("--socket", required=True)
    ap.add_argument("--llm-url", default="")
    ap.add_argument("--data-dir")
    ap.add_argument("--token")
    return ap.parse_known_args()[0]
