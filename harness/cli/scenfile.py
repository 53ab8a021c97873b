"""Scenario files: `kstress run FILE.toml` — everything a run needs in one
file a team keeps in its repository (docs/scenario-files.md).

The file is turned into the argv of the scenario's own command and run by
that same click command, so a file and its flags can never mean different
things ("reproduces the same run as its flags" holds by construction), and a
new flag or scenario works in files with no change here: the keys are read off
the command's parameters. Before anything starts the whole file is validated
and every error reported at once, each with its key path.

    scenario = "stress"          # any scenario: stress, sessions, findmax, batch, abtest, cmp, hold
    launch = true                # every flag of the scenario, by its name without the dashes
    conns = 32
    mix = "!batch4:3,text:1"
    threshold = ["p95<2s", "pass_rate>=0.99"]   # a repeatable flag takes a list
    no-dedup-probe = true        # a switch takes true (false leaves it off)
    args = ["--queue", "32"]     # what goes after `--` (the target's own arguments)
    [contract]                   # tables for the KEY=VALUE flags: --contract, --env
    batch = "parallel"
"""

from __future__ import annotations

import difflib
import hashlib
import shlex
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from ..errors import UsageError

# KEY=VALUE flags a file may write as a table
TABLES = {"contract": "--contract", "env": "--env"}
# options whose value is a path: relative to the scenario file, not to where kstress runs
PATH_KEYS = {"target", "tools", "state"}


@dataclass(frozen=True)
class ScenarioFile:
    path: Path
    sha256: str
    scenario: str
    argv: tuple[str, ...]  # the scenario command's arguments

    @property
    def command_line(self) -> str:
        return "kstress " + shlex.join([self.scenario, *self.argv])

    def to_json(self) -> dict[str, str]:
        return {"path": str(self.path), "sha256": self.sha256}


def _name(p: click.Parameter) -> str:
    if isinstance(p, click.Argument):
        return (p.human_readable_name or p.name or "").lower()
    longs = [o for o in p.opts if o.startswith("--")]
    return (longs[0] if longs else p.opts[0]).lstrip("-")


def _kind(p: click.Parameter) -> str:
    t = p.type
    if isinstance(p, click.Option) and p.is_flag:
        return "bool"
    if isinstance(t, click.Choice):
        return "choice"
    if t is click.INT or isinstance(t, click.types.IntParamType):
        return "int"
    if t is click.FLOAT or isinstance(t, click.types.FloatParamType):
        return "float"
    if isinstance(t, click.Path):
        return "path"
    return "str"


def _scalar(kind: str, value: Any, where: str, p: click.Parameter, errors: list[str]) -> str | None:
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(f"{where}: expected an integer, got {value!r}")
            return None
        return str(value)
    if kind == "float":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            errors.append(f"{where}: expected a number, got {value!r}")
            return None
        return repr(float(value)) if isinstance(value, float) else str(value)
    if kind == "choice":
        choices = list(p.type.choices)  # type: ignore[attr-defined]
        if not isinstance(value, str) or value not in choices:
            errors.append(f"{where}: expected one of {', '.join(map(repr, choices))}, got {value!r}")
            return None
        return value
    # str and path; a number is fine where the flag takes text (`duration = 30` means 30 s)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        errors.append(f"{where}: expected a string, got {value!r}")
        return None
    return str(value)


def load(path: Path, registry: dict[str, Any], command_for: Any) -> ScenarioFile:
    """The file validated whole and turned into argv; UsageError listing every problem."""
    raw, data = _read(path)
    name = _scenario_name(path, data, registry)
    cmd: click.Command = command_for(registry[name])
    errors: list[str] = []
    opts, positional, extra = _translate(data, cmd, name, path.resolve().parent, errors)
    args_order = [_name(p) for p in cmd.params if isinstance(p, click.Argument) and p.nargs != -1]
    for a in args_order:
        if a not in positional:
            errors.append(f"{a}: `kstress {name}` needs it (a positional argument)")
    if errors:
        raise UsageError(f"scenario file {path}: {len(errors)} problem{'s' if len(errors) > 1 else ''}, nothing was started:\n  " + "\n  ".join(errors))
    argv = opts + [positional[a] for a in args_order]
    if extra:
        argv += ["--", *extra]
    return ScenarioFile(path.resolve(), hashlib.sha256(raw).hexdigest(), name, tuple(argv))


