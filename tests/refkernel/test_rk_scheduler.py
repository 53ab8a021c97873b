"""Scheduler behaviour seen from outside: dedup, the bounded queue, per-
connection order, interrupts, and notify broadcast."""

from __future__ import annotations

import asyncio
import time

from waiting import await_until
from mock import markers
from rkclient import text_for


async def test_identical_text_within_the_window_is_a_duplicate(rk):
    k = await rk()
    a = await k.connect()
    b = await k.connect()
    text, _ = text_for("!batch2")
    first = await a.turn(text)
    assert first.verdict is not None and first.verdict.all_ok
    again = await a.turn(text)
    assert again.frames == [{"type": "response", "id": again.id, "text": "", "duplicate": True}]
    # a replay guard for reconnecting UIs: another connection is no different
    other = await b.turn(text)
    assert other.terminal.get("duplicate") is True
    s = await a.stats()
    assert (s["duplicates"], s["executed"]) == (2, 1)


async def test_dedup_window_expires_and_can_be_switched_off(rk):
    k = await rk("--dedup-window", "1")
    conn = await k.connect()
    text, _ = text_for(None)
    t0 = time.monotonic()
    assert (await conn.turn(text)).terminal.get("duplicate") is None

    async def runs_again() -> bool:
        return (await conn.turn(text)).terminal.get("duplicate") is None

    await await_until(runs_again, 10, "the dedup window to expire", interval=0.2)
    assert time.monotonic() - t0 >= 1.0

    k0 = await rk("--dedup-window", "0")
    c0 = await k0.connect()
    text, _ = text_for(None)
    assert [(await c0.turn(text)).terminal.get("duplicate") for _ in range(3)] == [None, None, None]


async def test_past_the_queue_an_input_is_rejected_busy(rk):
    k = await rk("--workers", "1", "--queue", "1")
    a, b, c = await k.connect(), await k.connect(), await k.connect()
    ta, _ = text_for("!slowbatch1:1500")
    ida = await a.input(ta)
    await a.take(lambda f: f["type"] == "tool", 10, "A's tool to start")
    idb = await b.input(text_for(None)[0])
    async def queued_one() -> bool:
        return (await c.stats())["queued"] == 1

    await await_until(queued_one, 10, "B to be queued")
    idc = await c.input(text_for(None)[0])
    turn_c = await c.collect(idc, 10)
    assert turn_c.kind == "error" and turn_c.error_code == "busy", turn_c.frames
    assert "--queue" in turn_c.terminal["message"]
    turn_a, turn_b = await asyncio.gather(a.collect(ida), b.collect(idb))
    assert turn_a.verdict is not None and turn_a.verdict.all_ok
    assert turn_b.kind == "response" and turn_b.done_at > turn_a.done_at
    s = await c.stats()
    assert (s["rejected"], s["peak_queued"], s["executed"], s["queued"], s["running"]) == (1, 1, 2, 0, 0)


async def test_one_connection_is_served_in_order(rk):
    k = await rk("--workers", "4")
    conn = await k.connect()
    sent = [text_for("!slowbatch1:300") for _ in range(3)]
    ids = [await conn.input(t) for t, _ in sent]  # pipelined, no waiting
    turns = [await conn.collect(i) for i in ids]
    for t in turns:
        assert t.verdict is not None and t.verdict.all_ok, t.text
    spans = [markers.parse_timestamps(t.text, n)[0] for t, (_, n) in zip(turns, sent)]
    # each input's tool started only after the previous input's tool ended
    assert spans[0][1] <= spans[1][0] and spans[1][1] <= spans[2][0], spans
    assert turns[0].done_at < turns[1].done_at < turns[2].done_at
    s = await conn.stats()
    assert s["peak_queued"] == 0  # one connection never builds queue pressure


