"""harness.results.stats: numbers kstress prints must be defensible."""

import math
import random

import pytest

from harness.results import stats


def test_percentile_is_nearest_rank_and_an_observed_value():
    xs = [5, 1, 4, 2, 3]
    assert stats.percentile(xs, 50) == 3
    assert stats.percentile(xs, 0) == 1
    assert stats.percentile(xs, 100) == 5
    assert stats.percentile(list(range(1, 101)), 99) == 99
    assert stats.percentile([], 50) is None
    with pytest.raises(ValueError):
        stats.percentile(xs, 101)


def test_histogram_matches_exact_percentiles_within_precision_and_merges():
    rng = random.Random(7)
    xs = [rng.lognormvariate(-3, 1) for _ in range(5000)]
    a, b = stats.LogHistogram(), stats.LogHistogram()
    for k, x in enumerate(xs):
        (a if k % 2 else b).record(x)
    merged = a.merge(b)
    assert merged.n == len(xs)
    for p in (50, 90, 99):
        exact = stats.percentile(xs, p)
        assert merged.percentile(p) == pytest.approx(exact, rel=0.011)
    assert merged.percentile(100) == max(xs)


def test_mann_whitney_exact_small_samples():
    # all of a below all of b: U = 0, exact two-sided p = 2 / C(6, 3) = 0.1
    r = stats.mann_whitney_u([1, 2, 3], [4, 5, 6])
    assert r.method == "exact" and r.u == 0 and r.p == pytest.approx(0.1)
    r = stats.mann_whitney_u(list(range(10)), list(range(10, 20)))
    assert r.p == pytest.approx(2 / math.comb(20, 10))
    # identical distributions interleaved: not significant
    assert stats.mann_whitney_u([1, 3, 5, 7], [2, 4, 6, 8]).p > 0.5


def test_mann_whitney_normal_approximation_with_ties():
    a = [0.0] * 20 + [1.0] * 80
    b = [0.0] * 60 + [1.0] * 40
    r = stats.mann_whitney_u(a, b)
    assert r.method == "normal"
    assert r.p < 1e-6
    assert stats.mann_whitney_u([1.0] * 10, [1.0] * 10).p == 1.0


def test_bootstrap_median_is_deterministic_and_brackets_the_median():
    xs = [0.20, 0.21, 0.22, 0.25, 0.19, 0.2, 0.23]
    a, b = stats.bootstrap_median(xs), stats.bootstrap_median(xs)
    assert a == b
    assert a.low <= a.median <= a.high
    ratio, lo, hi = stats.bootstrap_ratio([0.8, 0.82, 0.79, 0.81], [0.2, 0.21, 0.2, 0.19])
    assert lo <= ratio <= hi and ratio == pytest.approx(4.0, rel=0.05)


def test_stability_warnings():
    assert stats.stability_warnings([1.0] * 10) == ()
    w = stats.stability_warnings([1.0, 2.0])
    assert any("only 2 sample" in x for x in w)
    assert any("unstable" in x for x in stats.stability_warnings([1, 1, 1, 1, 3, 1, 1]))


def test_compare_needs_significance_and_a_minimum_effect():
    old = [0.200, 0.201, 0.199, 0.202, 0.200, 0.198, 0.201, 0.200]
    slower = [x * 4 for x in old]
    assert stats.compare("t", old, slower, higher_is_better=False).verdict == "worse"
    assert stats.compare("t", old, [x / 2 for x in old], higher_is_better=False).verdict == "better"
    tiny = [x * 1.02 for x in old]  # significant but a 2% change
    c = stats.compare("t", old, tiny, higher_is_better=False)
    assert c.verdict == "same" and "minimum effect" in c.reason
    assert stats.compare("t", old, [], higher_is_better=False).verdict == "unmeasurable"
    noisy = stats.compare("t", [1, 2, 3], [1.5, 2.5, 3.5], higher_is_better=False)
    assert noisy.verdict == "same" and "not significant" in noisy.reason
