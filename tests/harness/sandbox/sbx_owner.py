"""A sandbox owner in its own process, for the leak tests.

    python sbx_owner.py --mechanism M --lock-dir DIR [--grace S] [--no-guardian]

Starts a sandbox, spawns a plain sleep, a sleep that ignores SIGTERM and a
grandchild in another session, prints one JSON line (name, net_inode,
lock_path, guardian_pid, pids, ...) and then waits: for SIGKILL (the leak
tests) or for EOF on stdin (then it closes the sandbox and exits 0)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path

from harness.sandbox import Sandbox
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
        print(json.dumps({
            "name": sb.name, "mechanism": sb.mechanism, "net_inode": sb.net_inode,
            "lock_path": str(sb.lock_path), "guardian_pid": sb.guardian_pid, "pids": sb.pids(),
            "timings": sb.timings,
        }), flush=True)
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, sys.stdin.read)  # returns at EOF
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--mechanism", default="auto")
    parser.add_argument("--lock-dir", type=Path, required=True)
    parser.add_argument("--grace", type=float, default=3.0)  # Sandbox's default
    parser.add_argument("--no-guardian", action="store_true")
    sys.exit(asyncio.run(main(parser.parse_args())))
