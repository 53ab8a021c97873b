"""LLM failures end the turn with an `error` frame and the kernel stays up,
on every API (--llm-api), each failure in that API's own form mapped to the
same error code; --llm-timeout bounds the first byte and idle gaps; the HEAD
probe."""

from __future__ import annotations

import socket
import time

import pytest

from waiting import await_until
from mock import MockServer, MockSettings
from rkclient import text_for


# What the message of each fault's error frame says, per API: the status the
# API uses (Anthropic's overload is 529) and its error type where its body names one.
SAYS = {
    "chat": {"500": "HTTP 500", "429": "HTTP 429", "503": "HTTP 503", "midstream": "error mid-stream",
             "disconnect": "", "malformed": "malformed stream chunk"},
    "responses": {"500": "HTTP 500", "429": "HTTP 429", "503": "HTTP 503", "midstream": "the response failed: server_error",
                  "disconnect": "", "malformed": "malformed stream chunk"},
    "anthropic": {"500": "HTTP 500: api_error", "429": "HTTP 429: rate_limit_error", "503": "HTTP 529: overloaded_error",
                  "midstream": "error mid-stream: api_error", "disconnect": "", "malformed": "malformed stream chunk"},
}


@pytest.mark.parametrize("api", list(SAYS))
@pytest.mark.parametrize("kind", ["500", "429", "503", "midstream", "disconnect", "malformed"])
async def test_llm_fault_gives_an_error_frame_and_the_kernel_stays_up(rk, kind, api):
    k = await rk("--llm-api", api)
    conn = await k.connect()
    turn = await conn.turn(text_for(f"!err:{kind}")[0])
    assert turn.kind == "error", turn.frames
    assert turn.error_code == "llm_error" and turn.terminal["message"], turn.terminal
    assert SAYS[api][kind] in turn.terminal["message"], turn.terminal
    after = await conn.turn(text_for("!batch2")[0])
    assert after.verdict is not None and after.verdict.all_ok
    s = await conn.stats()
    assert (s["failed"], s["executed"], s["llm_state"]) == (1, 2, "ok")


@pytest.mark.parametrize("api", list(SAYS))
@pytest.mark.parametrize("marker", ["!hang:5000", "!hang"])
async def test_hang_is_cut_by_llm_timeout(rk, marker, api):
    k = await rk("--llm-api", api, "--llm-timeout", "0.5")
    conn = await k.connect()
    turn = await conn.turn(text_for(marker)[0], timeout=20)
    assert turn.kind == "error" and turn.error_code == "llm_timeout", turn.frames
    assert "--llm-timeout" in turn.terminal["message"]
    assert 0.4 < turn.seconds < 4.5  # well before the hang would have ended

    async def mock_released() -> bool:
        return k.mock.state.hanging == 0

    await await_until(mock_released, 5, "the kernel to drop the hung request")
    ok = await conn.turn(text_for(None)[0])
    assert ok.kind == "response"


@pytest.mark.parametrize("api", list(SAYS))
async def test_slow_but_steady_stream_is_not_cut(rk, api):
    # chunks 50 ms apart for over a second: no gap reaches the 0.4 s timeout
    k = await rk("--llm-api", api, "--llm-timeout", "0.4", mock_settings=MockSettings(chunk_delay_ms=50, text_chunks=20))
    conn = await k.connect()
    turn = await conn.turn(text_for(None)[0])
    assert turn.kind == "response", turn.frames[-1]
    assert turn.seconds > 2 * 0.4
    assert len([f for f in turn.frames if f["type"] == "delta"]) >= 20


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("api", list(SAYS))
async def test_llm_probe_degraded_then_ok(rk, api):
    port = _free_port()
    k = await rk("--llm-api", api, llm_url=f"http://127.0.0.1:{port}/v1")
    conn = await k.connect()
    s = await conn.stats()
    assert s["llm_state"] == "degraded"
    # a turn while the LLM is down: an error frame naming it, no crash
    turn = await conn.turn(text_for(None)[0])
    assert turn.error_code == "llm_unreachable", turn.frames
    async with MockServer(MockSettings(port=port)):
        t0 = time.monotonic()

        async def ok() -> bool:
            return (await conn.stats())["llm_state"] == "ok"

        await await_until(ok, 15, "the background probe to find the LLM")
        assert time.monotonic() - t0 < 15
        turn = await conn.turn(text_for(None)[0])
        assert turn.kind == "response"
