"""--batch MODE, seen from outside: the real kernel against the real mock,
and the schedule each mode promises checked from what the tools themselves
printed (KST-S / KST-E wall-clock stamps of the timed shell sleeps) and from
the kernel's tool frames (for the writer, which prints no stamps).

Each check is also run against every other mode's recording where that mode
promises a different schedule, and must fail there: a check that cannot tell
the modes apart proves nothing."""

from __future__ import annotations

from typing import Any

import pytest

from mock import MockSettings, markers
from rkclient import Turn, text_for

MODES = ("whole-batch", "barrier", "parallel", "serial")
BATCHES = ("!mixed4", "!mixed8", "!slowbatch4", "!serialbatch3")
# Sleeps well above the few ms a kernel takes to start its tools one by one,
# so "overlap" and "one after the other" cannot be confused under load.
MOCK = MockSettings(tool_ms=200, mixed_ms=250)


def contract(plan: markers.Plan, mode: str) -> str:
    """What MODE promises for this batch: ``serial`` (one at a time, in
    declared order), ``all`` (every call at once) or ``barrier``."""
    has_writer = any(not c.parallel_safe for c in plan.calls)
    if mode == "serial" or (mode == "whole-batch" and has_writer):
        return "serial"
    if mode == "parallel" or not has_writer:
        return "all"
    return "barrier"


def _index(call_id: str) -> int:
    return int(call_id.rsplit("_", 1)[1])  # the mock's ids are call_<nonce>_<i>


def _open_at_start(frames: list[dict[str, Any]]) -> dict[int, set[int]]:
    """For each call, the calls running (per the kernel's tool frames) when it started."""
    running: set[int] = set()
    seen: dict[int, set[int]] = {}
    for f in frames:
        i = _index(f["call_id"])
        if f["phase"] == "start":
            seen[i] = set(running)
            running.add(i)
        else:
            running.discard(i)
    return seen


def check(plan: markers.Plan, mode: str, turn: Turn) -> None:
    """The observed schedule of ``turn`` is the one MODE promises."""
    stamps = markers.parse_timestamps(turn.text, plan.nonce)
    timed = [c.index for c in plan.timed_calls]
    assert sorted(stamps) == timed and all(s and e for s, e in stamps.values()), stamps
    span = {i: stamps[i] for i in timed}

    def all_at_once(ids: list[int]) -> None:
        # one instant at which every one of them was running
        assert markers.peak_overlap(span[i] for i in ids) == len(ids), (ids, span)

    writers = [c.index for c in plan.calls if not c.parallel_safe]
    open_at = _open_at_start(turn.tools)
    kind = contract(plan, mode)
    if kind == "serial":
        ordered = sorted(timed, key=lambda i: span[i][0])
        assert ordered == timed, ("not in declared order", span)
        for a, b in zip(timed, timed[1:]):
            assert span[a][1] <= span[b][0], (f"call {b} started before call {a} ended", span)
        assert all(not running for running in open_at.values()), ("a call started while another ran", open_at)
    elif kind == "all":
        all_at_once(timed)
        for w in writers:  # it ran alongside the sleeps started before it
            assert open_at[w], (f"writer {w} ran alone", open_at)
    else:
        (w,) = writers  # these batches hold one writer
        before = [i for i in timed if i < w]
        after = [i for i in timed if i > w]
        if before and after:
            assert max(span[i][1] for i in before) <= min(span[i][0] for i in after), ("the barrier leaked", span)
        for side in (before, after):
            if side:
                all_at_once(side)
        assert not open_at[w], (f"writer {w} started while {open_at[w]} ran", open_at)
        assert all(w not in open_at[i] for i in after), ("a call after the writer started while it ran", open_at)


async def _run_batches(k, batches=BATCHES) -> list[tuple[markers.Plan, Turn]]:
    conn = await k.connect()
    out = []
    for marker in batches:
        text, _ = text_for(marker)
        turn = await conn.turn(text, timeout=60)
        plan = markers.build_plan(text, tool_ms=MOCK.tool_ms, mixed_ms=MOCK.mixed_ms)
        assert turn.verdict is not None and turn.verdict.all_ok, (marker, turn.text[:300])  # declared order, always
        out.append((plan, turn))
    return out


@pytest.mark.parametrize("mode", MODES)
async def test_each_mode_keeps_its_schedule(rk, mode):
    k = await rk("--batch", mode, mock_settings=MOCK)
    assert (await k.stats())["batch"] == mode
    for plan, turn in await _run_batches(k):
        check(plan, mode, turn)
        for other in MODES:
            if contract(plan, other) != contract(plan, mode):
                with pytest.raises(AssertionError):
                    check(plan, other, turn)


@pytest.mark.parametrize("mode, batch, peak", [("parallel", "!slowbatch4", 2), ("parallel", "!mixed4", 2), ("barrier", "!mixed8", 2)])
async def test_max_parallel_tools_bounds_every_mode(rk, mode, batch, peak):
    k = await rk("--batch", mode, "--max-parallel-tools", "2", mock_settings=MOCK)
    ((plan, turn),) = await _run_batches(k, [batch])
    assert turn.overlap(plan.nonce) == peak
    running = max(len(s) for s in _open_at_start(turn.tools).values()) + 1
    assert running == peak  # the writer counts against the limit too


@pytest.mark.parametrize(
    "mode, fault, batch, acts_as",
    [
        ("barrier", "serial-tools", "!mixed4", "serial"),
        ("parallel", "serial-tools", "!slowbatch4", "serial"),
        ("serial", "always-parallel", "!serialbatch3", "parallel"),
        ("barrier", "always-parallel", "!mixed8", "parallel"),
    ],
)
async def test_scheduling_faults_replace_the_mode(rk, mode, fault, batch, acts_as):
    k = await rk("--batch", mode, "--fault", fault, mock_settings=MOCK)
    ((plan, turn),) = await _run_batches(k, [batch])
    check(plan, acts_as, turn)
    with pytest.raises(AssertionError):
        check(plan, mode, turn)


async def test_result_faults_break_every_mode(rk):
    # completion-order under barrier: the three sleeps of !serialbatch3 run at
    # once and end in reverse, so the results come back reversed
    k = await rk("--batch", "barrier", "--fault", "completion-order", mock_settings=MOCK)
    turn = await (await k.connect()).turn(text_for("!serialbatch3")[0])
    assert (turn.verdict.got, turn.verdict.order) == (4, False), turn.verdict
    k = await rk("--batch", "serial", "--fault", "drop-last-result", mock_settings=MOCK)
    turn = await (await k.connect()).turn(text_for("!slowbatch4")[0])
    assert (turn.verdict.expected, turn.verdict.got) == (4, 3), turn.verdict
    k = await rk("--batch", "parallel", "--fault", "first-tool-only", mock_settings=MOCK)
    turn = await (await k.connect()).turn(text_for("!mixed4")[0])
    assert (turn.verdict.expected, turn.verdict.got, turn.verdict.order) == (4, 1, True), turn.verdict
