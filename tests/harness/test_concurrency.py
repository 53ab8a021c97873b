"""Load truth (issue 23, item 5): turns at the agent (first LLM request -> last
LLM byte, from the mock's anatomy) against turns in flight (send -> done), on
hand-made rows: the interval sweep, its edge cases, the finding, the threshold
metric, and the stress and findmax summaries that carry them."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.results.concurrency import FINDING, achieved, agent_span, line, overlap, serialised
from harness.results.thresholds import evaluate, parse_threshold, parse_thresholds
from harness.scenarios import StressSettings, run_stress
from harness.scenarios.findmax import judge_stage, render_findmax, summarize_findmax
from harness.scenarios.stress import render_stress, summarize_stress


def turn(t: float, lat: float, pre: float | None = 0.0, post: float = 0.0, **kw) -> dict:
    """A passed load turn sent at ``t`` taking ``lat``; ``pre``/``post`` the
    anatomy's before/after the LLM (None: no anatomy, as without a mock)."""
    row = {"kind": "load", "marker": "!batch2", "passed": True, "t_rel": t, "latency_s": lat, **kw}
    if pre is not None:
        row["anatomy"] = {"pre_llm_s": pre, "llm_s": lat - pre - post, "post_llm_s": post}
    return row


def serial(n: int = 4, each: float = 1.0) -> list[dict]:
    """n turns sent at once to an agent that runs one at a time: turn i waits
    i x ``each`` before its first LLM request."""
    return [turn(0.0, (i + 1) * each, pre=i * each) for i in range(n)]


def parallel(n: int = 4, each: float = 1.0) -> list[dict]:
    return [turn(0.0, each, pre=0.05, post=0.05) for _ in range(n)]


def test_overlap_mean_and_peak():
    assert overlap([(0, 1), (0, 1)], 1.0) == {"mean": 2.0, "peak": 2}
    # nested: one span inside another
    assert overlap([(0, 4), (1, 2)], 4.0) == {"mean": 1.25, "peak": 2}
    # spans that touch at an instant do not overlap: an end counts before a start
    assert overlap([(0, 1), (1, 2), (2, 3)], 3.0) == {"mean": 1.0, "peak": 1}
    # a zero-length span holds nothing open
    assert overlap([(0, 2), (1, 1)], 2.0) == {"mean": 1.0, "peak": 1}
    assert overlap([], 1.0) == {"mean": 0.0, "peak": 0}
    assert overlap([(0, 1)], 0.0)["mean"] is None


def test_agent_span_from_the_anatomy():
    assert agent_span(turn(2.0, 3.0, pre=0.5, post=0.25)) == (2.5, 4.75)
    assert agent_span(turn(2.0, 3.0, pre=None)) is None
    # rounding can make pre + post exceed the latency by a microsecond: clamped, not negative
    a, b = agent_span(turn(0.0, 1.0, pre=0.6, post=0.400001))
    assert b == a


def test_no_mock_data_measures_in_flight_only():
    c = achieved([turn(0, 1, pre=None), turn(0, 1, pre=None)])
    assert c["agent"] is None and c["ratio"] is None and c["seen"] == 0 and "anatomy" in c["why"]
    assert c["in_flight"] == {"mean": 2.0, "peak": 2}
    assert not serialised(c)
    assert "not measured at the agent" in line(c)
    # no turn with an end (connection failures only): nothing to measure
    assert achieved([{"kind": "load", "passed": False, "t_rel": 0.0, "latency_s": None}]) is None
    assert "not measured" in line(None)


def test_one_turn():
    c = achieved([turn(0.0, 2.0, pre=0.5, post=0.5)])
    assert c["agent"]["mean"] == 0.5 and c["agent"]["peak"] == 1 and c["agent"]["turn_s"] == 1.0
    assert c["in_flight"] == {"mean": 1.0, "peak": 1}
    assert c["ratio"] == 0.5
    # one turn in flight is nothing to serialise, however low the ratio
    assert not serialised(c)


def test_serial_agent_is_the_finding_and_a_parallel_one_is_not():
    s = achieved(serial())
    assert s["agent"]["mean"] == pytest.approx(1.0) and s["agent"]["peak"] == 1
    assert s["in_flight"]["mean"] == pytest.approx(2.5) and s["in_flight"]["peak"] == 4
    assert s["ratio"] == pytest.approx(0.4) and serialised(s)
    assert line(s) == "concurrency achieved: 1.0 at the agent of 2.5 in flight (40%); peak 1 of 4"
    p = achieved(parallel())
    assert p["agent"]["peak"] == 4 and p["ratio"] == pytest.approx(0.9) and not serialised(p)


