"""The `kstress` command line: parse, call one library function, print, map
exceptions to exit codes (docs/results.md). Nothing else lives here.

The scenario commands are built from the registry (harness/scenarios) and the
flags their settings declare (harness/scenarios/options.py); signals are handled here,
at the edge, and nowhere in the library."""

from __future__ import annotations

import asyncio
import json
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Awaitable, Callable

import click

from mock.markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS

from .. import __version__
from .edge import Interrupt
from ..errors import EXIT_INFRA, EXIT_INTERNAL, EXIT_INTERRUPTED, KstressError, UsageError
from ..judge.contract import CONTRACT_HELP


class FiniteFloat(click.types.FloatParamType):
    """A number flag: float() takes 'nan' and 'inf', which no rate, time or
    weight means, and a NaN compared with a limit passes every check (issue 22, item 15)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number: give a number such as 0.5", param, ctx)
        return number


FINITE = FiniteFloat()


class GivenPath(click.Path):
    """A path flag: an empty one is Path('.'), and `--out ''` wrote the run
    into the current directory (issue 22, item 15)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail(f"{value!r} is empty: give a path, e.g. runs", param, ctx)
        return super().convert(value, param, ctx)


def _fail(message: str, code: int) -> None:
    click.echo(f"kstress: {message}", err=True)
    sys.exit(code)


