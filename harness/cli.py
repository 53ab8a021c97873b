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


@cli.command("mock", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.pass_context
def mock_cmd(ctx) -> None:
    """Run the deterministic mock LLM (an alias of `python -m mock`; --help lists its flags)."""
    from mock.__main__ import main as mock_main

    sys.exit(mock_main(ctx.args, prog=ctx.command_path, err_prefix="kstress"))


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


# --- scenarios ----------------------------------------------------------------------


def _access_options(f):
    opts = [
        click.option("--launch", is_flag=True, help="Start an own sandbox for this run (with the target options) instead of using the running one."),
        click.option("--state", type=click.Path(dir_okay=False, path_type=Path), help="State file of a running sandbox (default: the current one)."),
        click.option("--socket", type=click.Path(path_type=Path), help="A kernel socket to drive directly, without a sandbox."),
        click.option("--token", help="Auth token (default: the sandbox's)."),
        click.option("--tools", "tools_file", type=click.Path(dir_okay=False, path_type=Path), help="Tool catalog, with --socket."),
        click.option("--out", default=Path("runs"), show_default=True, type=click.Path(file_okay=False, path_type=Path), help="Where run directories go."),
        click.option("--quiet", is_flag=True, help="No live progress line."),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return _target_options(f)


def _access(launch, state, socket, token, tools_file, target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms):
    from .scenarios import Access

    if launch:
        return Access(launch=launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms), tool_ms=tool_ms, mixed_ms=mixed_ms)
    if target_file or bin_ or args or extra:
        raise UsageError("target options (--target/--bin/--arg/ARGS) need --launch; without it the running sandbox is used")
    return Access(state=state, socket=socket, token=token, protocol=protocol, tool_ms=tool_ms, mixed_ms=mixed_ms, tools=tools_file)


def _finish(result) -> None:
    if result.dir is None:  # bad input before anything ran: the message is all
        _fail(result.error or "usage error", result.exit_code)
    click.echo(result.report)
    if result.error:
        click.echo(f"kstress: {result.error}", err=True)
    click.echo(f"run: {result.dir}")
    sys.exit(result.exit_code)


def _ints(value: str, flag: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in value.split(",") if x.strip())
    except ValueError:
        raise UsageError(f"{flag} {value!r}: expected comma-separated integers, e.g. 2,4,8") from None


@cli.command("stress", context_settings={"ignore_unknown_options": False})
@click.option("--conns", default=32, show_default=True, help="Concurrent connections.")
@click.option("--inputs", default=10, show_default=True, help="Inputs per connection.")
@click.option(
    "--mix",
    default=None,
    help="Weighted markers, e.g. '!batch4:3,!slowbatch2:1,text:1'. The last ':N' of an item is always its "
    "weight: write '!err:429:1' for a 429 with weight 1 ('!err:429' is !err with weight 429). "
    "Default: " + "!batch4:3,!slowbatch2:1,!mixed3:1,!img:1,text:2" + ".",
)
@click.option("--interrupts", default=0.0, show_default=True, help="Interrupt-priority inputs per second.")
@click.option("--duration", type=float, help="Stop sending new inputs after S seconds.")
@click.option("--rate", type=float, help="Open model: inputs per second (latency also from the scheduled time).")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True, help="Seconds one turn may take.")
@click.option("--seed", default=1, show_default=True, help="Seed of the marker mix.")
@click.option("--no-dedup-probe", is_flag=True, help="Skip the replay-guard probe (for kernels without one).")
@_access_options
@click.argument("extra", nargs=-1)
def stress_cmd(conns, inputs, mix, interrupts, duration, rate, timeout_s, seed, no_dedup_probe, launch, state, socket, token, tools_file, out, quiet, target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, extra) -> None:
    """Many connections, a marker mix, every turn verified."""
    from .scenarios import StressSettings, run_stress
    from .scenarios.stress import DEFAULT_MIX

    settings = StressSettings(conns=conns, inputs=inputs, mix=DEFAULT_MIX if mix is None else mix, interrupts=interrupts, duration_s=duration, rate=rate, timeout_s=timeout_s, seed=seed, dedup_probe=not no_dedup_probe, out=out, quiet=quiet)
    access = _access(launch, state, socket, token, tools_file, target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)
    _finish(asyncio.run(run_stress(settings, access)))


@cli.command("batch")
@click.option("--n", "ns", default="2,4,8", show_default=True, help="Batch sizes.")
@click.option("--kinds", default="batch,mixed,slowbatch", show_default=True, help="Which batch markers.")
@click.option("--rounds", default=3, show_default=True, help="Turns per marker.")
@click.option("--timeout", "timeout_s", default=60.0, show_default=True)
@_access_options
@click.argument("extra", nargs=-1)
def batch_cmd(ns, kinds, rounds, timeout_s, launch, state, socket, token, tools_file, out, quiet, target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, extra) -> None:
    """!batchN, !mixedN, !slowbatchN with full verification."""
    from .scenarios import BatchSettings, run_batch

    settings = BatchSettings(ns=_ints(ns, "--n"), kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()), rounds=rounds, timeout_s=timeout_s, out=out, quiet=quiet)
    access = _access(launch, state, socket, token, tools_file, target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)
    _finish(asyncio.run(run_batch(settings, access)))


