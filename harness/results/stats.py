"""Statistics kstress prints: exact percentiles, a mergeable log histogram for
long runs, the median with a bootstrap confidence interval, the Mann-Whitney U
test for A/B comparisons, and stability warnings printed beside the numbers.

Computation only; formatting lives in report.py. Pure Python: the sample
counts involved (rounds, turns) make numpy unnecessary.
"""

from __future__ import annotations

import math
import random
import statistics
from dataclasses import dataclass, field
from typing import Iterable, Sequence

ALPHA = 0.05
MIN_EFFECT = 0.05  # a change smaller than 5% is "same" even when significant
BOOTSTRAP_RESAMPLES = 2000


def percentile(samples: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile: the smallest sample with at least p% of the
    samples at or below it -- always a value that was really observed."""
    if not samples:
        return None
    if not 0 <= p <= 100:
        raise ValueError(f"percentile {p} must be within 0..100")
    ordered = sorted(samples)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def summarize(samples: Sequence[float], ps: Iterable[float] = (50, 90, 99)) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"n": len(samples)}
    if not samples:
        out.update({f"p{p:g}": None for p in ps})
        out.update(min=None, max=None, mean=None)
        return out
    ordered = sorted(samples)
    for p in ps:
        out[f"p{p:g}"] = percentile(ordered, p)
    out.update(min=ordered[0], max=ordered[-1], mean=statistics.fmean(ordered))
    return out


class LogHistogram:
    """HDR-style histogram: log-spaced buckets with a bounded relative error
    (``precision``), mergeable across workers, O(buckets) memory."""

    def __init__(self, precision: float = 0.01, floor: float = 1e-6) -> None:
        self.precision = precision
        self.floor = floor
        self._log_base = math.log1p(precision)
        self.counts: dict[int, int] = {}
        self.n = 0
        self.min = math.inf
        self.max = -math.inf

    def _bucket(self, v: float) -> int:
        return int(math.floor(math.log(max(v, self.floor) / self.floor) / self._log_base))

    def record(self, v: float) -> None:
        b = self._bucket(v)
        self.counts[b] = self.counts.get(b, 0) + 1
        self.n += 1
        self.min = min(self.min, v)
        self.max = max(self.max, v)

    def merge(self, other: "LogHistogram") -> "LogHistogram":
        if (other.precision, other.floor) != (self.precision, self.floor):
            raise ValueError("cannot merge histograms of different precision or floor")
        for b, c in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + c
        self.n += other.n
        self.min = min(self.min, other.min)
        self.max = max(self.max, other.max)
        return self

    def percentile(self, p: float) -> float | None:
        if not self.n:
            return None
        rank = max(1, math.ceil(p / 100 * self.n))
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                upper = self.floor * math.exp((b + 1) * self._log_base)
                return min(max(upper, self.min), self.max)
        return self.max


# --- medians and confidence -----------------------------------------------------


@dataclass(frozen=True)
class MedianCI:
    median: float | None
    low: float | None
    high: float | None
    n: int
    warnings: tuple[str, ...] = ()


def bootstrap_median(samples: Sequence[float], confidence: float = 0.95, seed: int = 1) -> MedianCI:
    """Median with a percentile-bootstrap interval (seeded: the same samples
    always give the same interval)."""
    n = len(samples)
    if n == 0:
        return MedianCI(None, None, None, 0, ("no valid samples",))
    med = statistics.median(samples)
    if n == 1:
        return MedianCI(med, None, None, 1, stability_warnings(samples))
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(samples, k=n)) for _ in range(BOOTSTRAP_RESAMPLES))
    lo_i = int((1 - confidence) / 2 * BOOTSTRAP_RESAMPLES)
    hi_i = min(BOOTSTRAP_RESAMPLES - 1, int((1 + confidence) / 2 * BOOTSTRAP_RESAMPLES))
    return MedianCI(med, meds[lo_i], meds[hi_i], n, stability_warnings(samples))


def bootstrap_ratio(num: Sequence[float], den: Sequence[float], confidence: float = 0.95, seed: int = 2) -> tuple[float | None, float | None, float | None]:
    """median(num) / median(den) with a bootstrap interval (both resampled)."""
    if not num or not den:
        return None, None, None
    md = statistics.median(den)
    if md <= 0:
        return None, None, None
    ratio = statistics.median(num) / md
    if len(num) < 2 or len(den) < 2:
        return ratio, None, None
    rng = random.Random(seed)
    vals = []
    for _ in range(BOOTSTRAP_RESAMPLES):
        d = statistics.median(rng.choices(den, k=len(den)))
        if d > 0:
            vals.append(statistics.median(rng.choices(num, k=len(num))) / d)
    vals.sort()
    lo_i = int((1 - confidence) / 2 * len(vals))
    hi_i = min(len(vals) - 1, int((1 + confidence) / 2 * len(vals)))
    return ratio, vals[lo_i], vals[hi_i]


def stability_warnings(samples: Sequence[float], min_n: int = 5) -> tuple[str, ...]:
    """Warnings printed beside a number (after pyperf's checks)."""
    out = []
    n = len(samples)
    if n < min_n:
        out.append(f"only {n} sample(s): at least {min_n} are needed for a stable median")
    if n >= 2:
        mean = statistics.fmean(samples)
        if mean > 0:
            cv = statistics.stdev(samples) / mean
            if cv > 0.10:
                out.append(f"unstable: the standard deviation is {cv:.0%} of the mean")
        med = statistics.median(samples)
        if med > 0 and (max(samples) - min(samples)) / med > 0.5:
            out.append(f"wide spread: min {min(samples):.4g} .. max {max(samples):.4g} around a median of {med:.4g}")
    return tuple(out)


# --- Mann-Whitney U ---------------------------------------------------------------


@dataclass(frozen=True)
class MWU:
    u: float
    p: float
    method: str  # exact | normal


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        avg = (i + j) / 2 + 1
        for k in range(i, j + 1):
            ranks[order[k]] = avg
        i = j + 1
    return ranks


def _exact_u_cdf(n1: int, n2: int) -> list[float]:
    """P(U <= u) for u = 0..n1*n2 without ties (dynamic programming)."""
    # counts[i][j] = polynomial coefficients of U for samples of size i, j
    memo: dict[tuple[int, int], list[int]] = {}

    def counts(i: int, j: int) -> list[int]:
        if i == 0 or j == 0:
            return [1]
        key = (i, j)
        if key in memo:
            return memo[key]
        a = counts(i - 1, j)  # largest element from sample 1: adds j to U
        b = counts(i, j - 1)
        out = [0] * (i * j + 1)
        for u, c in enumerate(a):
            out[u + j] += c
        for u, c in enumerate(b):
            out[u] += c
        memo[key] = out
        return out

    c = counts(n1, n2)
    total = sum(c)
    acc, cdf = 0, []
    for v in c:
        acc += v
        cdf.append(acc / total)
    return cdf


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> MWU | None:
    """Two-sided Mann-Whitney U test. Exact for small samples without ties,
    normal approximation with tie and continuity correction otherwise."""
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        return None
    ranks = _ranks(list(a) + list(b))
    r1 = sum(ranks[:n1])
    u1 = r1 - n1 * (n1 + 1) / 2
    u2 = n1 * n2 - u1
    u = min(u1, u2)
    ties = len(set(list(a) + list(b))) < n1 + n2
    if not ties and n1 * n2 <= 400:
        cdf = _exact_u_cdf(n1, n2)
        p = min(1.0, 2 * cdf[int(u)])
        return MWU(u1, p, "exact")
    n = n1 + n2
    counts: dict[float, int] = {}
    for v in list(a) + list(b):
        counts[v] = counts.get(v, 0) + 1
    tie_term = sum(t**3 - t for t in counts.values()) / (n * (n - 1)) if n > 1 else 0
    sigma = math.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term))
    if sigma == 0:
        return MWU(u1, 1.0, "normal")
    z = (abs(u1 - n1 * n2 / 2) - 0.5) / sigma
    p = math.erfc(max(z, 0) / math.sqrt(2))
    return MWU(u1, min(1.0, p), "normal")


