"""`refkernel`: parse flags into KernelSettings, run the kernel until SIGTERM
or SIGINT, map exceptions to exit codes (0 clean stop, 1 failure, 2 usage)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import signal
import sys
from pathlib import Path

from . import __version__, procs
from .errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, ConfigError, RefkernelError
from .kernel import Kernel
from .settings import BACKOFF_MAX_S, BACKOFFS, BATCH_MODES, FAULTS, LLM_APIS, MAX_LLM_RETRIES, RETRY_AFTER_MAX_S, KernelSettings

log = logging.getLogger("refkernel")


def build_parser() -> argparse.ArgumentParser:
    d = KernelSettings  # defaults live on the settings class, once
    p = argparse.ArgumentParser(
        prog="refkernel",
        description="The kstress reference agent kernel: serves protocol v1 on a unix socket, TCP or a WebSocket, "
        "calls an LLM (OpenAI chat completions, OpenAI Responses or Anthropic Messages) and runs its tool calls.",
        epilog="LLM APIs (--llm-api API):\n"
        + "\n".join(f"  {name:<20} {what}" for name, what in LLM_APIS.items())
        + "\n\nbatch modes (--batch MODE):\n"
        + "\n".join(f"  {name:<20} {what}" for name, what in BATCH_MODES.items())
        + "\n\nfaults (--fault NAME, repeatable or comma-separated; serial-tools and always-parallel replace --batch):\n"
        + "\n".join(f"  {name:<20} {what}" for name, what in FAULTS.items())
        + "\n\nready line on stdout: 'refkernel listening on PATH' (unix), 'on tcp:HOST:PORT', 'on ws://HOST:PORT/PATH'"
        " (the real port when 0 was asked for)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--socket", type=Path, metavar="PATH", help="unix socket path to listen on (created 0600); "
                       "the same as --listen unix:PATH")
    where.add_argument("--listen", metavar="ADDR", help="unix:PATH, tcp:HOST:PORT or ws:HOST:PORT[/PATH] "
                       "(protocol v1 over TCP, or over a WebSocket at PATH, default /); port 0 picks a free one")
    p.add_argument("--llm-url", required=True, help="the LLM's base URL, e.g. http://127.0.0.1:PORT/v1 (probed with HEAD)")
    p.add_argument("--llm-api", default=d.llm_api, choices=list(LLM_APIS),
                   help="the API spoken to the LLM, its endpoint under --llm-url (see below; default %(default)s)")
    p.add_argument("--llm-api-key", default=os.environ.get("REFKERNEL_LLM_API_KEY"), metavar="KEY",
                   help="sent as Authorization: Bearer (OpenAI) or x-api-key (Anthropic) "
                   "(default: $REFKERNEL_LLM_API_KEY; unset = a placeholder)")
    p.add_argument("--no-stream", action="store_true",
                   help="ask the LLM for whole replies (stream: false); the text then reaches the client as one delta")
    p.add_argument("--data-dir", required=True, type=Path, help="working directory of cmd_run and knowledge_create")
    # $KSTRESS_TOKEN first: kstress sets it for every kernel it launches, this one
    # under --bin too, where a REFKERNEL_TOKEN from the user's shell is stale
    p.add_argument("--token", default=os.environ.get("KSTRESS_TOKEN") or os.environ.get("REFKERNEL_TOKEN"),
                   help="auth token clients must send (default: $KSTRESS_TOKEN, else $REFKERNEL_TOKEN; unset = any token)")
    p.add_argument("--workers", type=int, default=d.workers, help="turns run at once (default %(default)s)")
    p.add_argument("--queue", type=int, default=d.queue, help="inputs waiting for a worker before 'busy' (default %(default)s)")
    p.add_argument("--dedup-window", type=float, default=d.dedup_window, metavar="S",
                   help="drop an input whose text was accepted in the last S seconds; 0 = off (default %(default)s)")
    p.add_argument("--llm-timeout", type=float, default=d.llm_timeout, metavar="S",
                   help="max wait for the LLM's first byte and between stream chunks (default %(default)s)")
    p.add_argument("--llm-retries", type=int, default=d.llm_retries, metavar="N",
                   help=f"retry a failed LLM request up to N times (0 to {MAX_LLM_RETRIES}): on HTTP 408, 429, 5xx, 529, a lost "
                   "connection, a stream cut short or silent past --llm-timeout; never on other 4xx (default %(default)s: no retries)")
    p.add_argument("--honour-retry-after", action="store_true",
                   help=f"before a retry wait what retry-after-ms / Retry-After said, when it is at most {RETRY_AFTER_MAX_S:g} s "
                   "(a longer one ends the retries); without it, or with no header, --llm-backoff decides")
    p.add_argument("--llm-backoff", default=d.llm_backoff, choices=list(BACKOFFS),
                   help="the wait before a retry: " + "; ".join(f"{k}: {v}" for k, v in BACKOFFS.items()).replace(
                       "BACKOFF_MAX_S", f"{BACKOFF_MAX_S:g} s").replace("%", "%%") + " (default %(default)s)")
    p.add_argument("--llm-backoff-ms", type=int, default=d.llm_backoff_ms, metavar="BASE",
                   help="the base wait of --llm-backoff in milliseconds (default %(default)s, the openai SDK's 0.5 s)")
    p.add_argument("--max-parallel-tools", type=int, default=d.max_parallel_tools, metavar="P",
                   help="tool calls of one batch run at once (default %(default)s)")
    p.add_argument("--batch", default=d.batch, choices=list(BATCH_MODES),
                   help="how a tool batch is scheduled (see below; default %(default)s)")
    p.add_argument("--terse", action="store_true",
                   help="never forward the model's text: no text deltas, and a turn's response text is 'done'")
    p.add_argument("--delay-ms", type=int, default=d.delay_ms, metavar="MS",
                   help="sleep MS inside each turn before its first LLM request: known kernel overhead (default %(default)s)")
    p.add_argument("--fault", action="append", default=[], metavar="NAME", help="switch on a known bug (see below)")
    p.add_argument("--model", default=d.model, help="model name sent to the LLM (default %(default)s)")
    p.add_argument("--auth-timeout", type=float, default=d.auth_timeout, metavar="S",
                   help="close a connection that has not authenticated after S seconds (default %(default)s)")
    p.add_argument("--tool-timeout", type=float, default=d.tool_timeout, metavar="S",
                   help="kill a cmd_run command after S seconds (default %(default)s)")
    p.add_argument("--max-steps", type=int, default=d.max_steps, help="LLM requests per turn, 1 to 100 (default %(default)s)")
    p.add_argument("--session-turns", type=int, default=d.session_turns, metavar="N",
                   help="completed turns kept per session, oldest dropped first (default %(default)s)")
    p.add_argument("--max-sessions", type=int, default=d.max_sessions, metavar="M",
                   help="sessions held at once; past it the least recently used is forgotten (default %(default)s)")
    p.add_argument("--max-write-buffer", type=int, default=d.max_write_buffer, metavar="BYTES",
                   help="drop a client with more than this unsent (default %(default)s)")
    p.add_argument("--conn-backlog", type=int, default=d.conn_backlog, metavar="N",
                   help="inputs one connection may have waiting behind its current one (default %(default)s)")
    p.add_argument("--max-residents", type=int, default=d.max_residents, metavar="N",
                   help="resident children at once (default %(default)s)")
    p.add_argument("--shutdown-grace", type=float, default=d.shutdown_grace, metavar="S",
                   help="bound on the graceful shutdown (default %(default)s)")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    p.add_argument("--version", action="version", version=f"refkernel {__version__}")
    return p


def settings_from_args(args: argparse.Namespace) -> KernelSettings:
    faults = frozenset(f.strip() for item in args.fault for f in item.split(",") if f.strip())
    return KernelSettings(
        socket=args.socket,
        listen=args.listen,
        llm_url=args.llm_url,
        llm_api=args.llm_api,
        llm_api_key=args.llm_api_key or None,
        stream=not args.no_stream,
        data_dir=args.data_dir,
        token=args.token or None,
        workers=args.workers,
        queue=args.queue,
        dedup_window=args.dedup_window,
        llm_timeout=args.llm_timeout,
        max_parallel_tools=args.max_parallel_tools,
        faults=faults,
        model=args.model,
        auth_timeout=args.auth_timeout,
        tool_timeout=args.tool_timeout,
        max_steps=args.max_steps,
        max_write_buffer=args.max_write_buffer,
        conn_backlog=args.conn_backlog,
        max_residents=args.max_residents,
        shutdown_grace=args.shutdown_grace,
        batch=args.batch,
        terse=args.terse,
        delay_ms=args.delay_ms,
        session_turns=args.session_turns,
        max_sessions=args.max_sessions,
        llm_retries=args.llm_retries,
        honour_retry_after=args.honour_retry_after,
        llm_backoff=args.llm_backoff,
        llm_backoff_ms=args.llm_backoff_ms,
    )


def _raise_fd_limit() -> None:
    # Each client is a descriptor: take the hard limit, as servers do.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


async def serve(settings: KernelSettings) -> None:
    """Run until SIGTERM or SIGINT, then shut down gracefully."""
    procs.use_pidfd_watcher()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        async with Kernel(settings) as kernel:
            try:
                print(f"refkernel listening on {kernel.address}", flush=True)
            except OSError:
                pass  # nobody reads our stdout: the listener is the interface anyway
            await stop.wait()
            log.info("signal received: shutting down")
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="refkernel %(levelname)s %(message)s", stream=sys.stderr)
    try:
        settings = settings_from_args(args)
        _raise_fd_limit()
        asyncio.run(serve(settings))
    except ConfigError as exc:
        print(f"refkernel: {exc}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except RefkernelError as exc:
        print(f"refkernel: {exc}", file=sys.stderr)
        sys.exit(EXIT_FAILED)
    sys.exit(EXIT_OK)


if __name__ == "__main__":
    main()
