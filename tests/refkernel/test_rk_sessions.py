"""Sessions (the input's ``session`` field, docs/protocol.md *Sessions*) on the
real kernel, proven from what the LLM received: the scripted fake LLM
(rkfake.py) records every request, and each turn's requests must carry exactly
the completed turns of its own session, in order, as the kernel sent them --
in the shape of the API it speaks (--llm-api), which rkfake reads strictly."""

from __future__ import annotations

import json

import pytest

from rkfake import Script, check_history, check_loop, history_failures, interleaved_sessions, session_turn, text
from rkhelpers import run_kernel_cli
from waiting import await_until


APIS = ["chat", "responses", "anthropic"]


async def _kernel(rk, llm, *args: str, api: str = "chat"):
    return await rk("--llm-api", api, *args, llm_url=llm.url + "/v1")


@pytest.mark.parametrize("api", APIS)
async def test_interleaved_sessions_and_a_session_resumed_elsewhere(llm, rk, api):
    k = await _kernel(rk, llm, api=api)
    expected = await interleaved_sessions(k)
    assert history_failures(llm, expected) == {}
    for t, _ in expected.values():
        check_loop(llm, t)  # and each turn's own steps, after its history
    s = await k.stats()
    assert (s["sessions"], s["session_evictions"]) == (2, 0)


async def test_without_a_session_nothing_is_carried(llm, rk):
    k = await _kernel(rk, llm)
    conn = await k.connect()
    plain1 = await session_turn(conn, None, loop=1, calls=2)
    a1 = await session_turn(conn, "A", loop=1)
    plain2 = await session_turn(conn, None)
    a2 = await session_turn(conn, "A")
    plain3 = await session_turn(conn, None, loop=2)
    for t in (plain1, plain2, plain3):
        check_history(llm, t, [])  # [system, user, its own steps], nothing else
        check_loop(llm, t)
    check_history(llm, a2, [a1])  # the session-less turns between are not part of A
    assert (await conn.stats())["sessions"] == 1


async def test_session_turns_keeps_the_last_n_whole_turns(llm, rk):
    k = await _kernel(rk, llm, "--session-turns", "3")
    conn = await k.connect()
    turns = [await session_turn(conn, "A", loop=n % 2, calls=2) for n in range(6)]
    for n, t in enumerate(turns):
        check_history(llm, t, turns[max(0, n - 3):n])


async def test_max_sessions_evicts_the_least_recently_used(llm, rk):
    k = await _kernel(rk, llm, "--max-sessions", "2")
    conn = await k.connect()
    a1 = await session_turn(conn, "A")
    b1 = await session_turn(conn, "B")
    a2 = await session_turn(conn, "A")  # A used last: B is now the least recently used
    assert ((s := await conn.stats())["sessions"], s["session_evictions"]) == (2, 0)
    c1 = await session_turn(conn, "C")  # a third session: B goes, not A (the oldest)
    assert ((s := await conn.stats())["sessions"], s["session_evictions"]) == (2, 1)
    a3 = await session_turn(conn, "A")
    check_history(llm, a3, [a1, a2])
    b2 = await session_turn(conn, "B")  # B starts afresh, and C (used before A) goes
    check_history(llm, b2, [])
    assert ((s := await conn.stats())["sessions"], s["session_evictions"]) == (2, 2)
    c2 = await session_turn(conn, "C")
    check_history(llm, c2, [])
    check_history(llm, a2, [a1])
    check_history(llm, c1, [])
    check_history(llm, b1, [])


@pytest.mark.parametrize("api", APIS)
async def test_failed_cancelled_and_duplicate_turns_stay_out(llm, rk, api):
    k = await _kernel(rk, llm, api=api)
    conn = await k.connect()
    a1 = await session_turn(conn, "A", loop=1)
    failed, _ = text(fail=True)
    assert (await conn.turn(failed, session="A")).error_code == "llm_error"
    again = await conn.turn(a1, session="A")  # the replay guard: answered, not run
    assert again.frames == [{"type": "response", "id": again.id, "text": "", "duplicate": True}]
    held, n = text(hold=True, loop=1)
    other = await k.connect()
    await other.input(held, session="A")
    await await_until(lambda: llm.holding(n), 10, "the held turn's request at the fake")
    await other.aclose()  # its client leaves: the turn is cancelled

    async def abandoned() -> bool:
        return (await conn.stats())["abandoned"] == 1

    await await_until(abandoned, 10, "the kernel to cancel the held turn")
    a2 = await session_turn(conn, "A")
    check_history(llm, a2, [a1])  # not the error, not the duplicate, not the cancelled turn