class Kstress(click.Group):
    """The scenario commands come from the registry, built when asked for, so
    that `kstress mock` or `kstress stop` do not import every scenario."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        from ..scenarios import REGISTRY

        return sorted(set(super().list_commands(ctx)) | set(REGISTRY))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        found = super().get_command(ctx, name)
        if found is not None:
            return found
        from ..scenarios import REGISTRY

        return scenario_command(REGISTRY[name]) if name in REGISTRY else None


@click.group(cls=Kstress, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="kstress")
def cli() -> None:
    """Black-box stress harness for agent kernels."""


@cli.command("mock", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}, add_help_option=False)
@click.pass_context
def mock_cmd(ctx) -> None:
    """Run the deterministic mock LLM (an alias of `python -m mock`; --help lists its flags)."""
    # exec, not import: the mock is a program of its own, and the harness uses
    # nothing of it but its pure grammar modules
    env = dict(os.environ, KSTRESS_MOCK_PROG=ctx.command_path)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]))
    os.execve(sys.executable, [sys.executable, "-m", "mock", *ctx.args], env)


# --- shared parameters ----------------------------------------------------------------


def _target_params(multi: bool = False) -> list[click.Parameter]:
    if multi:
        # a scenario that takes several kernels at once (Scenario.kernels)
        which = [
            click.Option(["--target", "target_file"], type=click.Path(dir_okay=False, path_type=Path), multiple=True,
                         help="Target TOML file; repeatable with --launch: several kernels in one sandbox, one shared mock."),
            click.Option(["--bin", "bin_"], multiple=True,
                         help="Binary to run (default: the reference kernel); repeatable with --launch, each a quoted command line, e.g. --bin refkernel --bin 'refkernel --fault first-tool-only'."),
            click.Option(["--weight", "weights"], type=FINITE, multiple=True,
                         help="The share of the load of each kernel, one per --target/--bin in their order (default: an even split)."),
        ]
    else:
        which = [
            click.Option(["--target", "target_file"], type=click.Path(dir_okay=False, path_type=Path), help="Target TOML file."),
            click.Option(["--bin", "bin_"], help="Binary to run (default: the reference kernel)."),
        ]
    return [
        *which,
        click.Option(["--arg", "args"], multiple=True, help="Extra argument for the binary (repeatable)."),
        click.Option(["--protocol"], help="What the kernel speaks: kstress-v1 (the default), agui, a2a, openai-chat, openai-responses (an agent: with --url, or a target file's url), or module:Class (an adapter of your own)."),
        click.Option(["--listen"], type=click.Choice(["unix", "tcp", "ws"]), help="How the launched kernel listens inside the sandbox (default: the target file's, else unix)."),
        click.Option(["--mechanism"], type=click.Choice(["auto", "netns", "userns"]), default="auto", show_default=True, help="Sandbox mechanism."),
        click.Option(["--tool-ms"], default=DEFAULT_TOOL_MS, show_default=True, type=int, help="Mock: base sleep of !slowbatch tools."),
        click.Option(["--mixed-ms"], default=DEFAULT_MIXED_MS, show_default=True, type=int, help="Mock: sleep of !mixed shell calls."),
        click.Option(["--ttft-ms"], default=0, show_default=True, type=int, help="Mock: delay before the first byte of every reply (LLM pacing)."),
        click.Option(["--chunk-delay-ms"], default=0, show_default=True, type=int, help="Mock: delay between the events of a stream (LLM pacing)."),
        click.Option(["--llm-api"], type=click.Choice(["chat", "responses", "anthropic"]), default=None,
                     help="The LLM API the target speaks ({llm_api} in a target file; the reference kernel gets --llm-api). Default: the target file's, else chat."),
        click.Option(["--env", "env_pairs"], multiple=True, metavar="KEY=VALUE",
                     help="An environment variable for the target (repeatable; placeholders such as {llm_url}, {llm_root}, {token} are filled), e.g. --env OPENAI_BASE_URL={llm_url}."),
        click.Option(["--contract", "contract_pairs"], multiple=True, metavar="KEY=VALUE",
                     help=CONTRACT_HELP),
    ]


def _access_params(multi: bool = False) -> list[click.Parameter]:
    return [
        click.Option(["--launch"], is_flag=True, help="Start an own sandbox for this run (with the target options) instead of using the running one."),
        click.Option(["--state"], type=click.Path(dir_okay=False, path_type=Path), help="State file of a running sandbox (default: the current one)."),
        click.Option(["--socket"], metavar="ADDR", help="A kernel to drive directly, without a sandbox: unix:PATH (or PATH), tcp:HOST:PORT or ws://HOST:PORT/PATH (loopback only)."),
        click.Option(["--token"], help="Auth token (default: the sandbox's)."),
        click.Option(["--tools", "tools_file"], type=click.Path(dir_okay=False, path_type=Path), help="Tool catalog: the sandbox mock's with --launch, the one to judge by with --socket."),
        click.Option(["--mock", "mock_addr"], help="With --socket or --url: the mock the kernel talks to (unix:PATH or http://127.0.0.1:PORT), asked for each turn's verdict; needed unless kstress and the mock share KSTRESS_VERDICT_KEY."),
        click.Option(["--url"], metavar="URL", help="An agent already running on loopback, driven over the protocol --protocol names (agui, a2a, openai-chat, openai-responses), e.g. http://127.0.0.1:8000/agui; with --mock."),
        click.Option(["--allow-remote", "allow_remote"], multiple=True, metavar="HOST",
                     help="Aim the load off loopback on purpose: a --socket, --url or --mock on HOST, or a --fleet cluster there, is allowed (repeatable; nothing else is)."),
        *_target_params(multi),
        click.Argument(["extra"], nargs=-1),
    ]


def _endpoint_params() -> list[click.Parameter]:
    return [
        click.Option(["--state"], type=click.Path(dir_okay=False, path_type=Path), help="State file of a sandbox."),
        click.Option(["--socket"], metavar="ADDR", help="A kernel instead of a sandbox: unix:PATH (or PATH), tcp:HOST:PORT or ws://HOST:PORT/PATH (loopback only)."),
        click.Option(["--token"], help="Auth token (default: the sandbox's)."),
        click.Option(["--protocol"], help="Socket protocol adapter, module:Class."),
        click.Option(["--connect-timeout", "connect_timeout"], type=FINITE, default=5.0, show_default=True, help="Seconds to connect and authenticate."),
    ]


def _with(params: Callable[[], list[click.Parameter]]):
    """A decorator putting ``params()`` first among a command's parameters."""

    def deco(f):
        # click's decorators append in reverse; the command reverses them back
        f.__click_params__ = getattr(f, "__click_params__", []) + list(reversed(params()))
        return f

    return deco


def launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms, contract_pairs=(), env_pairs=(), llm_api=None, listen=None, ttft_ms=0, chunk_delay_ms=0, command=None):
    """``command``: a quoted command line (one of several --bin, as cmp takes
    them) instead of --target/--bin."""
    from dataclasses import replace

    from ..sandbox.launcher import LaunchSettings
    from ..sandbox.target import load_target, spec_from_command, spec_from_flags

    if target_file is not None and bin_ is not None:
        raise UsageError("--target and --bin are exclusive: give one way to start the binary")
    if command is not None:
        spec = spec_from_command(command).with_args(*args, *extra)
        if protocol:
            spec = replace(spec, protocol=protocol)
    elif target_file is not None:
        spec = load_target(target_file).with_args(*args, *extra)
        if protocol:
            spec = replace(spec, protocol=protocol)
    else:
        spec = spec_from_flags(bin_, tuple(args), tuple(extra), protocol)
    if listen:
        spec = replace(spec, listen=listen)
    if llm_api is not None:
        spec = replace(spec, llm_api=llm_api)
    if env_pairs:
        env = dict(spec.env)
        for pair in env_pairs:
            k, sep, v = pair.partition("=")
            if not sep or not k.strip():
                raise UsageError(f"--env {pair!r}: expected KEY=VALUE, e.g. --env OPENAI_BASE_URL={{llm_url}}")
            env[k.strip()] = v
        spec = replace(spec, env=env)
    for flag, v in (("--ttft-ms", ttft_ms), ("--chunk-delay-ms", chunk_delay_ms)):
        if not 0 <= v <= 60_000:
            raise UsageError(f"{flag} {v} is invalid: the mock's pacing is whole milliseconds from 0 to 60000")
    pacing = ("--ttft-ms", str(ttft_ms)) * bool(ttft_ms) + ("--chunk-delay-ms", str(chunk_delay_ms)) * bool(chunk_delay_ms)
    return LaunchSettings(target=spec, mechanism=mechanism, tool_ms=tool_ms, mixed_ms=mixed_ms, contract_pairs=tuple(contract_pairs), mock_args=pacing)


def run_edge(make: Callable[[], Awaitable[Any]]) -> Any:
    """Every async command runs under the signal edge (harness/cli/edge.py)."""
    from .edge import EDGE

    return EDGE.run(make)


# --- launch / stop / status -------------------------------------------------------


@cli.command("launch", context_settings={"ignore_unknown_options": False})
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the sandbox to be ready.")
@click.argument("extra", nargs=-1)
@_with(_target_params)
def launch_cmd(target_file, bin_, args, protocol, listen, mechanism, tool_ms, mixed_ms, ttft_ms, chunk_delay_ms, llm_api, env_pairs, contract_pairs, timeout, extra) -> None:
    """Start the target and the mock in a private sandbox, detached; print
    `socket:` and `state:` lines (and `connector:` for a TCP or ws kernel).
    ARGS after `--` go to the target."""
    from ..sandbox.supervisor import start_detached
    from ..sandbox.target import redact

    if not 0 < timeout <= 3600:
        raise UsageError(f"--timeout {timeout!r} is invalid: the seconds to wait for the sandbox, more than 0 and at most 3600")
    launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms, contract_pairs, env_pairs, llm_api, listen, ttft_ms, chunk_delay_ms)  # validate here, fail fast
    argv = []
    if target_file is not None:
        argv += ["--target", str(target_file)]
    if bin_ is not None:
        argv += ["--bin", bin_]
    for a in args:
        argv += ["--arg", a]
    if protocol:
        argv += ["--protocol", protocol]
    for c in contract_pairs:
        argv += ["--contract", c]
    for e in env_pairs:
        argv += ["--env", e]
    if llm_api is not None:
        argv += ["--llm-api", llm_api]
    if listen:
        argv += ["--listen", listen]
    argv += ["--ttft-ms", str(ttft_ms), "--chunk-delay-ms", str(chunk_delay_ms)]
    argv += ["--mechanism", mechanism, "--tool-ms", str(tool_ms), "--mixed-ms", str(mixed_ms), "--", *extra]
    state_path, state = start_detached(argv, timeout)
    click.echo(f"socket: {state['socket']}")
    if state.get("connector"):
        click.echo(f"connector: {state['connector']}")
    click.echo(f"state: {state_path}")
    click.echo(f"namespace: {state.get('namespace')} ({state.get('mechanism')})")
    click.echo(f"target: {' '.join(redact(state.get('argv', []), (state.get('token'),)))}")


