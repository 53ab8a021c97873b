"""What several scenarios share beyond the runner: the system under test
(re-exported from harness.sut) and the check of a batch-size list."""

from __future__ import annotations

from collections import Counter
from typing import Any

from mock.markers import N_MAX, N_MIN

from ..errors import UsageError
from ..runner import Progress, Run, RunResult
from ..sut import Access, Target
from ..verdict import failure_name

__all__ = ["Access", "Progress", "Run", "RunResult", "Target", "check_batch_sizes", "failure_counts", "ints"]


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