@dataclass(frozen=True)
class Comparison:
    """OLD vs NEW on one metric. ``verdict``: better | worse | same | unmeasurable."""

    metric: str
    old_median: float | None
    new_median: float | None
    change: float | None  # (new - old) / old
    p: float | None
    verdict: str
    higher_is_better: bool
    reason: str = ""
    warnings: tuple[str, ...] = field(default_factory=tuple)


def compare(metric: str, old: Sequence[float], new: Sequence[float], *, higher_is_better: bool, alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> Comparison:
    """Significance (Mann-Whitney U, alpha) and a minimum effect are both
    required for better/worse."""
    if not old or not new:
        side = "OLD" if not old else "NEW"
        return Comparison(metric, _med(old), _med(new), None, None, "unmeasurable", higher_is_better, f"no valid samples on {side}")
    mo, mn = statistics.median(old), statistics.median(new)
    change = (mn - mo) / mo if mo else None
    test = mann_whitney_u(old, new)
    p = test.p if test else None
    warnings = tuple(f"OLD: {w}" for w in stability_warnings(old)) + tuple(f"NEW: {w}" for w in stability_warnings(new))
    if p is None or p >= alpha:
        return Comparison(metric, mo, mn, change, p, "same", higher_is_better, f"not significant (p={p:.3g} >= {alpha})" if p is not None else "no test", warnings)
    if change is None or abs(change) < min_effect:
        return Comparison(metric, mo, mn, change, p, "same", higher_is_better, f"significant but below the {min_effect:.0%} minimum effect", warnings)
    improved = (change > 0) == higher_is_better
    return Comparison(metric, mo, mn, change, p, "better" if improved else "worse", higher_is_better, f"p={p:.3g}, change {change:+.1%}", warnings)


def _med(xs: Sequence[float]) -> float | None:
    return statistics.median(xs) if xs else None


# --- drift between stored runs ----------------------------------------------------


def band(samples: Sequence[float]) -> float | None:
    """How widely one run's own samples scatter: p90 / p10 (nearest rank: max / min
    for 10 samples or fewer), a factor >= 1. It holds whatever the run
    drifted while it ran, and the load that came and went on the machine --
    which shifts a whole run as well: two stored runs of one binary made
    apart differ by up to about that much (docs/metrics.md). None for no
    sample or samples of mixed sign; inf when the band starts at 0."""
    if not samples:
        return None
    lo, hi = percentile(samples, 10), percentile(samples, 90)
    assert lo is not None and hi is not None
    if lo < 0:
        return None
    if lo == 0:
        return 1.0 if hi == 0 else math.inf
    return hi / lo
