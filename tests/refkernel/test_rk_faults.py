"""Each --fault produces its bug, visibly, on the real kernel: the test shows
the symptom a harness check must catch (the wrong verdict field, the orphan,
the missing error frame, the duplicate executed twice, the overlap) -- on
every API the kernel can speak (--llm-api), with the same symptom on each."""

from __future__ import annotations

import asyncio
import signal

import psutil
import pytest

from rkhelpers import mock_requests, procs_in
from mock import markers
from refkernel import FAULTS
from rkclient import text_for
from rkfake import Script, check_loop, exchange, history_failures, interleaved_sessions, text, turn_part

TOOL_MS = 200


@pytest.fixture(params=["chat", "responses", "anthropic"])
def api(request) -> str:
    return request.param


async def _verdict(rk, api: str, fault: str | None, marker: str, tool_ms: int = TOOL_MS):
    k = await rk("--llm-api", api, *(["--fault", fault] if fault else []), tool_ms=tool_ms)
    conn = await k.connect()
    text, n = text_for(marker)
    turn = await conn.turn(text)
    assert turn.kind == "response", turn.frames[-1]
    v = turn.verdict
    assert v is not None, turn.text
    assert {d for d, _ in mock_requests(k, n)} == {api}
    return turn, v, n


def test_every_fault_has_a_test_here():
    import pathlib

    src = pathlib.Path(__file__).read_text()
    missing = [f for f in FAULTS if f"test_fault_{f.replace('-', '_')}" not in src]
    assert missing == []


async def test_fault_ignore_stream_index(rk, api):
    turn, v, _ = await _verdict(rk, api, "ignore-stream-index", "!batch4")
    # one call carrying all four argument strings glued together
    assert (v.expected, v.got, v.args) == (4, 1, False), v.format()
    assert "not valid JSON" in turn.text


async def test_fault_first_tool_only(rk, api):
    _, v, _ = await _verdict(rk, api, "first-tool-only", "!batch4")
    assert (v.expected, v.got, v.ids, v.args, v.order) == (4, 1, True, True, True), v.format()


@pytest.mark.serial  # the tools' completion order, by their real durations
async def test_fault_completion_order(rk, api):
    # Durations decrease with the index (steps well above process-spawn
    # skew), so the results come back out of declared order.
    turn, v, n = await _verdict(rk, api, "completion-order", "!slowbatch4")
    assert (v.got, v.order) == (4, False), v.format()
    echoed = [line.split("_")[-1] for line in turn.text.splitlines() if line.startswith("--- ")]
    assert sorted(echoed) == ["0", "1", "2", "3"] and echoed != ["0", "1", "2", "3"], echoed


@pytest.mark.serial  # the tools' real timestamps
async def test_fault_serial_tools(rk, api):
    turn, v, n = await _verdict(rk, api, "serial-tools", "!slowbatch4")
    assert v.all_ok  # the verdict alone cannot see it ...
    assert turn.overlap(n) == 1  # ... the timestamps can: nothing ran at once
    plan = markers.build_plan(turn.text_sent, tool_ms=TOOL_MS)
    assert v.tool_ms is not None and v.tool_ms >= plan.serial_ms


@pytest.mark.serial  # the tools' real overlap
async def test_fault_always_parallel(rk, api):
    turn, v, n = await _verdict(rk, api, "always-parallel", "!mixed4", tool_ms=TOOL_MS)
    assert v.all_ok
    # the knowledge_create in the middle did not force the batch serial
    assert turn.overlap(n) > 1


async def test_fault_drop_last_result(rk, api):
    _, v, _ = await _verdict(rk, api, "drop-last-result", "!batch4")
    assert (v.expected, v.got) == (4, 3), v.format()


async def test_fault_swallow_tool_errors(rk, api):
    turn, v, _ = await _verdict(rk, api, "swallow-tool-errors", "!img")
    plan = markers.build_plan(turn.text_sent)
    assert plan.expected_errors == 1
    assert v.errors == 0, v.format()  # the expected failure was reported as a success
    assert [f["ok"] for f in turn.tools if f["phase"] == "end"] == [True]
    assert "no model loaded" in turn.text


async def test_fault_no_dedup(rk, api):
    k = await rk("--llm-api", api, "--fault", "no-dedup")
    conn = await k.connect()
    text, _ = text_for("!batch2")
    first, second = await conn.turn(text), await conn.turn(text)
    for t in (first, second):  # the replayed input ran again, tools and all
        assert t.terminal.get("duplicate") is None and t.verdict is not None and t.verdict.got == 2
    s = await conn.stats()
    assert (s["executed"], s["duplicates"], s["tool_calls"]) == (2, 0, 4)


