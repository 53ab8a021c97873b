"""Schedule verification by contract, on hand-made timestamps: each rule
passes the schedule it promises and names every other by the two calls."""

from __future__ import annotations

import pytest

from harness.judge.contract import Contract
from harness.judge.verdict import schedule
from mock.markers import build_plan

MS = 1_000_000


def plan(marker: str):
    return build_plan(f"{marker} #n1", tool_ms=100, mixed_ms=100)


def concurrent(idx, dur=100):
    return {i: (k * MS, (k + dur) * MS) for k, i in enumerate(idx)}


def serial(idx, dur=100):
    return {i: (k * (dur + 5) * MS, (k * (dur + 5) + dur) * MS) for k, i in enumerate(idx)}


def barrier_like(before, after, dur=100):
    """every call before the barrier at once, then every call after at once"""
    iv = {i: (k * MS, (k + dur) * MS) for k, i in enumerate(before)}
    iv.update({i: ((dur + 50 + k) * MS, (2 * dur + 50 + k) * MS) for k, i in enumerate(after)})
    return iv


MIXED4 = plan("!mixed4")  # sleeps at 0, 1, 3; the writer at 2
SLOW4 = plan("!slowbatch4:100:0")
SCHEDULES = {
    "serial": serial([0, 1, 3]),
    "concurrent": concurrent([0, 1, 3]),
    "barrier": barrier_like([0, 1], [3]),
}
# which schedule of !mixed4 each contract accepts
ACCEPTS = {"whole-batch": {"serial"}, "serial": {"serial"}, "barrier": {"barrier"}, "parallel": {"concurrent"}}


@pytest.mark.parametrize("rule", list(ACCEPTS))
@pytest.mark.parametrize("seen", list(SCHEDULES))
def test_mixed_batch_schedules_against_each_rule(rule, seen):
    fields, failures = schedule(MIXED4, SCHEDULES[seen], Contract(batch=rule))
    if seen in ACCEPTS[rule]:
        assert failures == [], failures
    else:
        assert failures, (rule, seen)
        name = failures[0].split(" ", 1)[0]
        assert name in ("overlap", "barrier", "no_overlap"), failures
        assert "calls" in failures[0] or "call" in failures[0]


def test_the_names_carry_the_two_calls_and_their_times():
    _, [f] = schedule(MIXED4, SCHEDULES["concurrent"], Contract(batch="whole-batch"))
    assert f.startswith("overlap 3>1 (calls 0 and 1 ran at once: 0 +0.0–100.0 ms, 1 +1.0–101.0 ms; contract batch=whole-batch")
    _, fs = schedule(MIXED4, SCHEDULES["serial"], Contract(batch="barrier"))
    assert fs[0].startswith("no_overlap (calls 0 and 1 never ran at once")
    _, [f] = schedule(MIXED4, {0: (0, 100 * MS), 1: (0, 100 * MS), 3: (50 * MS, 150 * MS)}, Contract(batch="barrier"))
    assert f == "barrier (call 0 ended at +100.0 ms, after call 3 started at +50.0 ms: the unsafe call 2 must separate them)"


def test_a_safe_batch_must_overlap_unless_the_contract_is_serial():
    for rule in ("whole-batch", "barrier", "parallel"):
        assert schedule(SLOW4, concurrent([0, 1, 2, 3]), Contract(batch=rule))[1] == []
        assert schedule(SLOW4, serial([0, 1, 2, 3]), Contract(batch=rule))[1][0].startswith("no_overlap")
    assert schedule(SLOW4, serial([0, 1, 2, 3]), Contract(batch="serial"))[1] == []
    assert schedule(SLOW4, concurrent([0, 1, 2, 3]), Contract(batch="serial"))[1][0].startswith("overlap 4>1")


def test_effective_concurrency_and_stagger_are_measured():
    fields, _ = schedule(SLOW4, concurrent([0, 1, 2, 3]), Contract())
    assert fields["overlap"] == 4 and fields["stagger_ms"] == 3.0
    assert fields["tool_sum_ms"] == 400.0 and fields["concurrency"] == round(400 / 103, 3)
    fields, _ = schedule(SLOW4, serial([0, 1, 2, 3]), Contract(batch="serial"))
    assert fields["overlap"] == 1 and fields["concurrency"] < 1.0


def test_missing_timestamps_measure_nothing():
    assert schedule(SLOW4, {}, Contract()) == ({"overlap": None, "tool_span_ms": None}, [])


def loop_steps(p, per_step):
    """Intervals of a loop plan, keyed by each call's stamp: ``per_step(step)``
    gives the step's schedule (concurrent or serial) over its call indices,
    each step 1 s after the one before."""
    iv = {}
    for step in range(1, p.steps + 1):
        calls = p.step_calls(step)
        sched = per_step(step)([c.index for c in calls], max(c.sleep_ms for c in calls))
        for c in calls:
            a, b = sched[c.index]
            iv[c.stamp] = (a + step * 1000 * MS, b + step * 1000 * MS)
    return iv


def test_a_short_loop_step_that_missed_its_overlap_is_not_a_failure_alone():
    # 20 ms tools: a loaded kernel's start stagger can exceed the tool, so one
    # step that did not overlap proves nothing while the others did
    p = build_plan("!loop5:2 #n1")
    one_missed = loop_steps(p, lambda s: serial if s == 3 else concurrent)
    assert schedule(p, one_missed, Contract(batch="parallel"))[1] == []
    # a serial kernel overlaps in no step: caught, naming the first
    _, [f] = schedule(p, loop_steps(p, lambda s: serial), Contract(batch="parallel"))
    assert f.startswith("no_overlap (step 1: calls 0 and 1 never ran at once") and f.endswith("; no step of 5 overlapped)"), f


def test_long_loop_steps_must_each_overlap_and_short_ones_still_may_not_run_at_once():
    p = build_plan("!loop5:2:200 #n1")
    _, [f] = schedule(p, loop_steps(p, lambda s: serial if s == 3 else concurrent), Contract(batch="parallel"))
    assert f.startswith("no_overlap (step 3: calls 0 and 1"), f
    # the leniency is for missing overlap only: a serial contract's overlap stays a failure per step
    short = build_plan("!loop5:2 #n1")
    _, [f] = schedule(short, loop_steps(short, lambda s: concurrent if s == 2 else serial), Contract(batch="serial"))
    assert f.startswith("overlap 2>1 (step 2: calls 0 and 1 ran at once"), f