@cli.command("supervise", hidden=True)
@click.argument("extra", nargs=-1)
@_with(_target_params)
def supervise_cmd(target_file, bin_, args, protocol, listen, mechanism, tool_ms, mixed_ms, ttft_ms, chunk_delay_ms, llm_api, env_pairs, contract_pairs, extra) -> None:
    from ..sandbox.supervisor import supervise

    try:
        settings = launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms, contract_pairs, env_pairs, llm_api, listen, ttft_ms, chunk_delay_ms)
    except KstressError as exc:
        click.echo(f"error {exc.exit_code} {exc}")
        sys.exit(exc.exit_code)
    sys.exit(asyncio.run(supervise(settings, sys.stdout)))


@cli.command("stop")
@click.option("--state", type=click.Path(dir_okay=False, path_type=Path), help="State file (default: the running sandbox).")
def stop_cmd(state) -> None:
    """Stop the detached sandbox. Exit 1, naming them, when the target left
    processes behind in the namespace (orphans)."""
    from ..sandbox.supervisor import stop_running

    teardown = stop_running(state)
    if not teardown.get("checked", True):
        # the harness's side failed (the supervisor died): not a clean "no orphans"
        _fail(f"stopped, unchecked: {teardown.get('note')}", EXIT_INFRA)
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

    run_edge(lambda: show_status(state))


# --- kcli -------------------------------------------------------------------------


@cli.group("kcli")
def kcli_group() -> None:
    """Talk to a running kernel by hand."""


@kcli_group.command("send")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds to wait for the turn to end.")
@click.option("--raw", is_flag=True, help="Send the text as is (no nonce suffix).")
@click.argument("text")
@_with(_endpoint_params)
def kcli_send(state, socket, token, protocol, connect_timeout, timeout, raw, text) -> None:
    """Send one input; print its frames and `verdict: ok` or the failure (exit 1)."""
    from .kcli import resolve_endpoint, send_one

    ep = resolve_endpoint(socket, state, token, protocol, connect_timeout)
    verdict = run_edge(lambda: send_one(ep, text, timeout, sys.stdout, raw=raw))
    sys.exit(0 if verdict.passed else 1)


@kcli_group.command("stats")
@_with(_endpoint_params)
def kcli_stats(state, socket, token, protocol, connect_timeout) -> None:
    """Print the kernel's stats frame."""
    from .kcli import resolve_endpoint, stats

    ep = resolve_endpoint(socket, state, token, protocol, connect_timeout)
    run_edge(lambda: stats(ep, sys.stdout))


@kcli_group.command("shell")
@click.option("--timeout", default=60.0, show_default=True)
@_with(_endpoint_params)
def kcli_shell(state, socket, token, protocol, connect_timeout, timeout) -> None:
    """Read inputs from stdin, one per line; exit 1 when any failed."""
    from .kcli import resolve_endpoint, shell

    ep = resolve_endpoint(socket, state, token, protocol, connect_timeout)
    failed = run_edge(lambda: shell(ep, timeout))
    sys.exit(1 if failed else 0)


