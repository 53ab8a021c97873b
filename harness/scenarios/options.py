"""Command-line flags declared on the settings they fill.

A scenario's settings dataclass marks each field a user may set with
:func:`opt` (a flag) or :func:`arg` (a positional argument); the CLI builds the
scenario's command from those fields, so a new scenario needs no CLI code.
Fields without a mark are library-only settings. This module knows nothing of
click: it only records what the flag is called, how its text becomes a value
and what the help says.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..judge.contract import CONTRACT_HELP

CLI = "kstress.cli"


@dataclass(frozen=True)
class Flag:
    flag: str | None  # None: a positional argument
    type: type  # int, float, str, Path or bool (a switch)
    help: str = ""
    parse: Callable[[str], Any] | None = None  # text -> value, for lists and the like
    shown: str | None = None  # the default as text, when it differs from str(default)
    show_default: bool = True
    choices: tuple[str, ...] | None = None
    multiple: bool = False  # repeatable; the field holds a tuple

    @property
    def negates(self) -> bool:
        """A `--no-X` switch sets its field to False."""
        return self.type is bool and bool(self.flag) and self.flag.startswith("--no-")  # type: ignore[union-attr]


def opt(default: Any, flag: str, type_: type, help: str = "", **kw: Any) -> Any:
    return dataclasses.field(default=default, metadata={CLI: Flag(flag, type_, help, **kw)})


def arg(type_: type = str, help: str = "") -> Any:
    return dataclasses.field(metadata={CLI: Flag(None, type_, help)})


def flags_of(settings_cls: type) -> list[tuple[dataclasses.Field, Flag]]:
    return [(f, f.metadata[CLI]) for f in dataclasses.fields(settings_cls) if CLI in f.metadata]


OUT = dict(flag="--out", type_=Path, help="Where run directories go.")
QUIET = dict(flag="--quiet", type_=bool, help="No live progress line.")


def out_opt() -> Any:
    return opt(Path("runs"), **OUT)


def quiet_opt() -> Any:
    return opt(False, **QUIET)


CONNECT_TIMEOUT_S = 5.0


def connect_opt(default: float = CONNECT_TIMEOUT_S) -> Any:
    """--connect-timeout: connecting and authenticating one connection is
    bounded by it, on every scenario (a kernel that accepts but never reads
    can only cost this much per input)."""
    return opt(default, "--connect-timeout", float, "Seconds to connect and authenticate one connection.")


def threshold_opt(flag: str = "--threshold", help: str = "(repeatable; one that fails exits 99)") -> Any:
    """--threshold EXPR (repeatable), on every scenario: service levels over
    the run's turns (harness/results/thresholds.py); one that fails exits 99."""
    return opt((), flag, str, f"A service level, e.g. 'p95<2s', 'pass_rate>=0.99', 'errors[busy]<10', '[!batch4]p95<1s' {help}.", multiple=True)


def check_timeouts(settings: Any) -> None:
    """--timeout and --connect-timeout within their bounds, naming the flag."""
    from ..errors import UsageError

    from ..results.report import check_html_env
    from ..results.thresholds import check_thresholds

    check_html_env()  # read at the run's end: a typo is caught before the run, not after it
    check_thresholds(settings)  # every scenario checks its timeouts; its thresholds go with them
    port = getattr(settings, "metrics_port", None)
    if port is not None and not 0 <= port <= 65535:
        raise UsageError(f"--metrics-port {port} is invalid: use 1 to 65535 (0: any free port, printed at the start)")
    for flag, v in (("--timeout", getattr(settings, "timeout_s", None)), ("--connect-timeout", getattr(settings, "connect_timeout_s", None))):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.1 <= v <= 3600):
            raise UsageError(f"{flag} {v!r} is invalid: use 0.1 to 3600 seconds")


def contract_opt() -> Any:
    return opt((), "--contract", str, CONTRACT_HELP, multiple=True, show_default=False)


def metrics_opt() -> Any:
    """--metrics-port on the long scenarios: the run's metrics served live
    (harness/results/promexport.py), on loopback only."""
    return opt(None, "--metrics-port", int, "Serve the run's metrics live at http://127.0.0.1:PORT/metrics (Prometheus text) while it goes.", show_default=False)


def fleet_opt() -> Any:
    from ..fleet import FLEET_HELP

    return opt(None, "--fleet", str, FLEET_HELP, show_default=False)


def fleet_workers_opt() -> Any:
    return opt(None, "--fleet-workers", int, "Workers of a --fleet on a cluster (default: one per alive node).", show_default=False)
