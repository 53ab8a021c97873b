"""--llm-retries, --honour-retry-after, --llm-backoff (issue 24 item 4): what
the kernel sends the LLM when a request fails, seen in the arrival times the
scripted fake records (rkfake: ``flaky=N``), and the four faults the
resilience grades must catch, each shown on the wire against the fake or the
real mock. Time is asserted only as a lower bound (a wait the kernel must
have made) or against a wait far longer than the test (a header ignored):
never a tight upper bound, the machine is loaded."""

from __future__ import annotations

import pytest

from refkernel.llm import _Resend, retry_after_seconds
from rkfake import text
from rkclient import text_for
from rkhelpers import mock_requests, run_kernel_cli

APIS = ("chat", "responses", "anthropic")


def gaps(llm, nonce: str) -> list[float]:
    at = [r.at for r in llm.recorded_for(nonce)]
    return [b - a for a, b in zip(at, at[1:])]


# --- the default: one attempt, as always -----------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_default_is_one_attempt(llm, rk, api):
    k = await rk("--llm-api", api, llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, after_ms="10")
    turn = await conn.turn(t)
    assert turn.kind == "error" and turn.error_code == "llm_error" and "HTTP 429" in turn.terminal["message"], turn.frames
    assert "attempt" not in turn.terminal["message"]  # the message is what it always was
    assert len(llm.recorded_for(n)) == 1


# --- retries that succeed ------------------------------------------------------------------


@pytest.mark.parametrize("api", APIS)
async def test_retry_after_is_honoured(llm, rk, api):
    k = await rk("--llm-api", api, "--llm-retries", "2", "--honour-retry-after", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=2, after_ms="300")
    turn = await conn.turn(t)
    assert turn.kind == "response" and turn.text.startswith(f"answer {n}"), turn.frames
    assert len(llm.recorded_for(n)) == 3
    assert all(g >= 0.3 for g in gaps(llm, n)), gaps(llm, n)


async def test_retry_after_in_seconds(llm, rk):
    k = await rk("--llm-retries", "1", "--honour-retry-after", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, after="0.4", status=503)
    assert (await conn.turn(t)).kind == "response"
    [g] = gaps(llm, n)
    assert g >= 0.4


@pytest.mark.parametrize("backoff, least", [("constant", [0.25, 0.25]), ("exponential", [0.25 * 0.75, 0.5 * 0.75])])
async def test_backoff_without_retry_after(llm, rk, backoff, least):
    # the header says 30 s; not honoured, so the backoff decides (and the turn ends well before 30 s)
    k = await rk("--llm-retries", "2", "--llm-backoff", backoff, "--llm-backoff-ms", "250", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=2, status=500, after="30")
    turn = await conn.turn(t, timeout=20)
    assert turn.kind == "response", turn.frames
    assert all(g >= want for g, want in zip(gaps(llm, n), least, strict=True)), gaps(llm, n)


@pytest.mark.parametrize("status, retried", [(408, True), (500, True), (529, True), (400, False), (404, False), (409, False)])
async def test_which_statuses_are_retried(llm, rk, status, retried):
    k = await rk("--llm-retries", "1", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, status=status)
    turn = await conn.turn(t)
    assert turn.kind == ("response" if retried else "error"), turn.frames
    assert len(llm.recorded_for(n)) == (2 if retried else 1)


async def test_retry_after_beyond_the_cap_ends_the_retries(llm, rk):
    k = await rk("--llm-retries", "3", "--honour-retry-after", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, after="121")
    turn = await conn.turn(t)
    assert turn.kind == "error" and "Retry-After of 121 s is over the 120 s" in turn.terminal["message"], turn.frames
    assert len(llm.recorded_for(n)) == 1


async def test_retries_run_out_with_an_error_frame(llm, rk):
    k = await rk("--llm-retries", "2", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=5, status=500)
    turn = await conn.turn(t)
    assert turn.kind == "error" and "(attempt 3 of 3)" in turn.terminal["message"], turn.frames
    assert len(llm.recorded_for(n)) == 3


@pytest.mark.parametrize("api", APIS)
async def test_a_stalled_stream_is_retried_and_its_text_not_repeated(llm, rk, api):
    k = await rk("--llm-api", api, "--llm-timeout", "0.5", "--llm-retries", "1", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, stall=3000)
    turn = await conn.turn(t, timeout=20)
    assert turn.kind == "response", turn.frames
    assert len(llm.recorded_for(n)) == 2 and gaps(llm, n)[0] >= 0.5
    assert turn.deltas == turn.text == f"answer {n} after 0 steps"  # the stalled attempt's first piece is not sent twice