# --- scenarios ----------------------------------------------------------------------


def _kernels(launch, tools_file, target_files, bins, weights, *rest):
    """Several kernels (repeatable --target or --bin): one LaunchSettings
    each, the same flags for all (-- ARGS, --arg, --env, ... go to every
    kernel), their names and weights. A single one is left to _access, as before."""
    from dataclasses import replace

    from ..load.kernels import check_kernel_names, check_weights, command_name, unique_names
    from ..sandbox.target import load_catalog_file

    if not launch:
        raise UsageError(f"{len(target_files) + len(bins)} kernels (--target/--bin given more than once) need --launch: several kernels are started together in one sandbox")
    if target_files and bins:
        raise UsageError("--target and --bin are exclusive: give the kernels all as --target files or all as --bin command lines")
    if target_files:
        settings = [launch_settings(f, None, *rest) for f in target_files]
        names = [ls.target.name for ls in settings]  # the file's name = ..., else its binary's basename
    else:
        settings = [launch_settings(None, None, *rest, command=b) for b in bins]
        names = [command_name(b) for b in bins]
    names = unique_names(names)
    check_kernel_names(names, [f"target file {f}" for f in target_files] or [f"--bin {b!r}" for b in bins])
    if tools_file is not None:
        load_catalog_file(tools_file, "--tools")
        settings = [replace(ls, target=replace(ls.target, tools=str(Path(tools_file).resolve()))) for ls in settings]
    catalogs = {ls.target.tools for ls in settings}
    if len(catalogs) > 1:
        which = ", ".join(f"{n}: {ls.target.tools or 'the default catalog'}" for n, ls in zip(names, settings))
        raise UsageError(f"the kernels share one mock, so one tool catalog, but theirs differ ({which}); give them the same tools (or --tools FILE for all)")
    return settings, tuple(names), check_weights(tuple(weights), names)


def _access(launch, state, socket, token, tools_file, mock_addr, url, target_file, bin_, args, extra, protocol, listen, mechanism, tool_ms, mixed_ms, ttft_ms, chunk_delay_ms, llm_api, env_pairs, contract_pairs, allow_remote=(), weights=None):
    return replace(_access_of(launch, state, socket, token, tools_file, mock_addr, url, target_file, bin_, args, extra, protocol, listen, mechanism, tool_ms, mixed_ms,
                              ttft_ms, chunk_delay_ms, llm_api, env_pairs, contract_pairs, weights), allow_remote=tuple(allow_remote))


