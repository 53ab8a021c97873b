"""kstress harness, in rooms (docs/design-notes.md, "The map of the harness"):

    wire/       how bytes and frames reach a kernel: transports, the client, protocol adapters
    judge/      did a turn's work really happen: contracts, verdicts, the mock's record, forensics
    load/       the load's shape: stages and arrivals, several kernels, the resource sampler
    results/    run directories, statistics, reports (Markdown, HTML, Prometheus), thresholds, stored-run comparison
    sandbox/    namespaces, the guardian and connector, launching a target, the detached supervisor, the system under test
    scenarios/  the runner every scenario goes through, and one module a scenario
    cli/        the `kstress` command line and the process's signal edge

A room imports only the rooms below it (tests/harness/test_layering.py holds
the order), and only the names a lower room's ``__init__`` lists."""

from __future__ import annotations

import importlib
from typing import Any, Callable

__version__ = "0.1.0"

from .errors import ChecksFailed, KstressError, TargetError, UsageError


def surface(package: str, table: dict[str, tuple[str, ...]]) -> tuple[list[str], Callable[[str], Any]]:
    """A room's public surface, ``{submodule: names}``, for its ``__init__``:
    ``__all__`` and a module ``__getattr__`` that imports a name's submodule on
    first use. Lazy on purpose: `python -m harness.sandbox.guardian` must not
    pay for the launcher, nor `kcli` for aiohttp (only a ws address needs it)."""
    where = {name: mod for mod, names in table.items() for name in names}

    def __getattr__(name: str) -> Any:
        mod = where.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f"{package}.{mod}"), name)

    return sorted(where), __getattr__


__all__ = ["ChecksFailed", "KstressError", "TargetError", "UsageError", "__version__", "surface"]