async def test_fault_leak_children(rk, api):
    k = await rk("--llm-api", api, "--fault", "leak-children")
    k.allow_strays = True  # the orphan is the point; it is killed below either way
    conn = await k.connect()
    turn = await conn.turn(text_for("!resident")[0])
    assert turn.verdict is not None and turn.verdict.all_ok
    pid = (await conn.stats())["residents"][0]["pid"]
    k.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(k.proc.wait(), 15) == 0  # a clean-looking exit ...
    try:
        orphan = psutil.Process(pid)
        assert orphan.is_running() and orphan.status() != psutil.STATUS_ZOMBIE  # ... with an orphan behind
        assert orphan.ppid() != k.pid
        assert orphan in procs_in(k.data_dir)
    finally:
        for p in procs_in(k.data_dir):
            p.kill()


async def test_fault_hide_error_frames(rk, api):
    k = await rk("--llm-api", api, "--fault", "hide-error-frames")
    conn = await k.connect()
    for kind in ("500", "midstream"):
        turn = await conn.turn(text_for(f"!err:{kind}")[0])
        # no error frame: an empty answer, without a verdict line
        assert [f["type"] for f in turn.frames if f["type"] == "error"] == []
        assert turn.kind == "response" and turn.text == "" and turn.verdict is None
    s = await conn.stats()
    assert s["failed"] == 2


# The session and loop faults are seen in what the LLM is sent: the scripted
# fake (rkfake.py) records it. Each test runs the same scenario on a kernel
# without the fault, where the same check must pass.


async def _with_and_without(rk, llm, api: str, fault: str, scenario):
    clean = await scenario(await rk("--llm-api", api, llm_url=llm.url + "/v1"))
    faulty = await scenario(await rk("--llm-api", api, "--fault", fault, llm_url=llm.url + "/v1"))
    return clean, faulty


async def test_fault_session_crosstalk(llm, rk, api):
    clean, faulty = await _with_and_without(rk, llm, api, "session-crosstalk", interleaved_sessions)
    assert history_failures(llm, clean) == {}
    failed = history_failures(llm, faulty)
    # keyed by connection: B's first turn carries A's, and A resumed on the
    # second connection carries nothing of its own past
    assert sorted(failed) == ["A2", "A3", "B1", "B2", "B3"], failed
    assert "carries ['" + faulty["A1"][0].rsplit("#", 1)[1] + "'], expected []" in failed["B1"]
    assert "carries [], expected" in failed["A3"]


async def test_fault_drop_history(llm, rk, api):
    clean, faulty = await _with_and_without(rk, llm, api, "drop-history", interleaved_sessions)
    assert history_failures(llm, clean) == {}
    failed = history_failures(llm, faulty)
    assert sorted(failed) == ["A3", "B3"], failed  # the third turn of each carries only the second
    a2 = faulty["A2"][0].rsplit("#", 1)[1]
    assert f"carries ['{a2}'], expected" in failed["A3"]


async def test_fault_drop_answers(llm, rk, api):
    clean, faulty = await _with_and_without(rk, llm, api, "drop-answers", interleaved_sessions)
    assert history_failures(llm, clean) == {}
    failed = history_failures(llm, faulty)
    assert sorted(failed) == ["A2", "A3", "B2", "B3"], failed  # every turn with a history
    # every input and tool step is there, in order; only the final answers are not
    t, earlier = faulty["A3"]
    want = [m for e in earlier for m in exchange(llm, e) if not (m["role"] == "assistant" and "tool_calls" not in m)]
    req = llm.requests_for(Script.parse(t).nonce)[0]
    assert req[1:len(req) - len(turn_part(req))] == want


async def _loop(k):
    t, _ = text(loop=5, calls=2)
    turn = await (await k.connect()).turn(t)
    assert turn.kind == "response", turn.frames[-1]
    return t


async def test_fault_loop_drop_results(llm, rk, api):
    clean, faulty = await _with_and_without(rk, llm, api, "loop-drop-results", _loop)
    check_loop(llm, clean)
    # steps 0 and 1 go back right; the request for step 2 has only step 1's exchange
    with pytest.raises(AssertionError, match="request 2: step 0's assistant message is .*_1_0"):
        check_loop(llm, faulty)


async def test_fault_loop_reuse_ids(llm, rk, api):
    clean, faulty = await _with_and_without(rk, llm, api, "loop-reuse-ids", _loop)
    check_loop(llm, clean)
    with pytest.raises(AssertionError, match="request 1: step 0's assistant message is .*'call_0'"):
        check_loop(llm, faulty)
    last = llm.requests_for(faulty.rsplit("#", 1)[1])[-1]
    ids = [c["id"] for m in last if m["role"] == "assistant" for c in m["tool_calls"]]
    assert ids == ["call_0", "call_1"] * 5  # colliding across steps
    assert [m["tool_call_id"] for m in last if m["role"] == "tool"] == ids


