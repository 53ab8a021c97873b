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


# issue 22 item 5: a Vercel AI SDK kernel (every call of a step at once) on a
# loaded 2-core machine started the seven 50 ms sleeps of !mixed8 at these
# offsets; the last started after the first had ended.
MIXED8 = build_plan("!mixed8 #n1")  # 50 ms sleeps at 0-3 and 5-7, the writer at 4
SLEEPS8 = [0, 1, 2, 3, 5, 6, 7]
VERCEL_STARTS = [0, 24, 29, 40, 44, 53, 71]


def at(starts, idx=SLEEPS8, dur=52):
    """Each call of ``idx`` starting at its offset (ms) and running ``dur`` ms
    (a 50 ms sleep and its two `date` calls)."""
    return {i: (s * MS, (s + dur) * MS) for i, s in zip(idx, starts)}


def throttled(idx, k, gap=5, react=12, dur=52):
    """A kernel that runs at most ``k`` calls at once: the first k start
    ``gap`` ms apart, each other one ``react`` ms after a slot freed."""
    iv, t = {}, 0
    for n, i in enumerate(idx):
        if n >= k:
            t = max(t, sorted(e for _, e in iv.values())[n - k] + react * MS)
        iv[i] = (t, t + dur * MS)
        t += gap * MS
    return iv


def test_spawn_stagger_past_a_short_call_is_not_a_serial_schedule():
    iv = at(VERCEL_STARTS)
    assert iv[7][0] > iv[0][1]  # calls 0 and 7 never ran at once
    fields, failures = schedule(MIXED8, iv, Contract(batch="parallel"))
    assert failures == [], failures
    assert fields["overlap"] == 6 and fields["stagger_ms"] == 71.0
    # the same starts still break a serial contract, by the calls that overlapped
    _, [f] = schedule(MIXED8, iv, Contract(batch="whole-batch"))
    assert f.startswith("overlap 6>1 (calls 0 and 1 ran at once"), f


def sides(before, after):
    """A barrier's schedule: ``after`` (its own times) once ``before`` and the writer are done."""
    gone = max(e for _, e in before.values()) + 20 * MS
    return before | {i: (s + gone, e + gone) for i, (s, e) in after.items()}


@pytest.mark.parametrize("rule", ["parallel", "barrier"])
def test_short_calls_run_one_at_a_time_or_throttled_are_still_caught(rule):
    def run(k):
        return throttled(SLEEPS8, k) if rule == "parallel" else sides(throttled([0, 1, 2, 3], k), throttled([5, 6, 7], k))

    for iv in (serial(SLEEPS8, dur=50), run(2), run(3 if rule == "parallel" else 2)):
        _, failures = schedule(MIXED8, iv, Contract(batch=rule))
        assert failures and all(f.startswith("no_overlap (calls ") and "waited for an end" in f for f in failures), (rule, failures)
    if rule == "parallel":
        _, [f] = schedule(MIXED8, throttled(SLEEPS8, 4), Contract(batch=rule))
        assert "the start at +64.0 ms waited for an end: 49.0 ms after the start before it, over 2x the 5.0 ms" in f, f


def test_a_barrier_side_is_judged_against_its_own_stagger():
    # 0-3 at once but staggered past the first end, the writer, then 5-7 the same
    staggered = at([0, 20, 35, 60]) | at([150, 175, 203], [5, 6, 7])
    assert schedule(MIXED8, staggered, Contract(batch="barrier"))[1] == []
    # one side throttled to two: that side fails, the other passes
    one_side = throttled([0, 1, 2, 3], 2) | at([150, 155, 160], [5, 6, 7])
    _, [f] = schedule(MIXED8, one_side, Contract(batch="barrier"))
    assert f.startswith("no_overlap (calls 0 and 3 never ran at once") and "waited for an end" in f, f
    # the barrier itself stays strict: a call after the writer may not start before one before it ended
    leaked = at([0, 20, 35, 60]) | at([100, 105, 110], [5, 6, 7])
    _, [f] = schedule(MIXED8, leaked, Contract(batch="barrier"))
    assert f.startswith("barrier (call 3 ended at +112.0 ms, after call 5 started at +100.0 ms"), f


def test_long_calls_stay_strict():
    # the same stagger against 200 ms calls: the last start after the first end is a failure by itself
    long8 = build_plan("!mixed8:200 #n1")
    iv = at([0, 30, 60, 90, 120, 150, 205], dur=200)
    _, [f] = schedule(long8, iv, Contract(batch="parallel"))
    assert f == ("no_overlap (calls 0 and 7 never ran at once: 0 +0.0–200.0 ms, 7 +205.0–405.0 ms; "
                 "contract batch=parallel runs this batch concurrently)"), f
