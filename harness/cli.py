"""The `kstress` command line: parse, call one library function, print, map
exceptions to exit codes (docs/results.md). Nothing else lives here."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click

from . import __version__
from .errors import EXIT_INTERNAL, EXIT_USAGE, KstressError, UsageError


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


# --- launch / stop / status -------------------------------------------------------


def _target_options(f):
    for opt in reversed(
        [
            click.option("--target", "target_file", type=click.Path(dir_okay=False, path_type=Path), help="Target TOML file."),
            click.option("--bin", "bin_", help="Binary to run (default: the reference kernel)."),
            click.option("--arg", "args", multiple=True, help="Extra argument for the binary (repeatable)."),
            click.option("--protocol", help="Socket protocol adapter, module:Class."),
            click.option("--mechanism", type=click.Choice(["auto", "netns", "userns"]), default="auto", show_default=True, help="Sandbox mechanism."),
            click.option("--tool-ms", default=200, show_default=True, type=int, help="Mock: base sleep of !slowbatch tools."),
            click.option("--mixed-ms", default=50, show_default=True, type=int, help="Mock: sleep of !mixed shell calls."),
        ]
    ):
        f = opt(f)
    return f


def launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms):
    from .launcher import LaunchSettings
    from .target import load_target, spec_from_flags

    if target_file is not None and bin_ is not None:
        raise UsageError("--target and --bin are exclusive: give one way to start the binary")
    if target_file is not None:
        spec = load_target(target_file).with_args(*args, *extra)
        if protocol:
            from dataclasses import replace

            spec = replace(spec, protocol=protocol)
    else:
        spec = spec_from_flags(bin_, tuple(args), tuple(extra), protocol)
    return LaunchSettings(target=spec, mechanism=mechanism, tool_ms=tool_ms, mixed_ms=mixed_ms)


@cli.command("launch", context_settings={"ignore_unknown_options": False})
@_target_options
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the sandbox to be ready.")
@click.argument("extra", nargs=-1)
def launch_cmd(target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, timeout, extra) -> None:
    """Start the target and the mock in a private sandbox, detached; print
    `socket:` and `state:` lines. ARGS after `--` go to the target."""
    from .supervisor import start_detached

    launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)  # validate here, fail fast
    argv = []
    if target_file is not None:
        argv += ["--target", str(target_file)]
    if bin_ is not None:
        argv += ["--bin", bin_]
    for a in args:
        argv += ["--arg", a]
    if protocol:
        argv += ["--protocol", protocol]
    argv += ["--mechanism", mechanism, "--tool-ms", str(tool_ms), "--mixed-ms", str(mixed_ms), "--", *extra]
    state_path, state = start_detached(argv, timeout)
    click.echo(f"socket: {state['socket']}")
    click.echo(f"state: {state_path}")
    click.echo(f"namespace: {state.get('namespace')} ({state.get('mechanism')})")
    click.echo(f"target: {' '.join(state.get('argv', []))}")


@cli.command("supervise", hidden=True)
@_target_options
@click.argument("extra", nargs=-1)
def supervise_cmd(target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, extra) -> None:
    from .supervisor import supervise

    try:
        settings = launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)
    except KstressError as exc:
        click.echo(f"error {exc.exit_code} {exc}")
        sys.exit(exc.exit_code)
    sys.exit(asyncio.run(supervise(settings, sys.stdout)))


@cli.command("stop")
@click.option("--state", type=click.Path(dir_okay=False, path_type=Path), help="State file (default: the running sandbox).")
def stop_cmd(state) -> None:
    """Stop the detached sandbox. Exit 1, naming them, when the target left
    processes behind in the namespace (orphans)."""
    from .supervisor import stop_running

    teardown = stop_running(state)
    click.echo(f"target exit code: {teardown.get('returncode')}")
    orphans = teardown.get("orphans") or []
    if orphans:
        for o in orphans:
            click.echo(f"orphan: pid {o['pid']}: {o['cmdline']}")
        _fail(f"{len(orphans)} orphan process(es) were left in the namespace after the target exited", 1)
    click.echo("stopped: no orphans")


@cli.command("status")
@click.option("--state", type=click.Path(dir_okay=False, path_type=Path), help="State file (default: the running sandbox).")
def status_cmd(state) -> None:
    """Processes, mock and kernel health, kernel stats of the running sandbox."""
    from .status import show_status

    asyncio.run(show_status(state))


# --- kcli -------------------------------------------------------------------------


def _endpoint_options(f):
    for opt in reversed(
        [
            click.option("--state", type=click.Path(dir_okay=False, path_type=Path), help="State file of a sandbox."),
            click.option("--socket", type=click.Path(path_type=Path), help="Kernel socket (instead of a sandbox)."),
            click.option("--token", help="Auth token (default: the sandbox's)."),
            click.option("--protocol", help="Socket protocol adapter, module:Class."),
        ]
    ):
        f = opt(f)
    return f


@cli.group("kcli")
def kcli_group() -> None:
    """Talk to a running kernel by hand."""


@kcli_group.command("send")
@_endpoint_options
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the turn to end.")
@click.option("--raw", is_flag=True, help="Send the text as is (no nonce suffix).")
@click.argument("text")
def kcli_send(state, socket, token, protocol, timeout, raw, text) -> None:
    """Send one input; print its frames and `verdict: ok` or the failure (exit 1)."""
    from .kcli import resolve_endpoint, send_one

    ep = resolve_endpoint(socket, state, token, protocol)
    verdict = asyncio.run(send_one(ep, text, timeout, sys.stdout, raw=raw))
    sys.exit(0 if verdict.passed else 1)


@kcli_group.command("stats")
@_endpoint_options
def kcli_stats(state, socket, token, protocol) -> None:
    """Print the kernel's stats frame."""
    from .kcli import resolve_endpoint, stats

    asyncio.run(stats(resolve_endpoint(socket, state, token, protocol), sys.stdout))


@kcli_group.command("shell")
@_endpoint_options
@click.option("--timeout", default=60.0, show_default=True)
def kcli_shell(state, socket, token, protocol, timeout) -> None:
    """Read inputs from stdin, one per line; exit 1 when any failed."""
    from .kcli import resolve_endpoint, shell

    failed = asyncio.run(shell(resolve_endpoint(socket, state, token, protocol), timeout))
    sys.exit(1 if failed else 0)


def main() -> None:
    main_with(None, "kstress")


def main_with(argv: list[str] | None, prog_name: str) -> None:
    """Run the CLI with the exit-code mapping (scripts/ call this)."""
    try:
        cli.main(argv, prog_name=prog_name, standalone_mode=True)
    except KstressError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug in kstress: say so, keep the traceback
        import traceback

        traceback.print_exc()
        _fail(f"internal error: {exc!r} (exit {EXIT_INTERNAL}); please report it", EXIT_INTERNAL)