@pytest.mark.parametrize("marker", ["!batch4", "!slowbatch4", "!mixed4", "!img"])
async def test_without_faults_the_same_inputs_pass(rk, api, marker):
    """The control: what the faults break is fine on a healthy kernel."""
    turn, v, n = await _verdict(rk, api, None, marker)
    plan = markers.build_plan(turn.text_sent, tool_ms=TOOL_MS)
    assert v.all_ok and v.errors == plan.expected_errors, v.format()
    if plan.timed_calls:
        assert turn.overlap(n) == (1 if plan.serial_required else len(plan.calls))


async def test_turn_loop_is_bounded(rk, api):
    # drop-last-result on a one-call batch sends no result at all: the model
    # asks again and again; the turn ends after --max-steps with an error frame
    k = await rk("--llm-api", api, "--fault", "drop-last-result", "--max-steps", "3")
    conn = await k.connect()
    turn = await conn.turn(text_for("!batch1")[0])
    assert turn.error_code == "max_steps", turn.frames[-1]
    assert "--max-steps" in turn.terminal["message"]
    assert k.mock.state.counters["requests"] == 3


# --- the LLM retry faults (issue 24 item 4); the retries themselves: test_rk_retries.py ---


def _gaps(llm, nonce: str) -> list[float]:
    at = [r.at for r in llm.recorded_for(nonce)]
    return [b - a for a, b in zip(at, at[1:])]


async def test_fault_ignore_retry_after(llm, rk):
    # the header asks for 30 s: an honouring kernel would wait past the turn's timeout; this one retries at once
    k = await rk("--llm-retries", "2", "--honour-retry-after", "--fault", "ignore-retry-after", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=2, after="30")
    turn = await conn.turn(t, timeout=20)
    assert turn.kind == "response" and len(llm.recorded_for(n)) == 3, turn.frames
    assert all(g < 30 for g in _gaps(llm, n))


async def test_without_the_fault_the_same_header_is_waited_for(llm, rk):
    # the counterpart of the test above: the honouring kernel has not retried when the fault's kernel is long done
    k = await rk("--llm-retries", "2", "--honour-retry-after", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=2, after="30")
    with pytest.raises(AssertionError):
        await conn.turn(t, timeout=3)
    assert len(llm.recorded_for(n)) == 1


@pytest.mark.parametrize("retries, attempts", [(0, 3), (1, 5)])
async def test_fault_retry_storm(llm, rk, retries, attempts):
    k = await rk("--llm-retries", str(retries), "--llm-backoff", "constant", "--llm-backoff-ms", "60000",
                 "--fault", "retry-storm", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=10, status=500)
    turn = await conn.turn(t, timeout=20)  # a minute's backoff per retry, had it waited
    assert turn.kind == "error" and len(llm.recorded_for(n)) == attempts, turn.frames


async def test_fault_accept_truncated_with_the_fake(llm, rk, api):
    k = await rk("--llm-api", api, "--fault", "accept-truncated", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, truncate=True)
    turn = await conn.turn(t)
    assert turn.kind == "response" and turn.text == f"answer {n} after 0 steps", turn.frames
    assert len(llm.recorded_for(n)) == 1


@pytest.mark.parametrize("fault", [None, "accept-truncated"])
async def test_fault_accept_truncated_with_the_mock(rk, api, fault):
    # the mock's !err:disconnect: a partial tool call, then the connection is closed mid-body
    k = await rk("--llm-api", api, *(("--fault", fault) if fault else ()))
    conn = await k.connect()
    t, n = text_for("!err:disconnect")
    turn = await conn.turn(t)
    if fault is None:
        assert turn.kind == "error" and turn.error_code == "llm_error", turn.frames
        assert len(mock_requests(k, n)) == 1
    else:  # the cut call was run as if whole, and the turn goes on to an answer with no verdict of a complete batch
        assert turn.kind == "response", turn.frames
        assert len(mock_requests(k, n)) >= 2


@pytest.mark.parametrize("retries", [0, 1])
async def test_fault_hide_llm_error(rk, api, retries):
    k = await rk("--llm-api", api, "--llm-retries", str(retries), "--llm-backoff", "none", "--fault", "hide-llm-error")
    conn = await k.connect()
    t, n = text_for("!err:500")
    turn = await conn.turn(t)
    assert turn.kind == "response" and turn.text and turn.verdict is None, turn.frames
    assert len(mock_requests(k, n)) == 1 + retries
    assert (await conn.stats())["failed"] == 1
