"""`python -m mock`: the mock LLM as a program of its own.

Serves until SIGINT or SIGTERM, then closes its connections and exits 0. The
ready line is the contract with whoever started it: exactly one line,
``mock listening on http://HOST:PORT``, once it accepts connections. A bad flag
or file exits 2 with one line on stderr naming the value, the rule and the fix.

Only stdlib and aiohttp here (the mock imports nothing of the harness);
``kstress mock`` and ``scripts/mockllm.py`` are thin aliases of this.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from pathlib import Path
from typing import Sequence, TextIO

from .markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS

EXIT_USAGE = 2


def parser(prog: str = "python -m mock") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description="Run the deterministic mock LLM (OpenAI chat completions, Anthropic Messages, OpenAI Responses) until SIGINT/SIGTERM.")
    p.add_argument("--host", default="127.0.0.1", help="Address to bind. [default: 127.0.0.1]")
    p.add_argument("--port", default=0, type=int, help="Port; 0 picks a free one and prints it. [default: 0]")
    p.add_argument("--ttft-ms", default=0, type=int, help="Delay before the first byte of a stream. [default: 0]")
    p.add_argument("--chunk-delay-ms", default=0, type=int, help="Delay between stream chunks. [default: 0]")
    p.add_argument("--text-chunks", default=20, type=int, help="Pieces a text reply is streamed in. [default: 20]")
    p.add_argument("--tool-ms", default=DEFAULT_TOOL_MS, type=int, help=f"Base sleep of !slowbatch tools. [default: {DEFAULT_TOOL_MS}]")
    p.add_argument("--mixed-ms", default=DEFAULT_MIXED_MS, type=int, help=f"Sleep of the !mixed batch's shell calls. [default: {DEFAULT_MIXED_MS}]")
    p.add_argument("--tools", type=Path, help="Tool catalog (TOML or JSON).")
    p.add_argument("--script", type=Path, help="Fixed reply list (JSON or JSONL), cycled.")
    p.add_argument("--log", type=Path, help="Append one JSON line per request.")
    p.add_argument("--model", default="kstress-mock", help="Model name when a request has none. [default: kstress-mock]")
    p.add_argument("--unix", type=Path, help="Also serve on this unix socket.")
    p.add_argument(
        "--rate-limit",
        metavar="N/s",
        help="Answer 429 with Retry-After past N requests a second across all requests (a token bucket holding one second's worth). [default: no limit]",
    )
    return p


async def serve(settings, out: TextIO = sys.stdout) -> None:  # settings: MockSettings
    """Serve until SIGINT or SIGTERM; print the ready line once listening."""
    from .server import MockServer

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


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    # an alias (`kstress mock`) execs this module and names itself here
    prog = prog or os.environ.get("KSTRESS_MOCK_PROG") or "python -m mock"
    err_prefix = prog.split()[0]
    args = parser(prog).parse_args(argv)
    from .catalog import DEFAULT_CATALOG, load_catalog
    from .errors import ConfigError
    from .faults import parse_rate
    from .script import load_script
    from .markers import VERDICT_KEY_ENV, verdict_key
    from .server import MockSettings

    try:
        settings = MockSettings(
            host=args.host,
            port=args.port,
            ttft_ms=args.ttft_ms,
            chunk_delay_ms=args.chunk_delay_ms,
            text_chunks=args.text_chunks,
            tool_ms=args.tool_ms,
            mixed_ms=args.mixed_ms,
            catalog=load_catalog(args.tools) if args.tools else DEFAULT_CATALOG,
            script=load_script(args.script) if args.script else None,
            log_path=args.log,
            model=args.model,
            unix_path=args.unix,
            rate_limit=None if args.rate_limit is None else parse_rate(args.rate_limit),
            # by environment only: argv is world-readable in /proc, and a
            # kernel that could read the key could forge verdict lines
            verdict_key=verdict_key(os.environ.get(VERDICT_KEY_ENV)),
        )
        asyncio.run(serve(settings))
    except ConfigError as exc:
        print(f"{err_prefix}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # a SIGINT before the handler was installed
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