@pytest.mark.parametrize("api", APIS)
async def test_a_stalled_stream_without_retries_is_llm_timeout(llm, rk, api):
    k = await rk("--llm-api", api, "--llm-timeout", "0.5", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(flaky=1, stall=3000)
    turn = await conn.turn(t, timeout=20)
    assert turn.kind == "error" and turn.error_code == "llm_timeout", turn.frames
    assert len(llm.recorded_for(n)) == 1


@pytest.mark.parametrize("api", APIS)
async def test_a_truncated_stream_is_an_error_and_retried(llm, rk, api):
    k0 = await rk("--llm-api", api, llm_url=llm.url + "/v1")
    t, n = text(flaky=1, truncate=True)
    turn = await (await k0.connect()).turn(t)
    assert turn.kind == "error" and "ended before" in turn.terminal["message"], turn.frames
    k = await rk("--llm-api", api, "--llm-retries", "1", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    t, n = text(flaky=1, truncate=True)
    turn = await (await k.connect()).turn(t)
    assert turn.kind == "response" and len(llm.recorded_for(n)) == 2, turn.frames


async def test_a_retried_step_does_not_run_its_tools_again(llm, rk):
    # step 1's request fails once: it is sent again with the very same tool results (the tools ran once)
    k = await rk("--llm-retries", "1", "--llm-backoff", "none", llm_url=llm.url + "/v1")
    conn = await k.connect()
    t, n = text(loop=1, calls=2, writer=True, flaky=1, fstep=1, status=500)
    turn = await conn.turn(t)
    assert turn.kind == "response", turn.frames
    reqs = llm.recorded_for(n)
    assert len(reqs) == 3 and reqs[1].body == reqs[2].body
    s = await conn.stats()
    assert s["executed"] == 1 and s["failed"] == 0


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("marker, attempts", [("!err:disconnect", 3), ("!err:503", 3), ("!err:midstream", 1), ("!err:malformed", 1)])
async def test_the_mock_faults_retried_and_not(rk, api, marker, attempts):
    # a lost connection and an overload are retried; an error event inside a 200 stream and a malformed one are not
    k = await rk("--llm-api", api, "--llm-retries", "2", "--llm-backoff", "none")
    conn = await k.connect()
    t, n = text_for(marker)
    turn = await conn.turn(t)
    assert turn.kind == "error" and turn.error_code == "llm_error", turn.frames
    assert len(mock_requests(k, n)) == attempts
    assert ("(attempt 3 of 3)" in turn.terminal["message"]) == (attempts == 3), turn.terminal


# --- bad flags, and the pieces ------------------------------------------------------------


@pytest.mark.parametrize("flags, says", [
    (["--llm-retries", "11"], "llm_retries=11 is invalid: use 0 (no retries, the default) to 10"),
    (["--llm-retries", "-1"], "llm_retries=-1 is invalid"),
    (["--llm-backoff-ms", "60001"], "llm_backoff_ms=60001 is invalid: use 0 to 60000 milliseconds"),
    (["--llm-backoff", "linear"], "invalid choice: 'linear'"),
    (["--fault", "retry-forever"], "known faults:"),
])
async def test_bad_retry_flags_exit_2(tmp_path, flags, says):
    code, out = await run_kernel_cli(["--socket", str(tmp_path / "k.sock"), "--llm-url", "http://127.0.0.1:9/v1",
                                      "--data-dir", str(tmp_path), *flags])
    assert code == 2 and says in out, out


def test_retry_after_seconds():
    assert retry_after_seconds({"retry-after-ms": "250", "retry-after": "9"}) == 0.25  # ms first, as the SDKs
    assert retry_after_seconds({"retry-after": "1.5"}) == 1.5
    assert retry_after_seconds({"retry-after": "Sat, 05 Dec 2026 00:00:10 GMT"}, now=1796428800.0) == 10.0
    assert retry_after_seconds({"retry-after": "soon"}) is None
    assert retry_after_seconds({"retry-after": "-3"}) is None
    assert retry_after_seconds({}) is None


def test_resend_forwards_only_what_the_client_lacks():
    out: list[str] = []
    r = _Resend(out.append)
    first = r.attempt()
    first("ans")
    first("wer ")
    second = r.attempt()
    for piece in ("an", "swer 4", "2"):
        second(piece)
    assert "".join(out) == "answer 42"
    third = r.attempt()
    third("other")  # a retry that says something else: sent as it is
    assert "".join(out) == "answer 42other"