def _access_of(launch, state, socket, token, tools_file, mock_addr, url, target_file, bin_, args, extra, protocol, listen, mechanism, tool_ms, mixed_ms, ttft_ms, chunk_delay_ms, llm_api, env_pairs, contract_pairs, weights=None):
    from ..judge.contract import OTHER, merged
    from ..sandbox.sut import Access

    command = None
    if url is not None:
        for flag, value in (("--socket", socket), ("--state", state), ("--token", token)):
            if value is not None:
                raise UsageError(f"--url {url} and {flag} {value} name two systems to drive: --url is an agent already running, "
                                 f"{flag} a protocol v1 kernel; give one")
    if launch:
        # a launched kernel is reached through its own sandbox, with a fresh token per run:
        # these were silently ignored (issue 22, item 15)
        for flag, value in (("--socket", socket), ("--token", token), ("--state", state), ("--mock", mock_addr), ("--url", url)):
            if value is not None:
                raise UsageError(f"{flag} {value} goes to a kernel that is already running; --launch starts its own "
                                 f"(a fresh sandbox, mock and token): drop {flag}, or drop --launch to use that kernel")
    if weights is not None:
        # a scenario that takes several kernels: --target/--bin are tuples
        files, bins = tuple(target_file), tuple(bin_)
        if len(files) + len(bins) > 1:
            rest = (args, extra, protocol, mechanism, tool_ms, mixed_ms, contract_pairs, env_pairs, llm_api, listen, ttft_ms, chunk_delay_ms)
            settings, names, ws = _kernels(launch, tools_file, files, bins, weights, *rest)
            return Access(launch=settings[0], more=tuple(settings[1:]), names=names, weights=ws, tool_ms=tool_ms, mixed_ms=mixed_ms)
        if weights and not launch:
            raise UsageError("--weight goes with several kernels launched together (--launch with --target/--bin repeated)")
        if len(weights) > 1:
            raise UsageError(f"--weight was given {len(weights)} times for 1 kernel: give one --weight per kernel (--target/--bin repeated), or none")
        if weights:
            from ..load.kernels import check_weights

            check_weights(weights, ["the kernel"])
        target_file, bin_ = (files[0] if files else None), (bins[0] if bins else None)
        if bin_ is not None and any(c.isspace() for c in bin_) and not os.path.exists(bin_):
            # one quoted command line, as several --bin take them
            command, bin_ = bin_, None

    if launch:
        ls = launch_settings(target_file, bin_, args, extra, protocol, mechanism, tool_ms, mixed_ms, contract_pairs, env_pairs, llm_api, listen, ttft_ms, chunk_delay_ms, command)
        if tools_file is not None:
            # the sandbox's mock plans with it, and the run judges with it
            from dataclasses import replace

            from ..sandbox.target import load_catalog_file

            load_catalog_file(tools_file, "--tools")
            ls = replace(ls, target=replace(ls.target, tools=str(Path(tools_file).resolve())))
        return Access(launch=ls, tool_ms=tool_ms, mixed_ms=mixed_ms)
    if target_file or bin_ or args or extra or env_pairs or llm_api or listen or ttft_ms or chunk_delay_ms:
        raise UsageError("target options (--target/--bin/--arg/--env/--llm-api/--listen/ARGS) need --launch; without it the running sandbox is used")
    if tools_file is not None and socket is None and url is None:
        raise UsageError("--tools needs --launch (the catalog of the sandbox's mock) or --socket/--url (the catalog to judge by); a running sandbox has its own")
    merged(OTHER, None, contract_pairs)  # a bad --contract is an error before anything starts
    if mock_addr is not None and socket is None and url is None:
        raise UsageError("--mock goes with --socket or --url: a sandbox's own mock is asked without it")
    return Access(state=state, socket=socket, token=token, protocol=protocol, tool_ms=tool_ms, mixed_ms=mixed_ms, tools=tools_file,
                  contract_pairs=tuple(contract_pairs), mock=mock_addr, url=url)


_ACCESS_ARGS = ("launch", "state", "socket", "token", "tools_file", "mock_addr", "url", "target_file", "bin_", "args", "extra", "protocol", "listen", "mechanism", "tool_ms", "mixed_ms", "ttft_ms", "chunk_delay_ms", "llm_api", "env_pairs", "contract_pairs", "allow_remote")
_CLICK_TYPES = {int: int, float: FINITE, str: str, Path: GivenPath(path_type=Path)}


def _settings_params(settings_cls) -> tuple[list[click.Parameter], list[tuple[str, Any]]]:
    """click parameters for the settings fields marked with a flag, and the
    flag of each (how its parsed value becomes the field's value)."""
    from ..scenarios import flags_of

    params: list[click.Parameter] = []
    fields = []
    for f, flag in flags_of(settings_cls):
        dest = "s_" + f.name  # its own namespace: abtest's tool_ms (--ab-tool-ms) is not the mock's --tool-ms
        if flag.flag is None:
            params.append(click.Argument([dest], type=_CLICK_TYPES[flag.type], metavar=f.name.upper()))
        elif flag.type is bool:
            params.append(click.Option([flag.flag, dest], is_flag=True, help=flag.help))
        elif flag.multiple:
            params.append(click.Option([flag.flag, dest], type=_CLICK_TYPES[flag.type], multiple=True, help=flag.help))
        else:
            ctype = click.Choice(flag.choices) if flag.choices else _CLICK_TYPES[flag.type]
            default = flag.shown if flag.shown is not None else f.default
            params.append(click.Option([flag.flag, dest], type=ctype, default=default, show_default=flag.show_default and default is not None, help=flag.help))
        fields.append((f.name, flag))
    return params, fields