def _read(path: Path) -> tuple[bytes, dict[str, Any]]:
    """The file's bytes (its hash is the run's record of it) and its TOML."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"scenario file {path}: cannot read it ({exc.strerror})") from None
    try:
        data = tomllib.loads(raw.decode())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"scenario file {path}: not valid TOML: {exc}") from None
    return raw, data


def _scenario_name(path: Path, data: dict[str, Any], registry: dict[str, Any]) -> str:
    """The scenario the file names; without a known one nothing else can be checked, so it fails alone."""
    name = data.get("scenario")
    if name is None and isinstance(data.get("target"), dict):
        raise UsageError(f"scenario file {path}: this is a target file (a [target] table, docs/targets.md), not a scenario file; "
                         f"name it from one: target = \"{path.name}\" with scenario = \"stress\" and launch = true")
    if not isinstance(name, str) or name not in registry:
        hint = difflib.get_close_matches(str(name), list(registry), 1)
        raise UsageError(f"scenario file {path}:\n  scenario: " + ("missing: say which scenario runs, " if name is None else f"unknown scenario {name!r}; ")
                         + (f"did you mean {hint[0]!r}? " if hint else "") + f"known: {', '.join(registry)}")
    return name


def _translate(data: dict[str, Any], cmd: click.Command, name: str, base: Path, errors: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """Each key of the file as the command's options, its positional
    arguments by name, and what goes after `--`; every problem appended to
    ``errors`` in the file's order."""
    params = {_name(p): p for p in cmd.params if not (isinstance(p, click.Argument) and p.nargs == -1)}
    params.pop("help", None)
    opts: list[str] = []
    positional: dict[str, str] = {}
    extra: list[str] = []
    for key, value in data.items():
        if key == "scenario":
            continue
        if key == "args":
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                errors.append(f"args: expected a list of strings (what goes after `--`), got {value!r}")
            else:
                extra = list(value)
            continue
        if key in TABLES and isinstance(value, dict) and key in params:
            opts += _table_opts(key, value, errors)
            continue
        p = params.get(key)
        if p is None:
            hint = difflib.get_close_matches(key, list(params) + ["args", "scenario"], 1)
            errors.append(f"{key}: not a flag of `kstress {name}`" + (f"; did you mean {hint[0]!r}?" if hint else "") + f" (see `kstress {name} --help`; keys are the flags without their dashes)")
            continue
        if isinstance(p, click.Argument):
            v = _scalar(_kind(p), value, key, p, errors)
            if v is not None:
                positional[key] = v
            continue
        opts += _option_opts(key, value, p, base, errors)
    return opts, positional, extra


def _table_opts(key: str, value: dict[str, Any], errors: list[str]) -> list[str]:
    """A [contract] or [env] table as its KEY=VALUE flags."""
    opts: list[str] = []
    for k, v in value.items():
        if isinstance(v, bool):
            v = str(v).lower()
        if not isinstance(v, (str, int, float)):
            errors.append(f"{key}.{k}: expected a string, a number or a boolean, got {v!r}")
            continue
        opts += [TABLES[key], f"{k}={v}"]
    return opts


def _option_opts(key: str, value: Any, p: click.Parameter, base: Path, errors: list[str]) -> list[str]:
    """One option's key as its flag and values: a switch, one value, or a repeatable flag's list."""
    kind = _kind(p)
    flag = p.opts[0] if not [o for o in p.opts if o.startswith("--")] else [o for o in p.opts if o.startswith("--")][0]
    if kind == "bool":
        if not isinstance(value, bool):
            errors.append(f"{key}: a switch takes true or false, got {value!r}")
        elif value:
            return [flag]
        return []
    items = value if isinstance(value, list) else [value]
    if isinstance(value, list) and not p.multiple:  # type: ignore[union-attr]
        errors.append(f"{key}: {flag} is not repeatable: give one value, not a list")
        return []
    opts: list[str] = []
    for i, item in enumerate(items):
        where = f"{key}[{i}]" if isinstance(value, list) else key
        v = _scalar(kind, item, where, p, errors)
        if v is None:
            continue
        if (key in PATH_KEYS or kind == "path") and key != "out" and not Path(v).is_absolute():
            v = str(base / v)
        if key == "bin" and "/" in v and " " not in v and not Path(v).is_absolute():
            v = str(base / v)  # a relative binary, beside the file (a command line is left as written)
        opts += [flag, v]
    return opts
