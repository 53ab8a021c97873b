"""The scenario registry: one table the CLI, the runner's callers and
`kstress report` read. Adding a scenario = one module that defines a
``SCENARIO`` (harness.runner.Scenario) + one line here."""

from __future__ import annotations

from pathlib import Path

from ..errors import UsageError
from ..results import load_run
from ..runner import RunResult, Scenario, all_checks, partial_summary
from ..sut import Access, Target
from . import abtest, batch, cmp, hold, stress
from .abtest import AbtestSettings, run_abtest
from .batch import BatchSettings, run_batch
from .cmp import CmpSettings, run_cmp
from .hold import HoldSettings, run_hold
from .stress import StressSettings, run_stress

REGISTRY: dict[str, Scenario] = {m.SCENARIO.name: m.SCENARIO for m in (stress, batch, abtest, cmp, hold)}


def scenario(name: str) -> Scenario:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"scenario {name!r} is unknown; known: {', '.join(REGISTRY)}") from None


def rerender(path: Path) -> str:
    """`kstress report DIR`: re-render report.md from the run's raw files."""
    doc, rows = load_run(path)
    name = doc.get("scenario", "")
    if name not in REGISTRY:
        raise UsageError(f"{path}: no report renderer for scenario {name!r}")
    sc = REGISTRY[name]
    settings, extras = doc.get("settings") or {}, doc.get("extras") or {}
    if not rows:
        summary = doc.get("summary") or {}
    elif (doc.get("summary") or {}).get("partial"):
        summary = partial_summary(sc, rows, settings, extras)
    else:
        summary = sc.summarize(rows, settings, extras)
    text = sc.render(doc, summary)
    (path / "report.md").write_text(text)
    return text


__all__ = [
    "AbtestSettings",
    "Access",
    "BatchSettings",
    "CmpSettings",
    "HoldSettings",
    "REGISTRY",
    "RunResult",
    "Scenario",
    "StressSettings",
    "Target",
    "all_checks",
    "rerender",
    "run_abtest",
    "run_batch",
    "run_cmp",
    "run_hold",
    "run_stress",
    "scenario",
]