def _value(flag, raw: Any) -> Any:
    if flag.negates:
        return not raw
    if flag.parse is not None and isinstance(raw, str):
        return flag.parse(raw)
    return raw


def scenario_command(sc) -> click.Command:
    """A scenario's command, built from its settings' flags."""
    params, fields = _settings_params(sc.settings)

    def build(kw: dict[str, Any]) -> tuple[Any, Any]:
        """Settings and access from the parsed parameters: every usage error, nothing started."""
        settings = sc.settings(**{name: _value(flag, kw.pop('s_' + name)) for name, flag in fields})
        return settings, (_access(*(kw[k] for k in _ACCESS_ARGS), weights=kw["weights"] if sc.kernels else None) if sc.access else None)

    def callback(**kw: Any) -> None:
        settings, access = build(kw)
        if sc.access:
            _finish(run_edge(lambda: sc.run(settings, access)))
        else:
            _finish(run_edge(lambda: sc.run(settings)))

    if sc.access:
        params += _access_params(sc.kernels)
    cmd = click.Command(sc.name, params=params, callback=callback, help=sc.help)
    cmd.build = build  # type: ignore[attr-defined]  # `kstress run --check` validates through it
    return cmd


@cli.command("run")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--check", is_flag=True, help="Validate the file whole and print the equivalent command line; start nothing.")
def run_cmd(file, check) -> None:
    """Run a scenario file (docs/scenario-files.md): every flag of the scenario, by name, in one TOML file."""
    from ..scenarios import REGISTRY, SOURCE
    from .scenfile import load

    sf = load(file, REGISTRY, scenario_command)
    cmd = scenario_command(REGISTRY[sf.scenario])
    try:
        ctx = cmd.make_context(f"kstress {sf.scenario}", list(sf.argv))
    except click.ClickException as exc:
        raise UsageError(f"scenario file {file}: {exc.format_message()} (as `{sf.command_line}`)") from None
    if check:
        cmd.build(dict(ctx.params))  # type: ignore[attr-defined]
        click.echo(sf.command_line)
        return
    SOURCE.update(scenario_file=str(sf.path), scenario_file_sha256=sf.sha256)
    with ctx:
        cmd.invoke(ctx)


def _finish(result) -> None:
    if result.dir is None:  # bad input before anything ran: the message is all
        _fail(result.error or "usage error", result.exit_code)
    click.echo(result.report)
    if result.error:
        click.echo(f"kstress: {result.error}", err=True)
    click.echo(f"run: {result.dir}")
    sys.exit(result.exit_code)


@cli.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["md", "html", "json", "prom"]), default="md", show_default=True,
              help="md: report.md (rewritten); html: the page with charts; json: the summary for machines; prom: Prometheus text (docs/results.md).")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="Write to FILE instead of stdout.")
def report_cmd(run_dir, fmt, output) -> None:
    """Re-render a run from its raw files (every figure recomputed) as md, html, json or prom."""
    from ..scenarios import render_as

    if run_dir.is_symlink():
        run_dir = run_dir.resolve()  # runs/latest
    text = render_as(run_dir, fmt)
    if output is None:
        click.echo(text, nl=not text.endswith("\n"))
        return
    try:
        output.write_text(text)
    except OSError as exc:
        raise UsageError(f"-o {output}: cannot write it ({exc.strerror}); pass a writable file") from None
    click.echo(f"{fmt}: {output}")


