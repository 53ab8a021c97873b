"""Every marker through the real kernel gives a terminal response whose
verdict line is all ok, on every API the kernel speaks (--llm-api), streamed
or not (--no-stream); concurrency is observed from the echoed timestamps;
every wire quirk of each API is either parsed or ends the turn with an LLM
error frame."""

from __future__ import annotations

import pytest

from mock import markers
from rkclient import text_for
from rkhelpers import mock_requests

TOOL_MS = 200
APIS = ["chat", "responses", "anthropic"]
MARKERS = [None, "!batch1", "!batch4", "!batch16", "!mixed3", "!mixed4", "!slowbatch4", "!serialbatch2", "!serialbatch4", "!img",
           "!ocr", "!resident", "!notify"]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("marker", MARKERS)
async def test_marker_verdict_all_ok(rk, marker, api):
    k = await rk("--llm-api", api, tool_ms=TOOL_MS)
    conn = await k.connect()
    text, n = text_for(marker)
    turn = await conn.turn(text)
    assert turn.kind == "response", turn.frames[-3:]
    assert {d for d, _ in mock_requests(k, n)} == {api}
    if marker is None:
        assert markers.parse_text_verdict(turn.text) == n, turn.text
        assert turn.deltas == turn.text  # streamed in pieces, whole at the end
        assert len([f for f in turn.frames if f["type"] == "delta"]) > 1
        return
    plan = markers.build_plan(text, tool_ms=TOOL_MS)
    v = turn.verdict
    assert v is not None, turn.text
    assert v.all_ok, v.format()
    assert (v.nonce, v.expected, v.errors) == (n, len(plan.calls), plan.expected_errors), v.format()
    # one start and one end progress frame per call, each end reporting the tool's outcome
    ends = {f["call_id"]: f["ok"] for f in turn.tools if f["phase"] == "end"}
    assert ends == {markers.wire_id(c.id, api): not c.expect_error for c in plan.calls}


@pytest.mark.parametrize("api", APIS)
async def test_whole_replies_with_no_stream(rk, api):
    """--no-stream asks for whole replies: every marker still all ok, the
    text arrives as one delta, and the LLM faults are error frames."""
    k = await rk("--llm-api", api, "--no-stream", tool_ms=TOOL_MS)
    conn = await k.connect()
    wrong = {}
    for marker in MARKERS:
        text, n = text_for(marker)
        turn = await conn.turn(text)
        if mock_requests(k, n) and {s for _, s in mock_requests(k, n)} != {False}:
            wrong[marker] = f"streamed: {mock_requests(k, n)}"
        elif marker is None:
            deltas = [f["text"] for f in turn.frames if f["type"] == "delta"]
            if markers.parse_text_verdict(turn.text) != n or deltas != [turn.text]:
                wrong[marker] = turn.frames[-2:]
        else:
            plan = markers.build_plan(text, tool_ms=TOOL_MS)
            v = turn.verdict
            if v is None or not v.all_ok or v.errors != plan.expected_errors:
                wrong[marker] = v.format() if v else turn.frames[-1]
    for kind in ("500", "429", "503", "midstream", "disconnect", "malformed"):
        turn = await conn.turn(text_for(f"!err:{kind}")[0])
        if turn.error_code != "llm_error":
            wrong[f"!err:{kind}"] = turn.frames[-1]
    assert wrong == {}
    assert k.proc.returncode is None


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


# The quirks a kernel cannot parse into the calls the model made: the turn
# must end with an llm_error frame naming why, never run guessed calls.
# midstream_error is a failure by design; drop_json_delta loses every call's
# input (the API always sends at least one input_json_delta); no_completed is
# a stream cut before its end (the OpenAI Agents SDK fails it too).
REPORTED = {
    "midstream_error": "upstream provider error",
    "drop_json_delta": "with no input_json_delta and an empty input",
    "no_completed": "ended before response.completed",
}


@pytest.mark.parametrize("api", APIS)
async def test_every_wire_quirk_is_parsed_or_reported(rk, api):
    """The LLM client accumulates tool calls the way robust clients do: every
    quirk of the mock's catalogue for this API yields the planned calls, or
    (REPORTED) an llm_error frame; a quirk of another API is not applied by
    the mock and must give a correct turn too."""
    k = await rk("--llm-api", api)
    conn = await k.connect()
    wrong = {}
    for quirk in markers.QUIRKS:
        text, n = text_for(f"!quirk:{quirk}")
        turn = await conn.turn(text)
        applied = k.mock.state.store.query([n])[n]["quirk_applied"]
        if applied != (quirk in markers.quirks_for(api)):
            wrong[quirk] = f"quirk_applied {applied}"
        elif applied and quirk in REPORTED:
            if turn.error_code != "llm_error" or REPORTED[quirk] not in turn.terminal["message"]:
                wrong[quirk] = turn.frames[-1]
        elif turn.verdict is None or not turn.verdict.all_ok:
            wrong[quirk] = turn.verdict.format() if turn.verdict else turn.frames[-1]
    assert wrong == {}
    assert k.proc.returncode is None
