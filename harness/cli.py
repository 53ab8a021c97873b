"""The `kstress` command line: parse, call one library function, print, map
exceptions to exit codes (docs/results.md). Nothing else lives here."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from . import __version__
from .errors import EXIT_INTERNAL, EXIT_USAGE, KstressError


def _fail(message: str, code: int) -> None:
    click.echo(f"kstress: {message}", err=True)
    sys.exit(code)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kstress")
def cli() -> None:
    """Black-box stress harness for agent kernels."""


@cli.command("mock")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option("--port", default=0, show_default=True, type=int, help="Port; 0 picks a free one and prints it.")
@click.option("--ttft-ms", default=0, show_default=True, type=int, help="Delay before the first byte of a stream.")
@click.option("--chunk-delay-ms", default=0, show_default=True, type=int, help="Delay between stream chunks.")
@click.option("--text-chunks", default=20, show_default=True, type=int, help="Pieces a text reply is streamed in.")
@click.option("--tool-ms", default=200, show_default=True, type=int, help="Base sleep of !slowbatch tools.")
@click.option("--mixed-ms", default=50, show_default=True, type=int, help="Sleep of the !mixed batch's shell calls.")
@click.option("--tools", "tools", type=click.Path(dir_okay=False, path_type=Path), help="Tool catalog (TOML or JSON).")
@click.option("--script", type=click.Path(dir_okay=False, path_type=Path), help="Fixed reply list (JSON or JSONL), cycled.")
@click.option("--log", type=click.Path(dir_okay=False, path_type=Path), help="Append one JSON line per request.")
@click.option("--model", default="kstress-mock", show_default=True, help="Model name when a request has none.")
@click.option("--unix", type=click.Path(dir_okay=False, path_type=Path), help="Also serve on this unix socket.")
def mock_cmd(host, port, ttft_ms, chunk_delay_ms, text_chunks, tool_ms, mixed_ms, tools, script, log, model, unix) -> None:
    """Run the deterministic mock LLM (OpenAI chat completions) until SIGINT/SIGTERM."""
    from mock import DEFAULT_CATALOG, ConfigError, MockSettings, load_catalog, load_script

    from .mockcmd import serve_mock

    try:
        settings = MockSettings(
            host=host,
            port=port,
            ttft_ms=ttft_ms,
            chunk_delay_ms=chunk_delay_ms,
            text_chunks=text_chunks,
            tool_ms=tool_ms,
            mixed_ms=mixed_ms,
            catalog=load_catalog(tools) if tools else DEFAULT_CATALOG,
            script=load_script(script) if script else None,
            log_path=log,
            model=model,
            unix_path=unix,
        )
        asyncio.run(serve_mock(settings))
    except ConfigError as exc:
        _fail(str(exc), EXIT_USAGE)


def main() -> None:
    try:
        cli(prog_name="kstress")
    except KstressError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug in kstress: say so, keep the traceback
        import traceback

        traceback.print_exc()
        _fail(f"internal error: {exc!r} (exit {EXIT_INTERNAL}); please report it", EXIT_INTERNAL)