@cli.command("runs")
@click.option("--out", "root", type=click.Path(file_okay=False, path_type=Path), default=Path("runs"), show_default=True, help="Where the run directories are.")
@click.option("--limit", type=int, default=20, show_default=True, help="The newest N runs (0: all).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per run, for machines.")
def runs_cmd(root, limit, as_json) -> None:
    """List stored runs, newest first: scenario, when, verdict, headline number."""
    from ..results.runlist import list_runs, table

    if limit < 0:
        raise UsageError(f"--limit {limit} is invalid: use 0 (all) or a positive count")
    if not root.is_dir():
        raise UsageError(f"--out {root}: no such directory (runs are written to --out, default runs/)")
    runs = list_runs(root, limit or None)
    if as_json:
        for r in runs:
            click.echo(json.dumps(r))
    else:
        click.echo(table(runs))


@cli.command("show")
@click.argument("run_dir", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("nonce")
def show_cmd(run_dir, nonce) -> None:
    """Print one turn's whole story: its row, frames, the mock's requests, the
    verdict (NONCE: a turn's nonce from turns.jsonl, or a prefix matching one)."""
    from ..judge.forensics import story

    click.echo(story(run_dir, nonce), nl=False)


@cli.command("compare")
@click.argument("old_run", type=click.Path(path_type=Path))
@click.argument("new_run", type=click.Path(path_type=Path))
@click.option("--alpha", type=FINITE, default=0.05, show_default=True, help="Significance level of the Mann-Whitney U test (as cmp).")
@click.option("--min-effect", type=FINITE, default=0.05, show_default=True, help="Smallest change called better or worse (a fraction; percentage points for rates).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON instead of the table.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), help="Also write it to FILE: JSON when FILE ends in .json, else Markdown.")
def compare_cmd(old_run, new_run, alpha, min_effect, as_json, output) -> None:
    """Compare two stored run directories of the same scenario (stress,
    sessions, batch, abtest) row by row; exit 1 when NEW is worse on any row,
    2 when the runs cannot be compared (the difference is named). The runs were
    not interleaved: a timed change within their own p10..p90 band (raised to
    1.5) is inconclusive, exit 0 (docs/results.md)."""
    import json

    from ..results.comparison import final_line, render, write_output
    from ..scenarios import compare_runs

    c = compare_runs(old_run, new_run, alpha, min_effect)
    if output is not None:
        write_output(c, output)
    click.echo(json.dumps(c.to_json(), indent=2) if as_json else render(c).rstrip("\n"))
    if as_json:
        click.echo(final_line(c), err=True)
    sys.exit(c.exit_code)


def main() -> None:
    main_with(None, "kstress")


def _signal_inside(exc: BaseException) -> Interrupt | None:
    """The Interrupt an exception was raised from, if any (its cause chain)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, Interrupt):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def main_with(argv: list[str] | None, prog_name: str, command: str | None = None) -> None:
    """Run the CLI, or one of its commands as if it were the program (a
    script's usage line then reads `stress.py [OPTIONS]`, not `stress.py
    stress`), with the exit-code mapping."""
    entry = cli if command is None else cli.get_command(click.Context(cli), command)
    assert entry is not None, command
    try:
        entry.main(argv, prog_name=prog_name, standalone_mode=True, **cli.context_settings)
    except KstressError as exc:
        _fail(str(exc), exc.exit_code)
    except (KeyboardInterrupt, Interrupt, asyncio.CancelledError) as exc:
        # a signal before a run started, or a command without a run to write
        _fail(f"interrupted ({exc})" if isinstance(exc, Interrupt) else "interrupted", EXIT_INTERRUPTED)
    except Exception as exc:  # a bug in kstress: say so, keep the traceback
        if _signal_inside(exc):
            # a signal raised where Python wraps what is raised (a class's
            # __set_name__ while a module imports: RuntimeError from Interrupt)
            _fail(f"interrupted ({_signal_inside(exc)})", EXIT_INTERRUPTED)
        import traceback

        traceback.print_exc()
        _fail(f"internal error: {exc!r} (exit {EXIT_INTERNAL}); please report it", EXIT_INTERNAL)
