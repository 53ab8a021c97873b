"""TargetSpec: how to start a system under test (docs/targets.md).

From flags (``--bin PATH`` + ``--arg ...``) or a TOML file (``--target FILE``).
The argv is a template; placeholders are filled at launch:

    {bin} {socket} {llm_url} {llm_root} {llm_api} {data_dir} {token} {run_dir} {config}
    {port} {listen_url}     where the kernel listens (``listen``: unix, tcp, ws)
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import sys
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping, Sequence

from mock.catalog import Catalog, load_catalog
from mock.errors import ConfigError
from mock.markers import DIALECTS

from ..judge.contract import OTHER, REFKERNEL, Contract, merged
from ..errors import UsageError

PLACEHOLDERS = frozenset({"bin", "socket", "llm_url", "llm_root", "llm_api", "data_dir", "token", "run_dir", "config", "port", "listen_url"})
LISTENS = ("unix", "tcp", "ws")
_PLACEHOLDER_RE = re.compile(r"\{([^{}]*)\}")
# No token here: on a command line any local user reads it with ps (issue 22
# item 13). Every launched kernel finds it in its environment, TOKEN_ENV.
DEFAULT_ARGV = ("{bin}", "--socket", "{socket}", "--llm-url", "{llm_url}", "--data-dir", "{data_dir}")
TOKEN_ENV = "KSTRESS_TOKEN"
REFKERNEL_ARGV = DEFAULT_ARGV + ("--llm-api", "{llm_api}")
REFKERNEL_ENV = MappingProxyType({"REFKERNEL_TOKEN": "{token}"})
REDACTED = "[redacted]"


def listen_argv(argv: tuple[str, ...], listen: str) -> tuple[str, ...]:
    """The default argv names the socket as the reference kernel's flags do,
    ``--socket {socket}``; a kernel that listens on TCP or a WebSocket is told
    ``--listen {listen_url}`` in its place. A target file's own argv is its own."""
    if listen != "unix" and argv in (DEFAULT_ARGV, REFKERNEL_ARGV):
        return (argv[0], "--listen", "{listen_url}", *argv[3:])
    return argv


def placeholders_in(text: str) -> set[str]:
    return set(_PLACEHOLDER_RE.findall(text.replace("{{", "").replace("}}", "")))


def scrub(obj: Any, secrets: Sequence[str | None]) -> Any:
    """``obj`` (JSON-like) with every secret replaced in every string: the
    last pass over what a run writes for people (run.json, the reports)."""
    secrets = [x for x in secrets if x and len(x) >= 4]  # a 1-character "secret" would blank the report
    if not secrets:
        return obj

    def walk(o: Any) -> Any:
        if isinstance(o, str):
            for x in secrets:
                o = o.replace(x, REDACTED)
            return o
        if isinstance(o, dict):
            return {k: walk(v) for k, v in o.items()}
        if isinstance(o, (list, tuple)):
            return [walk(v) for v in o]
        return o

    return walk(obj)


def redact(argv: list[str] | tuple[str, ...], secrets: tuple[str | None, ...]) -> list[str]:
    """argv with every secret replaced, for what reports and run.json show."""
    out = list(argv)
    for secret in secrets:
        if secret:
            out = [a.replace(secret, REDACTED) for a in out]
    return out


def _check_template(where: str, text: str) -> None:
    known = ", ".join("{" + p + "}" for p in sorted(PLACEHOLDERS))
    for name in _PLACEHOLDER_RE.findall(text.replace("{{", "").replace("}}", "")):
        if name not in PLACEHOLDERS:
            raise UsageError(f"{where}: unknown placeholder {{{name}}} in {text!r}; known: {known} (write {{{{ and }}}} for literal braces)")
    rest = _PLACEHOLDER_RE.sub("", text.replace("{{", "").replace("}}", ""))
    if "{" in rest or "}" in rest:
        raise UsageError(f"{where}: a lone brace in {text!r}; placeholders are {known}; write {{{{ and }}}} for literal braces")


def render(template: str, values: Mapping[str, str]) -> str:
    out = _PLACEHOLDER_RE.sub(lambda m: values[m.group(1)] if m.group(1) in values else m.group(0), template)
    return out.replace("{{", "{").replace("}}", "}")


def load_catalog_file(path: str | Path, where: str = "") -> Catalog:
    """A tool catalog (docs/catalog.md); a bad file is a usage error naming the
    file and the problem, never the mock's own exception."""
    try:
        return load_catalog(path)
    except ConfigError as exc:
        raise UsageError(f"{where + ': ' if where else ''}{exc}") from None


