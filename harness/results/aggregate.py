"""Streaming aggregates: a run's summary in memory that does not grow with its
turns (issue 25, item 6).

A run keeps every row on disk (turns.jsonl); what it keeps in memory is fed
one row at a time and answers the summary's questions at the end:

    Quantiles   nearest-rank percentiles, exact up to EXACT_MAX samples, then
                from a log histogram (relative error <= HIST_PRECISION, stated
                in the result as ``rel_error``); n, min, max and mean stay exact
    Sweep       the peak of spans open at once: an exact sweep over a buffer
                of the last seconds, flushed behind a watermark (rows arrive
                as their turns end, so a span older than the watermark is
                rare: it is counted from the watermark and said, ``late``)
    Ends        passed turns' end times for the throughput windows: exact up
                to EXACT_MAX, then counts in time bins (edges within ``bin_s``)
    Level       one load level's figures (attempted, passed, failures by name,
                latency, span, concurrency): a stage, a kernel, a threshold's
                selection
    Sample      a bounded uniform sample of rows for the charts (every row
                while the run is smaller than the sample)

Each answers with exactly what the row functions it replaces
(harness/results/stats.py, thresholds.py, concurrency.py) answer while the
run is small, so a short run's summary is unchanged; tests/harness/
test_aggregate.py holds the two equal, and the approximations within their
stated bounds.
"""

from __future__ import annotations

import math
import random
from array import array
from typing import Any, Iterable

from .concurrency import Concurrency
from .stats import LogHistogram, percentile, summarize

EXACT_MAX = 20_000  # samples kept per series for exact percentiles: 160 KB
HIST_PRECISION = 0.01
SAMPLE_ROWS = 20_000  # rows the charts draw, at most
BINS_MAX = 1 << 16  # time bins of a long run's throughput before they widen


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


class Quantiles:
    """Percentiles of one series: exact up to ``cap`` samples, then from a
    mergeable log histogram (error stated in the result). Adding a sample
    under the cap is one append: n, min, max and the sum are read off the
    samples when asked, and tracked only past the cap."""

    __slots__ = ("cap", "_n", "sum", "_min", "_max", "_xs", "_hist")

    def __init__(self, cap: int = EXACT_MAX) -> None:
        self.cap = cap
        self._xs: array | None = array("d")
        self._hist: LogHistogram | None = None
        self._n = 0
        self.sum = 0.0
        self._min = math.inf
        self._max = -math.inf

    @property
    def exact(self) -> bool:
        return self._hist is None

    @property
    def n(self) -> int:
        return len(self._xs) if self._xs is not None else self._n

    @property
    def min(self) -> float:
        return min(self._xs, default=math.inf) if self._xs is not None else self._min

    @property
    def max(self) -> float:
        return max(self._xs, default=-math.inf) if self._xs is not None else self._max

    def add(self, x: float) -> None:
        xs = self._xs
        if xs is not None and len(xs) < self.cap:
            xs.append(x)
            return
        if xs is not None:
            self._hist = LogHistogram(HIST_PRECISION)
            for v in xs:
                self._hist.record(v)
            self._n, self.sum, self._min, self._max = len(xs), math.fsum(xs), min(xs), max(xs)
            self._xs = None
        assert self._hist is not None
        self._hist.record(x)
        self._n += 1
        self.sum += x
        if x < self._min:
            self._min = x
        if x > self._max:
            self._max = x

    def values(self) -> list[float] | None:
        """Every sample, or None once past the cap."""
        return None if self._xs is None else list(self._xs)

    def percentile(self, p: float) -> float | None:
        if self._xs is not None:
            return percentile(self._xs, p)
        assert self._hist is not None
        return self._hist.percentile(p)

    def stats(self, ps: Iterable[float]) -> dict[str, Any]:
        """What stats.summarize answers for the same samples (plus
        ``rel_error`` once the percentiles come from the histogram)."""
        ps = tuple(ps)
        if self._xs is not None:
            return summarize(self._xs, ps)
        assert self._hist is not None
        out: dict[str, Any] = {"n": self._n}
        for p in ps:
            out[f"p{p:g}"] = self._hist.percentile(p)
        out.update(min=self._min, max=self._max, mean=self.sum / self._n, rel_error=HIST_PRECISION)
        return out