def test_an_agent_mostly_outside_its_llm_calls_that_overlaps_is_not_serialised():
    # pydantic-ai on AG-UI, --conns 4: every turn overlaps its peers, but half of each is before and after the LLM
    c = achieved([turn(0.0, 1.0, pre=0.25, post=0.25) for _ in range(4)])
    assert c["ratio"] == pytest.approx(0.5) and c["agent"]["peak"] == 4
    assert not serialised(c)
    # a few workers under many connections: peak 2 of 8 is a queue too
    two = achieved([turn(0.0, (i // 2 + 1) * 1.0, pre=(i // 2) * 1.0) for i in range(8)])
    assert two["agent"]["peak"] == 2 and two["in_flight"]["peak"] == 8 and serialised(two)


def test_turns_the_mock_did_not_see_are_named():
    c = achieved(serial() + [turn(0.0, 1.0, pre=None)])
    assert c["seen"] == 4 and c["turns"] == 5
    assert "4 of 5 turns seen by the mock" in line(c)


def test_concurrency_ratio_threshold():
    t = parse_threshold("concurrency_ratio>=0.8")
    assert t.metric == "concurrency_ratio" and t.bound == 0.8 and not t.latency
    assert parse_threshold("concurrency_ratio>=80%").bound == 0.8
    bad, good = evaluate([t], serial())[0], evaluate([t], parallel())[0]
    assert not bad.passed and bad.value == pytest.approx(0.4) and "at the agent" in bad.detail
    assert good.passed
    # nothing measured at the agent: the service level did not hold
    none = evaluate([t], [turn(0, 1, pre=None)])[0]
    assert not none.passed and none.value is None and "anatomy" in none.detail
    for expr, why in (("concurrency_ratio>=2", "outside 0..1"), ("concurrency_ratio>=0.8s", "a fraction")):
        with pytest.raises(UsageError, match=why):
            parse_thresholds([expr])


def test_stress_summary_and_report():
    rows = serial()
    s = summarize_stress(rows, {}, {"conns": 4})
    c = s["concurrency"]
    assert c["finding"] == FINDING and c["ratio"] == pytest.approx(0.4)
    doc = {"scenario": "stress", "settings": {"conns": 4}, "summary": s, "checks": []}
    text = render_stress(doc, s)
    assert "Concurrency achieved: 1.0 at the agent of 2.5 in flight (40%); peak 1 of 4." in text
    assert f"**Finding:** {FINDING}" in text
    ok = summarize_stress(parallel(), {}, {"conns": 4})
    assert ok["concurrency"]["finding"] is None
    assert "Finding" not in render_stress({**doc, "summary": ok}, ok)
    # warm-up turns are out of it, as out of every statistic
    warm = summarize_stress(parallel() + [dict(r, warmup=True, t_rel=10.0) for r in serial()], {}, {"conns": 4})
    assert warm["concurrency"]["turns"] == 4 and warm["concurrency"]["finding"] is None


def test_stress_splits_by_kernel():
    rows = [dict(r, kernel="a") for r in serial()] + [dict(r, kernel="b") for r in parallel()]
    extras = {"kernels": [{"name": "a"}, {"name": "b"}]}
    s = summarize_stress(rows, extras, {"conns": 8})
    by = {k["name"]: k["concurrency"] for k in s["kernels"]}
    assert by["a"]["finding"] == FINDING and by["b"]["finding"] is None
    text = render_stress({"scenario": "stress", "settings": {"conns": 8}, "summary": s, "checks": []}, s)
    assert "- a: concurrency achieved: 1.0 at the agent of 2.5 in flight (40%)" in text
    assert "**Finding (a):**" in text and "**Finding (b):**" not in text


def test_findmax_stages_carry_the_concurrency():
    slos = parse_thresholds(["pass_rate>=0.99"], "--slo")
    st = judge_stage(serial(), 2, 4, slos)
    assert st["concurrency"]["finding"] == FINDING and st["concurrency"]["agent"]["peak"] == 1
    rows = [dict(r, stage=1, level=1) for r in [turn(0.0, 1.0)]] + [dict(r, stage=2, level=4, t_rel=r["t_rel"] + 5) for r in serial()]
    settings = {"slos": ["pass_rate>=0.99"], "start": 1, "factor": 4, "max_level": 4, "stage_duration_s": 1.0, "mix": "!batch2"}
    s = summarize_findmax(rows, settings, {})
    mc = s["concurrency"]
    assert mc["finding"] == FINDING and mc["stages_flagged"] == [2] and mc["agent"]["peak"] == 1
    text = render_findmax({"scenario": "findmax", "settings": settings, "summary": s, "checks": []}, s)
    assert "Concurrency achieved: at most 1.0 turns at the agent at once" in text and f"**Finding: {FINDING}** at stage 2" in text
    assert "caps throughput near 1.0/s" in text
    assert "| 1.0 / 2.5 **serialised** |" in text
    # no mock: the column says so, no line
    plain = summarize_findmax([dict(r, stage=1, level=1) for r in [turn(0.0, 1.0, pre=None)]], settings, {})
    assert plain["concurrency"] is None
    assert "Concurrency achieved" not in render_findmax({"scenario": "findmax", "settings": settings, "summary": plain, "checks": []}, plain)


@pytest.mark.slow
async def test_open_model_against_one_worker(kernel_factory, out_dir):
    """The open model's in-flight count is the arrivals being served: 8 inputs/s
    into a kernel that serves ~4/s one at a time queue up in flight, not at it."""
    async with kernel_factory("--workers", "1") as k:
        s = StressSettings(conns=4, inputs=3, rate=8.0, mix="!slowbatch2:1", dedup_probe=False, out=out_dir, quiet=True)
        r = await run_stress(s, k.access())
    assert r.exit_code == 0, r.report
    c = r.summary["concurrency"]
    assert c["agent"]["peak"] == 1 and c["in_flight"]["peak"] >= 3 and c["finding"] == FINDING, c
    assert "Concurrency achieved: " in r.report
