"""--terse and --delay-ms on the real kernel against the real mock. A terse
kernel's turns can only be verified from the mock's side (its request log),
so that is where these tests look too."""

from __future__ import annotations

import time

import pytest

from mock import markers
from rkclient import text_for


def _requests(k, nonce: str) -> list[dict]:
    return [r for r in k.mock.state.recent if r.get("nonce") == nonce]


async def test_terse_text_turn_answers_done(rk):
    k = await rk("--terse")
    conn = await k.connect()
    text, n = text_for(None)
    turn = await conn.turn(text)
    assert turn.frames == [{"type": "response", "id": turn.id, "text": "done"}]  # no deltas, not the model's words
    assert [(r["plan"], r["status"], r["followup"]) for r in _requests(k, n)] == [("text", 200, False)]
    again = await conn.turn(text)  # the replay guard's answer is not the model's: unchanged
    assert again.frames == [{"type": "response", "id": again.id, "text": "", "duplicate": True}]
    assert (await conn.stats())["terse"] is True


async def test_terse_tool_turn_keeps_its_tool_frames(rk):
    k = await rk("--terse")
    conn = await k.connect()
    text, n = text_for("!slowbatch2")
    turn = await conn.turn(text)
    assert [f["type"] for f in turn.frames] == ["tool"] * 4 + ["response"], turn.frames
    assert sorted((f["call_id"], f["phase"], f.get("ok", True)) for f in turn.tools) == [
        (f"call_{n}_{i}", phase, True) for i in range(2) for phase in ("end", "start")]
    assert turn.text == "done"
    # the turn was right: the mock's verdict on the results it got back says so
    followup = [r for r in _requests(k, n) if r["followup"]]
    assert len(followup) == 1, _requests(k, n)
    v = markers.parse_verdict(followup[0]["verdict"])
    assert v is not None and v.all_ok and v.got == 2, followup


async def test_terse_error_turn_is_unchanged(rk):
    k = await rk("--terse")
    conn = await k.connect()
    text, n = text_for("!err:500")
    turn = await conn.turn(text)
    assert len(turn.frames) == 1 and turn.error_code == "llm_error", turn.frames
    assert "HTTP 500" in turn.terminal["message"]
    assert [r["status"] for r in _requests(k, n)] == [500]


async def test_terse_leaves_the_hide_error_frames_symptom_alone(rk):
    k = await rk("--terse", "--fault", "hide-error-frames")
    turn = await (await k.connect()).turn(text_for("!err:500")[0])
    assert turn.frames == [{"type": "response", "id": turn.id, "text": ""}]  # empty, not "done"


@pytest.mark.serial  # compares two processes' clocks to the millisecond
async def test_delay_lands_before_the_llm_request(rk):
    kernels = {"plain": await rk(), "slow": await rk("--delay-ms", "300")}
    conns = {name: await k.connect() for name, k in kernels.items()}
    seconds: dict[str, list[float]] = {"plain": [], "slow": []}
    gap: dict[str, list[float]] = {"plain": [], "slow": []}  # input sent -> its LLM request reached the mock
    for _ in range(5):  # interleaved: both kernels see the same machine load
        for name, conn in conns.items():
            text, n = text_for(None)
            sent_wall, sent = time.time(), time.monotonic()
            turn = await conn.collect(await conn.input(text), 30, sent, text)
            assert turn.kind == "response" and markers.parse_text_verdict(turn.text) == n
            seconds[name].append(turn.seconds)
            (req,) = _requests(kernels[name], n)
            gap[name].append(req["ts"] - sent_wall)
    # the same turn, 300 ms slower: the sleep is a floor under every slow turn,
    # and the plain one is far under it. (A difference of the two minima also
    # carried the plain turn's noise: CI on e38315d, 0.30425 - 0.00512 < 0.300.)
    assert min(seconds["slow"]) >= 0.300 and max(seconds["plain"]) < 0.150, seconds
    # ... and all of it before the LLM was asked: kernel overhead, not LLM or tool time
    assert min(gap["slow"]) >= 0.300, gap
    assert max(gap["plain"]) < 0.300, gap