async def test_connection_backlog_is_bounded(rk):
    k = await rk("--conn-backlog", "2")
    conn = await k.connect()
    ids = [await conn.input(text_for("!slowbatch1:500" if i == 0 else None)[0]) for i in range(4)]
    rejected = await conn.collect(ids[3], 10)
    assert rejected.error_code == "busy", rejected.frames
    for i in ids[:3]:
        assert (await conn.collect(i)).kind == "response"


async def test_interrupt_suspends_the_running_turn_runs_and_resumes_it(rk):
    k = await rk("--workers", "1")
    a, b, c = await k.connect(), await k.connect(), await k.connect()
    ta, na = text_for("!slowbatch2:1000")
    ida = await a.input(ta)
    await a.take(lambda f: f["type"] == "tool" and f["phase"] == "start", 10, "A's tools to start")
    idc = await c.input(text_for(None)[0])  # normal: waits in the queue

    async def c_queued() -> bool:
        return (await b.stats())["queued"] == 1

    await await_until(c_queued, 10, "C to be queued")
    idb = await b.input(text_for(None)[0], priority="interrupt")
    turn_a, turn_b, turn_c = await asyncio.gather(a.collect(ida), b.collect(idb), c.collect(idc))
    assert turn_a.verdict is not None and turn_a.verdict.all_ok, turn_a.text
    assert turn_b.kind == turn_c.kind == "response"
    # B took A's slot at A's next step; A resumed and finished; C waited its turn
    assert turn_b.done_at < turn_a.done_at < turn_c.done_at
    # ... at a step boundary: after A's tools had ended, not in the middle of them
    a_tools_ended = max(e for _, e in markers.parse_timestamps(turn_a.text, na).values())
    assert turn_b.done_ns > a_tools_ended
    s = await a.stats()
    assert (s["suspended"], s["resumed"], s["preempted"]) == (1, 1, 1), s
    assert s["executed"] == 3


async def test_interrupts_queued_at_one_step_run_in_one_suspension(rk):
    k = await rk("--workers", "1")
    a, b1, b2 = await k.connect(), await k.connect(), await k.connect()
    ida = await a.input(text_for("!slowbatch1:800")[0])
    await a.take(lambda f: f["type"] == "tool", 10, "A's tool to start")
    id1 = await b1.input(text_for(None)[0], priority="interrupt")
    id2 = await b2.input(text_for(None)[0], priority="interrupt")

    async def two_pending() -> bool:
        return (await a.stats())["queued"] == 2

    await await_until(two_pending, 10, "both interrupts to be pending")
    ta, t1, t2 = await asyncio.gather(a.collect(ida), b1.collect(id1), b2.collect(id2))
    assert max(t1.done_at, t2.done_at) < ta.done_at
    s = await a.stats()
    assert (s["suspended"], s["resumed"], s["preempted"]) == (1, 1, 2), s


async def test_interrupt_with_an_idle_worker_preempts_nothing(rk):
    k = await rk("--workers", "2")
    a, b = await k.connect(), await k.connect()
    ida = await a.input(text_for("!slowbatch1:500")[0])
    await a.take(lambda f: f["type"] == "tool", 10, "A's tool to start")
    tb = await b.turn(text_for(None)[0], priority="interrupt")
    ta = await a.collect(ida)
    assert tb.done_at < ta.done_at  # it ran at once, beside A
    s = await a.stats()
    assert (s["suspended"], s["resumed"], s["preempted"]) == (0, 0, 0), s


async def test_notify_reaches_every_connection(rk):
    k = await rk()
    conns = [await k.connect() for _ in range(5)]
    lurker = await k.connect(auth=False)  # not authenticated: not a recipient
    text, n = text_for("!notify")
    turn = await conns[0].turn(text)
    assert turn.verdict is not None and turn.verdict.all_ok, turn.text
    assert "notified 5 connection(s)" in turn.text
    for c in conns:
        f = await c.take(lambda f: f["type"] == "notify", 10, "the notify frame")
        assert f == {"type": "notify", "text": f"kst notify {n}"}
    assert not any(f["type"] == "notify" for f in lurker.inbox)
