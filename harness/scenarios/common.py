"""What several scenarios share beyond the runner: the system under test
(re-exported from harness.sut) and the check of a batch-size list."""

from __future__ import annotations

from collections import Counter
from typing import Any

from mock.markers import N_MAX, N_MIN

from ..errors import UsageError
from ..runner import Progress, Run, RunResult
from ..sut import Access, Target
from ..thresholds import latency_stats, span_s
from ..verdict import failure_name

__all__ = ["Access", "Progress", "Run", "RunResult", "Target", "check_batch_sizes", "failure_counts", "ints", "level_stats"]


def failure_counts(rows: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """Failed rows by the name of their first failure, without its numbers
    (`count 1/4` and `count 3/4` are one `count` row), and the first full
    reason of each as an example."""
    failures: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in rows:
        name = failure_name(r)
        if name is not None:
            failures[name] += 1
            examples.setdefault(name, r["failures"][0])
    return dict(sorted(failures.items())), dict(sorted(examples.items()))


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