class Ends:
    """Passed turns' end times and the first send, for throughput_windows."""

    __slots__ = ("cap", "t0", "n", "_ends", "_bins", "bin_s", "t1")

    def __init__(self, cap: int = EXACT_MAX) -> None:
        self.cap = cap
        self.t0 = math.inf
        self.t1 = -math.inf
        self.n = 0
        self._ends: array | None = array("d")
        self._bins: array | None = None
        self.bin_s = 0.01

    def start(self, t: float) -> None:
        if t < self.t0:
            self.t0 = t

    def end(self, e: float) -> None:
        self.n += 1
        if e > self.t1:
            self.t1 = e
        if self._ends is not None:
            self._ends.append(e)
            if len(self._ends) > self.cap:
                self._bins = array("Q")
                for x in self._ends:
                    self._bin(x)
                self._ends = None
        else:
            self._bin(e)

    def _bin(self, e: float) -> None:
        assert self._bins is not None
        k = max(0, int(e / self.bin_s))
        while k >= BINS_MAX:
            # wider bins, half as many: a day-long run keeps 64 Ki counters
            old = self._bins
            self._bins = array("Q", (old[i] + (old[i + 1] if i + 1 < len(old) else 0) for i in range(0, len(old), 2)))
            self.bin_s *= 2
            k = max(0, int(e / self.bin_s))
        if k >= len(self._bins):
            self._bins.extend([0] * (k + 1 - len(self._bins)))
        self._bins[k] += 1

    def windows(self, max_windows: int = 60) -> dict[str, Any] | None:
        """thresholds.throughput_windows' answer (window edges within
        ``bin_s`` once the ends are binned, and said)."""
        if not self.n or self.t0 == math.inf:
            return None
        t0, t1 = self.t0, self.t1
        window = max(1.0, math.ceil((t1 - t0) / max_windows))
        n = max(1, math.ceil((t1 - t0) / window))
        counts = [0] * n
        if self._ends is not None:
            for e in sorted(self._ends):
                counts[min(n - 1, int((e - t0) / window))] += 1
        else:
            assert self._bins is not None
            for k, c in enumerate(self._bins):
                if c:
                    mid = (k + 0.5) * self.bin_s
                    counts[min(n - 1, max(0, int((mid - t0) / window)))] += c
        rates = [c / window for c in counts]
        inner = sorted(rates[1:-1] if n > 2 else rates)
        out: dict[str, Any] = {
            "window_s": window,
            "stable_per_s": round(inner[(len(inner) - 1) // 2], 3),
            "peak_per_s": round(max(rates), 3),
            "windows": [[round(t0 + i * window, 3), round(r, 3)] for i, r in enumerate(rates)],
        }
        if self._ends is None:
            out["edge_s"] = self.bin_s
        return out


class Level:
    """One load level over the rows fed to it: what common.level_stats,
    kernel_summaries and a threshold measure."""

    __slots__ = ("attempted", "passed", "failed", "failures", "examples", "lat", "lo", "hi", "conc")

    def __init__(self, concurrency: bool = False) -> None:
        self.attempted = 0
        self.passed = 0
        self.failed = 0
        self.failures: dict[str, int] = {}
        self.examples: dict[str, str] = {}
        self.lat = Quantiles()
        self.lo = math.inf
        self.hi = -math.inf
        self.conc = Concurrency() if concurrency else None

    def add(self, r: dict[str, Any]) -> None:
        self.attempted += 1
        if r.get("passed"):
            self.passed += 1
            if _num(r.get("latency_s")):
                self.lat.add(r["latency_s"])
        else:
            self.failed += 1
            fs = r.get("failures")
            if fs:
                name = fs[0].split(" ", 1)[0]  # judge.verdict.failure_name
                self.failures[name] = self.failures.get(name, 0) + 1
                if name not in self.examples:
                    self.examples[name] = fs[0]
        t = r.get("t_rel")
        if _num(t):
            if t < self.lo:
                self.lo = t
            e = t + (r.get("latency_s") or 0)
            if e > self.hi:
                self.hi = e
        if self.conc is not None:
            self.conc.add(r)

    def span(self) -> float:
        """thresholds.span_s of the rows fed."""
        return self.hi - self.lo if self.lo != math.inf else 0.0

    def failure_counts(self) -> tuple[dict[str, int], dict[str, str]]:
        return dict(sorted(self.failures.items())), dict(sorted(self.examples.items()))


class Sample:
    """A uniform sample of at most ``size`` rows (Vitter's algorithm R, seeded:
    the same run draws the same sample), and every row while there are fewer."""

    __slots__ = ("size", "seen", "rows", "_rng")

    def __init__(self, size: int = SAMPLE_ROWS, seed: int = 1) -> None:
        self.size = size
        self.seen = 0
        self.rows: list[dict[str, Any]] = []
        self._rng = random.Random(seed)

    def add(self, row: dict[str, Any]) -> None:
        self.seen += 1
        if len(self.rows) < self.size:
            self.rows.append(row)
            return
        j = self._rng.randrange(self.seen)
        if j < self.size:
            self.rows[j] = row

    @property
    def complete(self) -> bool:
        return self.seen == len(self.rows)
