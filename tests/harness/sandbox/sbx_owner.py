"""A sandbox owner in its own process, for the leak tests.

    python sbx_owner.py --mechanism M --lock-dir DIR [--grace S] [--no-guardian] [--connector]

Starts a sandbox, spawns a plain sleep, a sleep that ignores SIGTERM and a
grandchild in another session (with --connector also the sandbox's connector
and a TCP server inside, with 10 connections to it held through the
connector), prints one JSON line (name, net_inode,
lock_path, guardian_pid, pids, ...) and then waits: for SIGKILL (the leak
tests) or for EOF on stdin (then it closes the sandbox and exits 0)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path

from harness.sandbox.namespace import Sandbox
from harness.wire.transport import Address, Dialer
from sbx_checks import PY, TCP_PROG, start_connector
from sbx_helpers import await_until


async def main(args: argparse.Namespace) -> int:
    async with Sandbox(mechanism=args.mechanism, lock_dir=args.lock_dir, grace_s=args.grace,
                       guardian=not args.no_guardian) as sb:
        # Not on our stdout: asyncio's Process.wait() in the test would wait for
        # every holder of the pipe, and these outlive us on purpose.
        quiet = dict(stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL,
                     stderr=asyncio.subprocess.DEVNULL)
        await sb.spawn(["sleep", "300"], **quiet)
        await sb.spawn(["sh", "-c", "trap '' TERM; sleep 300 & wait"], **quiet)
        await sb.spawn(["sh", "-c", "setsid sleep 300 & exec sleep 300"], **quiet)
        await await_until(lambda: len(sb.pids()) >= 5, 10, "5 processes inside")
        held = []
        dialer = contextlib.AsyncExitStack()
        if args.connector:
            _, port = await start_connector(sb, Path.cwd() / "c.sock")
            server = await sb.spawn([PY, "-c", TCP_PROG, str(port)], stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
            await asyncio.wait_for(server.stdout.readline(), 20)
            d = await dialer.enter_async_context(Dialer(Address("tcp", host="127.0.0.1", port=port, via=str(Path.cwd() / "c.sock"))))
            held = [await d.dial(time.monotonic() + 20) for _ in range(10)]
        print(json.dumps({
            "name": sb.name, "mechanism": sb.mechanism, "net_inode": sb.net_inode,
            "lock_path": str(sb.lock_path), "guardian_pid": sb.guardian_pid, "pids": sb.pids(),
            "timings": sb.timings,
        }), flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # returns at EOF
        for c in held:
            c.close()
        await dialer.aclose()
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mechanism", default="auto")
    parser.add_argument("--lock-dir", type=Path, required=True)
    parser.add_argument("--grace", type=float, default=3.0)  # Sandbox's default
    parser.add_argument("--no-guardian", action="store_true")
    parser.add_argument("--connector", action="store_true")
    sys.exit(asyncio.run(main(parser.parse_args())))