@cli.command("abtest")
@click.option("--n", "ns", default="2,4,8,12", show_default=True, help="Batch sizes.")
@click.option("--rounds", default=6, show_default=True, help="Interleaved rounds per N.")
@click.option("--ab-tool-ms", "ab_tool_ms", type=int, help="Sleep of each tool in the markers (default: the mock's --tool-ms).")
@click.option("--no-expect-concurrency", is_flag=True, help="Do not fail when a parallel-safe batch ran serially.")
@click.option("--timeout", "timeout_s", default=120.0, show_default=True)
@_access_options
@click.argument("extra", nargs=-1)
def abtest_cmd(ns, rounds, ab_tool_ms, no_expect_concurrency, timeout_s, launch, state, socket, token, tools_file, out, quiet, target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, extra) -> None:
    """Concurrency speedup: !slowbatchN vs !serialbatchN, interleaved."""
    from .scenarios import AbtestSettings, run_abtest

    settings = AbtestSettings(ns=_ints(ns, "--n"), rounds=rounds, tool_ms=ab_tool_ms, expect_concurrency=not no_expect_concurrency, timeout_s=timeout_s, out=out, quiet=quiet)
    access = _access(launch, state, socket, token, tools_file, target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)
    _finish(asyncio.run(run_abtest(settings, access)))


@cli.command("cmp")
@click.option("--n", default=4, show_default=True, help="Batch size of dimensions 1 and 2.")
@click.option("--rounds", default=8, show_default=True, help="Rounds of dimensions 1 and 2.")
@click.option("--bombard-conns", default=32, show_default=True)
@click.option("--bombard-rounds", default=3, show_default=True)
@click.option("--stability-rounds", default=20, show_default=True)
@click.option("--tool-ms", default=200, show_default=True, type=int)
@click.option("--alpha", default=0.05, show_default=True)
@click.option("--min-effect", default=0.05, show_default=True)
@click.option("--mechanism", type=click.Choice(["auto", "netns", "userns"]), default="auto", show_default=True)
@click.option("--timeout", "timeout_s", default=60.0, show_default=True)
@click.option("--out", default=Path("runs"), show_default=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--quiet", is_flag=True)
@click.argument("old")
@click.argument("new")
def cmp_cmd(n, rounds, bombard_conns, bombard_rounds, stability_rounds, tool_ms, alpha, min_effect, mechanism, timeout_s, out, quiet, old, new) -> None:
    """OLD vs NEW side by side (each a path, a quoted command line or a target
    TOML); exit 1 when NEW regresses."""
    from .scenarios import CmpSettings, run_cmp

    settings = CmpSettings(old=old, new=new, n=n, rounds=rounds, bombard_conns=bombard_conns, bombard_rounds=bombard_rounds, stability_rounds=stability_rounds, tool_ms=tool_ms, alpha=alpha, min_effect=min_effect, mechanism=mechanism, timeout_s=timeout_s, out=out, quiet=quiet)
    _finish(asyncio.run(run_cmp(settings)))


@cli.command("hold")
@click.option("--conns", default=10_000, show_default=True, help="Connections to hold at once.")
@click.option("--probe", default=32, show_default=True, help="Held connections that send one input at once (keep it within the kernel queue).")
@click.option("--timeout", "timeout_s", default=120.0, show_default=True)
@_access_options
@click.argument("extra", nargs=-1)
def hold_cmd(conns, probe, timeout_s, launch, state, socket, token, tools_file, out, quiet, target_file, bin_, args, protocol, mechanism, tool_ms, mixed_ms, extra) -> None:
    """Open and hold many connections from one process; memory per connection."""
    from .scenarios.hold import HoldSettings, run_hold

    settings = HoldSettings(conns=conns, probe=probe, timeout_s=timeout_s, out=out, quiet=quiet)
    access = _access(launch, state, socket, token, tools_file, target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms)
    _finish(asyncio.run(run_hold(settings, access)))


@cli.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
def report_cmd(run_dir) -> None:
    """Re-render DIR/report.md from the run's raw files and print it."""
    from .report import rerender

    click.echo(rerender(run_dir))

def main() -> None:
    main_with(None, "kstress")


def main_with(argv: list[str] | None, prog_name: str, command: str | None = None) -> None:
    """Run the CLI, or one of its commands as if it were the program (a
    script's usage line then reads `stress.py [OPTIONS]`, not `stress.py
    stress`), with the exit-code mapping."""
    entry = cli if command is None else cli.commands[command]
    try:
        entry.main(argv, prog_name=prog_name, standalone_mode=True, **cli.context_settings)
    except KstressError as exc:
        _fail(str(exc), exc.exit_code)
    except KeyboardInterrupt:
        _fail("interrupted", 130)
    except Exception as exc:  # a bug in kstress: say so, keep the traceback
        import traceback

        traceback.print_exc()
        _fail(f"internal error: {exc!r} (exit {EXIT_INTERNAL}); please report it", EXIT_INTERNAL)
