"""Every marker through the real kernel gives a terminal response whose
verdict line is all ok; concurrency is observed from the echoed timestamps."""

from __future__ import annotations

import pytest

from mock import markers
from rkclient import text_for

TOOL_MS = 200


@pytest.mark.parametrize(
    "marker",
    [None, "!batch1", "!batch4", "!batch16", "!mixed4", "!slowbatch4", "!serialbatch4", "!img", "!ocr", "!resident", "!notify"],
)
async def test_marker_verdict_all_ok(rk, marker):
    k = await rk(tool_ms=TOOL_MS)
    conn = await k.connect()
    text, n = text_for(marker)
    turn = await conn.turn(text)
    assert turn.kind == "response", turn.frames[-3:]
    if marker is None:
        assert markers.parse_text_verdict(turn.text) == n, turn.text
        assert turn.deltas == turn.text  # streamed in pieces, whole at the end
        return
    plan = markers.build_plan(text, tool_ms=TOOL_MS)
    v = turn.verdict
    assert v is not None, turn.text
    assert v.all_ok, v.format()
    assert (v.nonce, v.expected, v.errors) == (n, len(plan.calls), plan.expected_errors), v.format()
    # one start and one end progress frame per call, each end reporting the tool's outcome
    ends = {f["call_id"]: f["ok"] for f in turn.tools if f["phase"] == "end"}
    assert ends == {c.id: not c.expect_error for c in plan.calls}


async def test_img_and_ocr_are_tool_errors_and_the_kernel_stays_up(rk):
    k = await rk()
    conn = await k.connect()
    for marker in ("!img", "!ocr", "!img"):
        turn = await conn.turn(text_for(marker)[0])
        v = turn.verdict
        assert v is not None and v.all_ok and v.errors == 1, turn.text
        assert "ERROR: " in turn.text and "no model loaded" in turn.text
    again = await conn.turn(text_for(None)[0])
    assert again.kind == "response"
    assert k.proc.returncode is None


@pytest.mark.parametrize(
    "marker, overlap",
    [("!slowbatch4", 4), ("!serialbatch4", 1), ("!mixed4", 1)],
)
async def test_observed_overlap(rk, marker, overlap):
    k = await rk(tool_ms=TOOL_MS)
    conn = await k.connect()
    text, n = text_for(marker)
    turn = await conn.turn(text)
    v = turn.verdict
    assert v is not None and v.all_ok, turn.text
    assert turn.overlap(n) == overlap, turn.text
    plan = markers.build_plan(text, tool_ms=TOOL_MS)
    assert v.tool_ms is not None
    if overlap == 1:
        # serial: the tool phase takes at least the sum of the sleeps
        assert v.tool_ms >= plan.serial_ms, v.format()
    else:
        # concurrent: about one tool's time (generous bound: shared 2-core machine)
        assert plan.concurrent_ms <= v.tool_ms < plan.serial_ms, v.format()


async def test_max_parallel_tools_caps_the_overlap(rk):
    k = await rk("--max-parallel-tools", "2", tool_ms=TOOL_MS)
    conn = await k.connect()
    text, n = text_for("!slowbatch4")
    turn = await conn.turn(text)
    assert turn.verdict is not None and turn.verdict.all_ok
    assert turn.overlap(n) == 2


async def test_every_wire_quirk_is_parsed(rk):
    """The LLM client accumulates tool calls the way robust clients do: every
    quirk of the mock's catalogue yields the planned calls (midstream_error is
    a failure by design: it must end the turn with an error frame)."""
    k = await rk()
    conn = await k.connect()
    wrong = {}
    for quirk in markers.QUIRKS:
        turn = await conn.turn(text_for(f"!quirk:{quirk}")[0])
        if quirk == "midstream_error":
            if turn.error_code != "llm_error":
                wrong[quirk] = turn.frames[-1]
        elif turn.verdict is None or not turn.verdict.all_ok:
            wrong[quirk] = turn.verdict.format() if turn.verdict else turn.frames[-1]
    assert wrong == {}