def default_refkernel_bin() -> str:
    """The reference kernel's console script: next to this interpreter, else on
    PATH (`pip install -e .` installs it)."""
    candidate = Path(sys.executable).with_name("refkernel")
    if candidate.exists():
        return str(candidate)
    found = shutil.which("refkernel")
    if found:
        return found
    raise UsageError("refkernel is not installed next to this Python; run `make venv` (pip install -e .)")


@dataclass(frozen=True)
class TargetSpec:
    bin: str
    argv: tuple[str, ...] = DEFAULT_ARGV
    name: str = ""
    env: Mapping[str, str] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()
    ready: str = "auth"  # auth: socket accepts and auth succeeds; socket: it accepts
    start_timeout_s: float = 20.0
    stop_signal: int = signal.SIGTERM
    stop_grace_s: float = 5.0
    config_file: str | None = None  # name inside the data dir
    config_template: str | None = None
    protocol: str | None = None  # module:Class
    tools: str | None = None  # tool catalog file for the mock
    listen: str = "unix"  # unix: {socket}; tcp, ws: {port} inside the sandbox
    ws_path: str = "/"  # the URL path a ws kernel serves its WebSocket at
    source: str = "flags"
    contract: Mapping[str, Any] = field(default_factory=dict)  # the target file's [contract] table
    llm_api: str = "chat"  # the LLM API the kernel speaks: chat | responses | anthropic ({llm_api})
    secret: tuple[str, ...] = ()  # env names and argv flags whose values reports show as [redacted]
    url: str | None = None  # an agent protocol's: where it serves it, templated (http://127.0.0.1:{port}/agui)

    def __post_init__(self) -> None:
        where = f"target {self.source}"
        if not self.bin:
            raise UsageError(f"{where}: no binary given; pass --bin PATH or set bin in the target file")
        if not self.argv:
            raise UsageError(f"{where}: argv is empty; it must start with {{bin}} or a program")
        for a in self.argv:
            _check_template(f"{where} argv", a)
        for k, v in self.env.items():
            _check_template(f"{where} env {k}", v)
        if self.config_template is not None:
            if not self.config_file:
                raise UsageError(f"{where}: config.template needs config.file (a name inside the data dir)")
            _check_template(f"{where} config.template", self.config_template)
        if self.listen not in LISTENS:
            raise UsageError(f"{where}: listen={self.listen!r} is invalid; use 'unix', 'tcp' or 'ws'")
        if not self.ws_path.startswith("/") or any(c.isspace() for c in self.ws_path):
            raise UsageError(f"{where}: ws_path={self.ws_path!r} is invalid; a URL path such as '/' or '/kernel'")
        used = set().union(*(placeholders_in(t) for t in self.templates()))
        if self.listen == "unix" and "port" in used:
            raise UsageError(f"{where}: {{port}} is set only for a kernel that listens on TCP or a WebSocket (listen = 'tcp' or 'ws'); "
                             "a unix kernel is told {socket} (or {listen_url})")
        if self.listen != "unix" and not used & {"port", "listen_url"}:
            raise UsageError(f"{where}: listen = {self.listen!r}, but nothing tells the kernel where: put {{port}} or {{listen_url}} "
                             "in its argv, env or config template (a port inside the sandbox, free for it)")
        self._check_agent(where)
        if self.ready not in ("auth", "socket"):
            raise UsageError(f"{where}: ready={self.ready!r} is invalid; use 'auth' or 'socket'")
        if not 0.1 <= self.start_timeout_s <= 600:
            raise UsageError(f"{where}: start_timeout_s={self.start_timeout_s} is invalid; use 0.1 to 600")
        if not 0 <= self.stop_grace_s <= 120:
            raise UsageError(f"{where}: stop_grace_s={self.stop_grace_s} is invalid; use 0 to 120")
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        object.__setattr__(self, "contract", MappingProxyType(dict(self.contract)))
        if self.llm_api not in DIALECTS:
            raise UsageError(f"{where}: llm_api={self.llm_api!r} is unknown: the mock speaks {', '.join(DIALECTS)}")
        merged(OTHER, self.contract, where=where)  # a bad [contract] fails here, naming the file
        if not self.name:
            object.__setattr__(self, "name", Path(self.bin).name)

    def _check_agent(self, where: str) -> None:
        """An agent protocol (protocol = "agui" ...) needs listen = "tcp" and a
        url on {port}: the sandbox's connector reaches that port alone."""
        from ..wire.agents import AGENT_PROTOCOLS, is_agent_protocol

        agent = is_agent_protocol(self.protocol)
        if self.url is None:
            if agent:
                raise UsageError(f"{where}: protocol = {self.protocol!r} needs url, where the agent serves it, e.g. url = \"http://127.0.0.1:{{port}}/agui\"")
            return
        if not agent:
            raise UsageError(f"{where}: url = {self.url!r} is for an agent protocol: set protocol to one of {', '.join(AGENT_PROTOCOLS)} "
                             "(a protocol v1 kernel is told {socket}, {port} or {listen_url} instead)")
        _check_template(f"{where} url", self.url)
        if self.listen != "tcp":
            raise UsageError(f"{where}: protocol = {self.protocol!r} is served over HTTP: set listen = \"tcp\" (it is {self.listen!r})")
        if "port" not in placeholders_in(self.url):
            raise UsageError(f"{where}: url = {self.url!r} names no {{port}}: kstress reaches the agent inside the sandbox on the port it gives, "
                             "e.g. url = \"http://127.0.0.1:{port}/agui\" (and tell the agent {port}, e.g. env PORT = \"{port}\")")
        from ..wire.agents import check_agent_url

        check_agent_url(self.url.replace("{port}", "1"), f"{where}: url")

    def _check_program(self) -> None:
        """An argv that does not start with a placeholder names its own program:
        one that is not there failed only at spawn, as an internal error (issue 22, item 15)."""
        first = self.argv[0]
        if "{" in first or not first.strip():
            return
        if "/" in first:
            if not os.path.isabs(first):
                return  # relative to the kernel's data directory, which does not exist yet
            found = os.access(first, os.X_OK) and not os.path.isdir(first)
        else:  # looked up as the spawn will: on the target's PATH, else ours
            found = shutil.which(first, path=self.env.get("PATH") or None) is not None
        if not found:
            raise UsageError(
                f"target {self.source}: argv starts with {first!r}, which is not an executable (argv is {list(self.argv)!r}); "
                "start argv with {bin} or an existing program, e.g. argv = [\"{bin}\", \"--socket\", \"{socket}\"]"
            )

    def check_binary(self) -> Path:
        """The resolved binary, or a UsageError saying what is wrong with it."""
        path = Path(self.bin) if "/" in self.bin else Path(shutil.which(self.bin) or self.bin)
        if self.bin == "refkernel" and not path.exists():
            # the name the docs and the messages give: the console script next
            # to this interpreter, as for the default, even with the venv not on PATH
            path = Path(default_refkernel_bin())
        # the fix names where the binary came from: a flag, a target file, a cmp argument
        if self.source == "flags":
            other = "pass an existing executable to --bin"
        elif self.source.startswith("command "):
            other = f"make the first word of the {self.source} an existing executable (a path, a name on PATH, or refkernel)"
        else:
            other = f"set bin in {self.source} to an existing executable"
        if not path.exists():
            raise UsageError(f"target binary {self.bin!r} does not exist ({self._looked_for()}); {other}")
        if path.is_dir():
            raise UsageError(f"target binary {self.bin!r} is a directory, not an executable; {other}")
        if not os.access(path, os.X_OK):
            raise UsageError(f"target binary {self.bin!r} is not executable; chmod +x it or {other}")
        self._check_program()
        # absolute, not resolved: a venv's python is a symlink whose target
        # would not see the venv's packages
        return path.absolute()

    def _looked_for(self) -> str:
        """Where check_binary looked, so a wrong guess at the rule shows."""
        from_file = not (self.source == "flags" or self.source.startswith("command "))
        if "/" in self.bin:
            return "a path in bin is taken relative to the target file" if from_file else f"looked for at {Path(self.bin).absolute()}"
        if not from_file:
            return "neither on PATH nor in the current directory"
        return f"neither beside the target file, as {Path(self.source).parent.absolute() / self.bin}, nor on PATH"

    def templates(self) -> list[str]:
        """Every template of this target: argv (as it listens), env, config."""
        return [*listen_argv(self.argv, self.listen), *self.env.values(), *([self.config_template] if self.config_template else [])]

    def render_argv(self, values: Mapping[str, str]) -> list[str]:
        return [render(a, values) for a in listen_argv(self.argv, self.listen)] + list(self.extra_args)

    def secret_values(self, argv: Sequence[str], env: Mapping[str, str]) -> tuple[str, ...]:
        """The rendered values the target file marks secret: an env name's
        value; an argv flag's value (`--key VALUE` or `--key=VALUE`)."""
        out: list[str] = []
        for name in self.secret:
            if name.startswith("-"):
                for i, a in enumerate(argv):
                    if a == name and i + 1 < len(argv):
                        out.append(argv[i + 1])
                    elif a.startswith(name + "="):
                        out.append(a[len(name) + 1:])
            elif env.get(name):
                out.append(env[name])
        return tuple(v for v in out if v)

    def render_env(self, values: Mapping[str, str]) -> dict[str, str]:
        return {k: render(v, values) for k, v in self.env.items()}

    def base_contract(self) -> Contract:
        """What a target is assumed to have before it declares anything: the
        reference kernel all of its own rules, any other binary only what
        every kernel has (no replay guard, interrupts or stats frame)."""
        try:
            ours = Path(self.bin).resolve() == Path(default_refkernel_bin()).resolve()
        except UsageError:
            ours = False
        return REFKERNEL if ours else OTHER

    def contract_with(self, pairs: tuple[str, ...] = ()) -> Contract:
        """The declared contract: the base, the [contract] table, then --contract pairs."""
        return merged(self.base_contract(), self.contract, pairs, where=f"target {self.source}")

    def with_args(self, *args: str) -> "TargetSpec":
        return replace(self, extra_args=self.extra_args + tuple(args))


