"""What several scenarios share beyond the runner: the system under test
(re-exported from harness.sandbox.sut) and the check of a batch-size list."""

from __future__ import annotations

from typing import Any

from mock.markers import N_MAX, N_MIN

from ..errors import UsageError
from ..results.report import fmt_ms, fmt_num, fmt_pct, md_text
from ..results.rundir import Check
from .runner import Progress, Run, RunResult
from ..results.stats import summarize
from ..sandbox.sut import Access, Target
from ..results.thresholds import LATENCY_PS, latency_stats, span_s
from ..judge.verdict import failure_counts

# what a kernel's entry in extras["kernels"] may carry beside its name, copied to summary.kernels[]
KERNEL_EXTRAS = ("weight", "conns", "sessions")

__all__ = ["Access", "Progress", "Run", "RunResult", "Target", "check_batch_sizes", "failure_counts", "ints", "kernel_checks", "kernel_sections", "kernel_summaries", "level_stats"]


def level_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One load level's row (a stage of a ramp, a step of find-max):
    attempted, passed, pass rate, p50/p95/p99 and mean of the passed turns,
    throughput over the turns' own span, failures by name."""
    passed = [r for r in rows if r.get("passed")]
    lat = [r["latency_s"] for r in passed if isinstance(r.get("latency_s"), (int, float))]
    span = span_s(rows)
    failures, _ = failure_counts(rows)
    st = latency_stats(lat)
    return {
        "attempted": len(rows),
        "passed": len(passed),
        "pass_rate": round(len(passed) / len(rows), 6) if rows else None,
        "latency_s": {k: st.get(k) for k in ("n", "p50", "p95", "p99", "max", "mean")},
        "throughput_per_s": round(len(passed) / span, 3) if span > 0 else None,
        "errors": failures,
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


def kernel_summaries(inputs: list[dict[str, Any]], extras: dict[str, Any], stat: Any = None) -> list[dict[str, Any]]:
    """summary.kernels: one object per kernel of extras["kernels"] (the
    runner names them), from the rows that carry its name, with the figures
    of the whole summary: attempted, passed, pass_rate, failures (by name),
    latency_s (the same percentiles), throughput_per_s, orphans. ``stat``
    keeps a row in the statistics (default: every row not in a warm-up)."""
    stat = stat or (lambda r: not r.get("warmup"))
    orphans = extras.get("orphans")
    out = []
    for k in extras.get("kernels") or ():
        name = k["name"]
        rs = [r for r in inputs if r.get("kernel") == name]
        passed = [r for r in rs if r.get("passed")]
        stat_rows = [r for r in rs if stat(r)]
        failures, examples = failure_counts(rs)
        lat = summarize([r["latency_s"] for r in passed if stat(r) and r.get("latency_s") is not None], LATENCY_PS)
        duration = span_s(stat_rows)
        row: dict[str, Any] = {
            "name": name,
            **{f: k[f] for f in KERNEL_EXTRAS if f in k},
            "attempted": len(rs),
            "passed": len(passed),
            "pass_rate": (len(passed) / len(rs)) if rs else None,
            "failures": failures,
            "failure_examples": examples,
            "latency_s": {m: (round(v, 6) if isinstance(v, float) else v) for m, v in lat.items()},
            "throughput_per_s": round(sum(1 for r in stat_rows if r.get("passed")) / duration, 2) if duration > 0 else None,
            "orphans": None if orphans is None else [o for o in orphans if o.get("kernel") == name],
        }
        if k.get("dedup_probe") is not None:
            row["dedup_probe"] = k["dedup_probe"]
        out.append(row)
    return out


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