async def test_overlapping_turns_of_a_session_see_what_was_complete(llm, rk):
    # Across connections one session's turns may overlap: each carries the
    # turns completed when it started, and they enter the history in the order they end.
    k = await _kernel(rk, llm)
    c1, c2 = await k.connect(), await k.connect()
    a1 = await session_turn(c1, "A")
    x, n = text(hold=True, loop=1)
    xid = await c1.input(x, session="A")
    await await_until(lambda: llm.holding(n), 10, "the held turn's request at the fake")
    y = await session_turn(c2, "A", loop=1)
    llm.release(n)
    assert (await c1.collect(xid)).kind == "response"
    z = await session_turn(c2, "A")
    check_history(llm, x, [a1])
    check_history(llm, y, [a1])  # x had not ended
    check_history(llm, z, [a1, y, x])  # y ended first


@pytest.mark.parametrize("api", APIS)
async def test_a_terse_session_keeps_the_models_answer(llm, rk, api):
    k = await _kernel(rk, llm, "--terse", api=api)
    conn = await k.connect()
    a1, _ = text(loop=1)
    assert (await conn.turn(a1, session="A")).text == "done"  # the client sees the kernel's word ...
    a2 = await session_turn(conn, "A")
    check_history(llm, a2, [a1])  # ... the model sees its own (exchange() holds Script.answer)
    assert llm.requests_for(Script.parse(a2).nonce)[0][-2]["content"] == Script.parse(a1).answer


async def test_a_replay_is_the_same_text_in_the_same_session(llm, rk):
    k = await _kernel(rk, llm)
    conn = await k.connect()
    t, _ = text()
    runs = [await conn.turn(t, session=sid) for sid in ("A", "B", None, "A", None)]
    assert [bool(r.terminal.get("duplicate")) for r in runs] == [False, False, False, True, True]
    assert (await conn.stats())["duplicates"] == 2


@pytest.mark.parametrize("bad", ["", "s" * 257, 7, None, True, ["A"], {"id": "A"}])
async def test_a_bad_session_is_a_bad_frame(llm, rk, bad):
    k = await _kernel(rk, llm)
    conn = await k.connect()
    t, _ = text()
    await conn.send_raw(json.dumps({"type": "input", "id": "i1", "text": t, "session": bad}).encode() + b"\n")
    err = await conn.take(lambda f: f["type"] == "error", 10, "the bad_frame error")
    assert (err["id"], err["code"]) == ("i1", "bad_frame") and "session" in err["message"], err
    assert len(err["message"]) < 200  # a long bad value is described, not echoed
    ok = await session_turn(conn, "s" * 256)  # the connection goes on; 256 characters is a valid session
    check_history(llm, ok, [])
    s = await conn.stats()
    assert (s["bad_frames"], s["sessions"], len(llm.requests)) == (1, 1, 1)


@pytest.mark.parametrize("flag, value", [("--session-turns", "0"), ("--max-sessions", "0")])
async def test_bad_session_limits_exit_2(tmp_path, flag, value):
    rc, out = await run_kernel_cli(["--listen", "tcp:127.0.0.1:0", "--llm-url", "http://127.0.0.1:9/v1",
                                    "--data-dir", str(tmp_path / "d"), flag, value])
    assert rc == 2 and f"{flag[2:].replace('-', '_')}={value} is invalid: use 1 to" in out, out


async def test_an_interrupt_in_its_own_session_sees_only_completed_turns(llm, rk):
    # One worker: the interrupt runs at the held turn's next step boundary, in its place.
    k = await _kernel(rk, llm, "--workers", "1")
    conn = await k.connect()
    a1 = await session_turn(conn, "A")
    x, n = text(hold=True, loop=1)
    xid = await conn.input(x, session="A")
    await await_until(lambda: llm.holding(n), 10, "the held turn's request at the fake")
    i, _ = text()
    iid = await conn.input(i, session="A", priority="interrupt")
    llm.release(n)
    assert (await conn.collect(iid)).kind == "response"
    assert (await conn.collect(xid)).kind == "response"
    assert (await conn.stats())["preempted"] == 1
    z = await session_turn(conn, "A")
    check_history(llm, i, [a1])  # the suspended turn had not ended
    check_history(llm, x, [a1])  # nor does it see the interrupt: its history was read at its first request
    check_history(llm, z, [a1, i, x])  # the interrupt ended first
