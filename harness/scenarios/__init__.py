"""The scenario registry: one table the CLI, the runner's callers and
`kstress report` read. Adding a scenario = one module that defines a
``SCENARIO`` (harness.scenarios.runner.Scenario) + one line here."""

from __future__ import annotations

import json
from pathlib import Path

import psutil

from ..errors import UsageError
from ..results.comparison import Comparison
from ..results.comparison import compare_runs as compare_stored
from ..results.comparison import refusals as stored_refusals
from ..results.rundir import read_run
from ..results.stats import ALPHA, MIN_EFFECT
from ..errors import EXIT_INCOMPLETE
from .runner import RunResult, Scenario, all_checks, recompute, verdict_of
from ..sandbox.sut import Access, Target
from .options import CONNECT_TIMEOUT_S, flags_of
from .runner import SOURCE
from . import abtest, batch, cmp, findmax, hold, resilience, sessions, stress
from .abtest import AbtestSettings, run_abtest
from .batch import BatchSettings, run_batch
from .cmp import CmpSettings, run_cmp
from .hold import HoldSettings, run_hold
from .sessions import SessionsSettings, run_sessions
from .stress import StressSettings, run_stress

REGISTRY: dict[str, Scenario] = {m.SCENARIO.name: m.SCENARIO for m in (stress, batch, abtest, cmp, hold, sessions, findmax, resilience)}
# what `kstress compare` compares of each scenario's runs: its entry's own spec
COMPARE = {name: sc.compare for name, sc in REGISTRY.items()}


def scenario(name: str) -> Scenario:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"scenario {name!r} is unknown; known: {', '.join(REGISTRY)}") from None


def compare_runs(old_dir: Path, new_dir: Path, alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> Comparison:
    """`kstress compare OLD_RUN NEW_RUN`: the mechanics (harness/results/comparison.py)
    with each scenario's own rows."""
    return compare_stored(old_dir, new_dir, COMPARE, alpha, min_effect)


def refusals(old: dict, new: dict) -> tuple[list[str], list[str]]:
    """Why two run.json documents cannot be compared, and notes on what may differ."""
    return stored_refusals(old, new, COMPARE)


def rerender(path: Path) -> str:
    """`kstress report DIR`: re-render report.md from the run's raw files.
    Every figure and check is recomputed from them with the functions the run
    used (never a stored figure beside a recomputed one); what cannot be
    recomputed, or disagrees with what run.json recorded, is said out loud."""
    _, _, text = reload(path)
    (path / "report.md").write_text(text)
    return text


FORMATS = ("md", "html", "json", "prom")


def render_as(path: Path, fmt: str) -> str:
    """`kstress report DIR --format F`: the run, recomputed from its raw files, as F."""
    view, rows, text = reload(path)
    if fmt == "md":
        (path / "report.md").write_text(text)
        return text
    if fmt == "html":
        from ..results.htmlreport import render_html

        sc, sampled = scenario(view["scenario"]), {}
        if sc.digest is not None and rows:
            # the charts the run drew: a long run's from the same sample of its rows
            rows, sampled = sc.digest(view.get("settings") or {}, view.get("extras") or {}).feed(rows).chart()
        return render_html(view, rows or [], text, path, **sampled)
    if fmt == "prom":
        from ..results.promexport import render_prom

        return render_prom({**view, "run_name": path.name}, rows or [])
    keys = ("schema", "scenario", "status", "passed", "exit_code", "error", "started", "duration_s", "settings", "summary", "checks", "notes")
    return json.dumps({"run": path.name, **{k: view.get(k) for k in keys if k in view}}, indent=2, default=str) + "\n"


def reload(path: Path) -> tuple[dict, list | None, str]:
    """The run's view (run.json with its summary and checks recomputed), its rows, its Markdown."""
    loaded = read_run(path)
    doc, rows, notes = loaded.doc, loaded.rows, list(loaded.notes)
    sc = scenario(doc["scenario"])
    if rows is None:
        summary = doc.get("summary") or {}
        view = {**doc, "notes": notes}
        text = sc.render(view, summary)
    else:
        status = doc.get("status", "completed")
        reason = None
        if status == "running":
            reason = _why_still_running(doc)
            notes.append(reason)
        summary, checks = recompute(sc, doc, rows, reason=reason)
        passed, code = verdict_of(checks, summary)
        passed = status == "completed" and passed
        if status == "completed" and passed != bool(doc.get("passed")):
            if code == EXIT_INCOMPLETE and not any(c.get("ran") is False for c in doc.get("checks") or ()):
                # stored before a check could be "not run" (issue 22): it passed over a skipped core check
                notes.append(
                    f"run.json recorded PASS (exit code {doc.get('exit_code')}) over a check that did not run; kstress now calls "
                    f"such a run INCOMPLETE (exit {EXIT_INCOMPLETE}): it was stored before that rule"
                )
            else:
                notes.append(
                    f"run.json recorded {'PASS' if doc.get('passed') else 'FAIL'} (exit code {doc.get('exit_code')}); the raw files now say "
                    f"{'PASS' if passed else 'FAIL'}: were they edited after the run?"
                )
        view = {**doc, "passed": passed, "summary": summary, "checks": [c.to_json() for c in checks], "notes": notes}
        text = sc.render(view, summary)
    return view, rows, text


def _why_still_running(doc: dict) -> str:
    proc = doc.get("process") or {}
    pid, started = proc.get("pid"), proc.get("started")
    alive = False
    if isinstance(pid, int):
        try:
            p = psutil.Process(pid)
            alive = started is None or abs(p.create_time() - started) < 1.0
        except psutil.Error:
            alive = False
    if alive:
        return f"the run is still going (kstress pid {pid}): these are the turns recorded so far"
    return f"the run was cut short: run.json was never completed (its kstress process{f', pid {pid},' if pid else ''} is gone, killed?)"


__all__ = [
    "AbtestSettings",
    "CONNECT_TIMEOUT_S",
    "SOURCE",
    "flags_of",
    "Access",
    "BatchSettings",
    "COMPARE",
    "CmpSettings",
    "HoldSettings",
    "REGISTRY",
    "RunResult",
    "Scenario",
    "StressSettings",
    "Target",
    "all_checks",
    "compare_runs",
    "recompute",
    "refusals",
    "render_as",
    "rerender",
    "run_abtest",
    "run_batch",
    "run_cmp",
    "run_hold",
    "run_stress",
    "scenario",
    "SessionsSettings",
    "run_sessions",
]