def spec_from_flags(bin: str | None, args: tuple[str, ...] = (), extra: tuple[str, ...] = (), protocol: str | None = None) -> TargetSpec:
    """``--bin PATH [--arg A ...] [-- ARGS]``; without --bin, the reference
    kernel. ``args`` and ``extra`` are appended to the default argv."""
    if bin is None:
        return refkernel_spec(extra_args=tuple(args) + tuple(extra), protocol=protocol)
    return TargetSpec(bin=bin, extra_args=tuple(args) + tuple(extra), protocol=protocol)


def spec_from_command(command: str) -> TargetSpec:
    """A quoted command line (`cmp.py "refkernel --fault x" refkernel`): its
    first word is the binary, the rest is appended to the default argv."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"target command {command!r}: {exc} (shell quoting); close the quote or escape it") from None
    if not words:
        raise UsageError(f"target command {command!r} is empty")
    first = words[0]
    name, source = " ".join(shlex.quote(w) for w in words), f"command {command!r}"
    if first == "refkernel":
        return refkernel_spec(extra_args=tuple(words[1:]), name=name, source=source)
    return TargetSpec(bin=first, extra_args=tuple(words[1:]), name=name, source=source)


def refkernel_spec(**kw: Any) -> TargetSpec:
    """The reference kernel: the token through the environment, not argv."""
    kw.setdefault("name", "refkernel")
    return TargetSpec(bin=default_refkernel_bin(), argv=REFKERNEL_ARGV, env=REFKERNEL_ENV, **kw)


_SIGNALS = {s.name: s for s in signal.Signals}


def load_target(path: str | Path) -> TargetSpec:
    p = Path(path)
    t, contract = _read_target_file(p)
    kw: dict[str, Any] = {"source": str(p), "contract": contract}
    kw["bin"] = _bin_path(t.get("bin"), p) or ""
    kw.update(_command_fields(t, p))
    kw.update(_setting_fields(t, p))
    kw.update(_lifecycle_fields(t, p))
    if t.get("bin") == "refkernel" and "argv" not in t:
        # the reference kernel's own form: its token through the environment
        kw["argv"] = REFKERNEL_ARGV
        kw["env"] = {**REFKERNEL_ENV, **kw.get("env", {})}
    return TargetSpec(**kw)


_TARGET_KEYS = {"name", "bin", "argv", "env", "ready", "start_timeout_s", "stop_signal", "stop_grace_s", "config", "protocol", "tools", "args", "llm_api", "listen", "ws_path", "secret", "url"}


def _read_target_file(p: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The file's [target] and [contract] tables, once the file parses and holds no table or key it should not."""
    try:
        data = tomllib.loads(p.read_text())
    except OSError as exc:
        raise UsageError(f"target file {p}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"target file {p}: malformed TOML ({exc}); fix the syntax") from None
    t = data.get("target")
    if not isinstance(t, dict):
        raise UsageError(f"target file {p}: it needs a [target] table (see docs/targets.md)")
    extra_tables = set(data) - {"target", "contract"}
    if extra_tables:
        raise UsageError(f"target file {p}: unknown tables {sorted(extra_tables)}; a target file has [target] and [contract]")
    contract = data.get("contract", {})
    if not isinstance(contract, dict):
        raise UsageError(f"target file {p}: contract must be a table ([contract]), see docs/targets.md")
    unknown = set(t) - _TARGET_KEYS
    if unknown:
        raise UsageError(f"target file {p}: unknown keys {sorted(unknown)} in [target]; known: {sorted(_TARGET_KEYS)}")
    return t, contract


def _bin_path(value: Any, p: Path) -> str | None:
    """A path with a slash is relative to the file, not to where kstress runs,
    and so is a bare name when the file has it beside it (the docs promised
    that, while it was looked up on PATH alone); any other bare name is looked
    up on PATH. `refkernel` is ours."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise UsageError(f"target file {p}: bin must be a string")
    if value == "refkernel":
        return default_refkernel_bin()
    if ("/" in value and not os.path.isabs(value)) or (value and (p.parent / value).exists()):
        return str((p.parent / value).resolve())
    return value


def _command_fields(t: dict[str, Any], p: Path) -> dict[str, Any]:
    """argv and args: what the binary is started with."""
    kw: dict[str, Any] = {}
    if "argv" in t:
        argv = t["argv"]
        if isinstance(argv, str):
            argv = shlex.split(argv)
        if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
            raise UsageError(f"target file {p}: argv must be a list of strings (or one command string)")
        kw["argv"] = tuple(argv)
    if "args" in t:
        if not isinstance(t["args"], list) or not all(isinstance(a, str) for a in t["args"]):
            raise UsageError(f"target file {p}: args must be a list of strings")
        kw["extra_args"] = tuple(t["args"])
    return kw


def _setting_fields(t: dict[str, Any], p: Path) -> dict[str, Any]:
    """The plain strings, the tool catalog, the secret names and the environment."""
    kw: dict[str, Any] = {}
    for key in ("name", "ready", "protocol", "llm_api", "listen", "ws_path", "url"):
        if key in t:
            if not isinstance(t[key], str):
                raise UsageError(f"target file {p}: {key} must be a string")
            kw[key] = t[key]
    if "tools" in t:
        if not isinstance(t["tools"], str):
            raise UsageError(f"target file {p}: tools must be a string (the path of a tool catalog, relative to the file)")
        kw["tools"] = str((p.parent / t["tools"]).resolve())
        load_catalog_file(kw["tools"], f"target file {p}: tools")  # a bad catalog fails here, not in the mock
    if "secret" in t:
        sec = t["secret"]
        if not isinstance(sec, list) or not all(isinstance(v, str) and v for v in sec):
            raise UsageError(f"target file {p}: secret must be a list of env names and argv flags whose values are secret, e.g. secret = [\"OPENAI_API_KEY\", \"--api-key\"]")
        kw["secret"] = tuple(sec)
    if "env" in t:
        env = t["env"]
        if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
            raise UsageError(f"target file {p}: env must be a table of strings")
        kw["env"] = env
    return kw


def _lifecycle_fields(t: dict[str, Any], p: Path) -> dict[str, Any]:
    """How the target is started and stopped: its timeouts, stop signal and config file."""
    kw: dict[str, Any] = {}
    for key in ("start_timeout_s", "stop_grace_s"):
        if key in t:
            if not isinstance(t[key], (int, float)):
                raise UsageError(f"target file {p}: {key} must be a number of seconds")
            kw[key] = float(t[key])
    if "stop_signal" in t:
        sig = t["stop_signal"]
        if sig not in _SIGNALS:
            raise UsageError(f"target file {p}: stop_signal {sig!r} is not a signal name (e.g. SIGTERM, SIGINT)")
        kw["stop_signal"] = _SIGNALS[sig]
    if "config" in t:
        cfg = t["config"]
        if not isinstance(cfg, dict) or not isinstance(cfg.get("file"), str) or not isinstance(cfg.get("template"), str):
            raise UsageError(f"target file {p}: [target.config] needs file (a name) and template (a string)")
        if "/" in cfg["file"]:
            raise UsageError(f"target file {p}: config.file {cfg['file']!r} must be a plain file name (it goes in the data dir)")
        kw["config_file"], kw["config_template"] = cfg["file"], cfg["template"]
    return kw
