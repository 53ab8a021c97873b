"""find-max's rules on synthetic stage rows: the levels tried, when a stage
holds, the stop (slo / max / saturation), the maximum sustainable level, the
knee, and the check that tells load shedding from wrong answers."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.scenarios.findmax import FindmaxSettings, findmax_checks, knee, saturated, summarize_findmax

pytestmark = pytest.mark.fast
SLOS = ("p95<1s", "pass_rate>=0.99")


def test_levels_step_by_the_factor_and_end_exactly_at_max():
    assert FindmaxSettings(slos=SLOS).levels() == [4, 8, 16, 32, 64, 128, 256]
    assert FindmaxSettings(slos=SLOS, start=4, max_level=100).levels() == [4, 8, 16, 32, 64, 100]
    assert FindmaxSettings(slos=SLOS, start=1, factor=1.2, max_level=5).levels() == [1, 2, 3, 4, 5]  # at least +1
    assert FindmaxSettings(slos=SLOS, rate=True, start=2.5, factor=2, max_level=10).levels() == [2.5, 5.0, 10]


@pytest.mark.parametrize("kw,words", [
    (dict(slos=()), "needs a service level"),
    (dict(slos=("p95<1000",)), "--slo 'p95<1000'"),
    (dict(slos=SLOS, start=2.5), "whole number of connections"),
    (dict(slos=SLOS, max_level=2), "below --start"),
    (dict(slos=SLOS, factor=1.0), "--factor 1 is invalid"),
    (dict(slos=SLOS, stage_duration_s=0.1), "--stage-duration"),
    (dict(slos=SLOS, arrival="poisson"), "add --rate"),
])
def test_bad_settings_say_why(kw, words):
    with pytest.raises(UsageError) as e:
        FindmaxSettings(**kw)
    assert words in str(e.value)


def stage_rows(stage, level, n, lat, failed=0, name="error_frame:busy", span=2.0):
    rows = []
    for i in range(n):
        ok = i >= failed
        rows.append({"kind": "load", "stage": stage, "level": level, "passed": ok, "latency_s": lat, "t_rel": stage * 10 + i * span / n,
                     "failures": [] if ok else [name + " (x)"], "marker": ""})
    return rows


def settings(**kw):
    d = {"slos": list(SLOS), "start": 4, "factor": 2.0, "max_level": 256, "stage_duration_s": 2.0, "rate": False, "mix": "text:1"}
    d.update(kw)
    return d


def test_the_first_stage_that_breaks_ends_the_search_and_the_one_before_is_the_max():
    rows = stage_rows(1, 4, 100, 0.1) + stage_rows(2, 8, 200, 0.2) + stage_rows(3, 16, 200, 0.4, failed=50)
    s = summarize_findmax(rows, settings(), {"stages": [{"stage": 3, "queue_peak": 32, "rejected": 50}]})
    assert s["max_level"] == 8 and s["stop_reason"] == "slo"
    assert [h["held"] for h in s["stages"]] == [True, True, False] and s["stages"][2]["broken"] == ["pass_rate>=0.99"]
    assert s["stages"][2]["errors"] == {"error_frame:busy": 50} and s["stages"][2]["queue_peak"] == 32
    assert [t["passed"] for t in s["thresholds"]] == [True, True]  # the service levels at the max level
    assert findmax_checks(s, {})[0].passed  # busy is load shedding, not a wrong answer


def test_no_level_held_gives_no_max_and_failed_thresholds():
    s = summarize_findmax(stage_rows(1, 4, 50, 2.0), settings(), {})
    assert s["max_level"] is None and s["stop_reason"] == "slo"
    assert [t["passed"] for t in s["thresholds"]] == [False, True]


def test_every_stage_held_up_to_max():
    rows = [r for i, lv in enumerate([4, 8], 1) for r in stage_rows(i, lv, 100 * i, 0.1)]
    s = summarize_findmax(rows, settings(max_level=8), {})
    assert s["max_level"] == 8 and s["stop_reason"] == "max"


def test_wrong_answers_fail_the_check_by_name():
    s = summarize_findmax(stage_rows(1, 4, 100, 0.1, failed=3, name="count"), settings(slos=["p95<1s"]), {})
    c = findmax_checks(s, {})[0]
    assert not c.passed and "count x3" in c.detail


def test_saturation_needs_flat_throughput_and_climbing_latency_and_ends_only_an_unbounded_search():
    a = {"level": 4, "throughput_per_s": 100.0, "latency_s": {"mean": 0.04}}
    b = {"level": 8, "throughput_per_s": 104.0, "latency_s": {"mean": 0.08}}
    assert saturated(a, b)
    assert not saturated(a, dict(b, throughput_per_s=180.0))  # it scaled
    assert not saturated(a, dict(b, latency_s={"mean": 0.05}))  # flat, but latency did not climb
    # three stages, each doubling the level, throughput flat, mean latency doubling
    rows = stage_rows(1, 4, 200, 0.04) + stage_rows(2, 8, 200, 0.08) + stage_rows(3, 16, 200, 0.16)
    assert summarize_findmax(rows, settings(slos=["pass_rate>=0.99"]), {})["stop_reason"] == "saturation"
    s = summarize_findmax(rows, settings(), {})  # a latency --slo bounds it: go on to the break
    assert s["stop_reason"] is None and s["saturated_at"] == 8 and s["max_level"] == 16


def test_the_knee_is_the_lowest_level_with_90_percent_of_the_best_throughput():
    h = [{"level": lv, "held": True, "throughput_per_s": t} for lv, t in ((4, 50), (8, 95), (16, 100), (32, 99))]
    assert knee(h) == 8
    assert knee([]) is None
