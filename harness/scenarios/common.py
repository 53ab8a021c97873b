"""What several scenarios share beyond the runner: the system under test
(re-exported from harness.sandbox.sut) and the check of a batch-size list."""

from __future__ import annotations

from typing import Any, Iterable

from mock.markers import N_MAX, N_MIN

from ..errors import UsageError
from ..results.report import fmt_ms, fmt_num, fmt_pct, md_text
from ..results.rundir import Check
from .runner import Progress, Run, RunResult
from ..sandbox.sut import Access, Target
from ..results.aggregate import Level
from ..results.thresholds import LATENCY_PS, latency_stats_of
from ..judge.verdict import failure_counts

# what a kernel's entry in extras["kernels"] may carry beside its name, copied to summary.kernels[]
KERNEL_EXTRAS = ("weight", "conns", "sessions")

__all__ = ["Access", "Progress", "Run", "RunResult", "Target", "check_batch_sizes", "failure_counts", "ints", "kernel_checks", "kernel_sections", "kernel_summaries", "level_of", "level_stats"]


def level_stats(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """One load level's row (a stage of a ramp, a step of find-max):
    attempted, passed, pass rate, p50/p95/p99 and mean of the passed turns,
    throughput over the turns' own span, failures by name."""
    lvl = Level()
    for r in rows:
        lvl.add(r)
    return level_of(lvl)


def level_of(lvl: Level) -> dict[str, Any]:
    """level_stats of the rows a :class:`Level` was fed (a streaming run's stages)."""
    span = lvl.span()
    st = latency_stats_of(lvl.lat)
    return {
        "attempted": lvl.attempted,
        "passed": lvl.passed,
        "pass_rate": round(lvl.passed / lvl.attempted, 6) if lvl.attempted else None,
        "latency_s": {k: st.get(k) for k in ("n", "p50", "p95", "p99", "max", "mean", "rel_error") if k in st or k != "rel_error"},
        "throughput_per_s": round(lvl.passed / span, 3) if span > 0 else None,
        "errors": lvl.failure_counts()[0],
    }


def check_batch_sizes(ns: tuple[int, ...], example: str) -> None:
    """--n of batch and abtest: a non-empty list of counts the marker grammar takes."""
    if not ns:
        raise UsageError(f"--n is empty: give batch sizes, e.g. --n {example}")
    for n in ns:
        if not N_MIN <= n <= N_MAX:
            raise UsageError(f"--n {n} is out of range: batch sizes are {N_MIN} to {N_MAX}")


def ints(value: str, flag: str = "--n") -> tuple[int, ...]:
    """A comma-separated list of integers, as --n takes it."""
    items = [x.strip() for x in value.split(",")]
    if any(not x for x in items) and value.strip():
        raise UsageError(f"{flag} {value!r} has an empty item (two commas, or a trailing one): expected comma-separated integers, e.g. 2,4,8")
    try:
        return tuple(int(x) for x in items if x)
    except ValueError:
        raise UsageError(f"{flag} {value!r}: expected comma-separated integers, e.g. 2,4,8") from None


# --- several kernels at once ------------------------------------------------------------


def kernel_summaries(inputs: Iterable[dict[str, Any]], extras: dict[str, Any], stat: Any = None) -> list[dict[str, Any]]:
    """summary.kernels: one object per kernel of extras["kernels"] (the
    runner names them), from the rows that carry its name, with the figures
    of the whole summary: attempted, passed, pass_rate, failures (by name),
    latency_s (the same percentiles), throughput_per_s, orphans. ``stat``
    keeps a row in the statistics (default: every row not in a warm-up)."""
    stat = stat or (lambda r: not r.get("warmup"))
    every: dict[str, Level] = {}
    stats: dict[str, Level] = {}
    for r in inputs:
        name = r.get("kernel")
        if name is None:
            continue
        every.setdefault(name, Level()).add(r)
        if stat(r):
            stats.setdefault(name, Level()).add(r)
    return [kernel_entry(k, every.get(k["name"]) or Level(), stats.get(k["name"]) or Level(), extras) for k in extras.get("kernels") or ()]


def kernel_entry(k: dict[str, Any], every: Level, stat: Level, extras: dict[str, Any]) -> dict[str, Any]:
    """One kernel's object of summary.kernels: counts and failures over
    ``every`` row of it, latency and throughput over its ``stat`` rows."""
    name = k["name"]
    orphans = extras.get("orphans")
    failures, examples = every.failure_counts()
    duration = stat.span()
    row: dict[str, Any] = {
        "name": name,
        **{f: k[f] for f in KERNEL_EXTRAS if f in k},
        "attempted": every.attempted,
        "passed": every.passed,
        "pass_rate": (every.passed / every.attempted) if every.attempted else None,
        "failures": failures,
        "failure_examples": examples,
        "latency_s": {m: (round(v, 6) if isinstance(v, float) else v) for m, v in stat.lat.stats(LATENCY_PS).items()},
        "throughput_per_s": round(stat.passed / duration, 2) if duration > 0 else None,
        "orphans": None if orphans is None else [o for o in orphans if o.get("kernel") == name],
    }
    if k.get("dedup_probe") is not None:
        row["dedup_probe"] = k["dedup_probe"]
    return row


def kernel_checks(summary: dict[str, Any], what: str = "input") -> list[Check]:
    """One verdict check per kernel, naming it (the orphan checks per kernel
    are the runner's)."""
    out = []
    for k in summary.get("kernels") or ():
        ok = k["attempted"] > 0 and k["passed"] == k["attempted"]
        detail = f"{k['passed']}/{k['attempted']} passed" + (f"; failures: {k['failures']}" if k["failures"] else "")
        out.append(Check(f"every {what} to {k['name']} passed its verdict", ok, detail))
    return out


def kernel_sections(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The report's per-kernel verdict table (one row per kernel) and its
    per-kernel latency rows (passed turns), for the Verdicts and Latency sections."""
    ks = summary.get("kernels") or ()
    if not ks:
        return [], []
    verdicts = ["| kernel | weight | attempted | passed | pass rate | throughput | failures | orphans |", "|---|---:|---:|---:|---:|---:|---|---:|"]
    for k in ks:
        fails = md_text(", ".join(f"{n} {c}" for n, c in k["failures"].items()) or "-")
        orph = "-" if k.get("orphans") is None else str(len(k["orphans"]))
        verdicts.append(f"| {md_text(k['name'])} | {fmt_num(k.get('weight'), '{:g}')} | {k['attempted']} | {k['passed']} | {fmt_pct(k.get('pass_rate'))} | "
                        f"{fmt_num(k.get('throughput_per_s'), '{:.1f}/s')} | {fails} | {orph} |")
    verdicts.append("")
    latency = ["| kernel | n | p50 | p90 | p95 | p99 | max | mean |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for k in ks:
        p = k.get("latency_s") or {}
        latency.append(f"| {md_text(k['name'])} | {p.get('n')} | " + " | ".join(fmt_ms(p.get(m)) for m in ("p50", "p90", "p95", "p99", "max", "mean")) + " |")
    latency.append("")
    return verdicts, latency
