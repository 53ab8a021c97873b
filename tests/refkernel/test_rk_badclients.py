"""Clients that misbehave: garbage, silence, not reading, leaving mid-turn.
The kernel answers with an error and/or closes, keeps serving everyone else,
and its memory stays bounded."""

from __future__ import annotations

import asyncio
import socket

import psutil

from rkhelpers import procs_in
from waiting import await_until
from mock import markers
from rkclient import KernelConn, open_unix, text_for

GARBAGE = [
    (b"garbage that is not json\n", "bad_json"),
    (b'{"type":"nope","id":"g"}\n', "unknown_type"),
    (b"[1,2]\n", "bad_frame"),
    (b'{"type":"input","id":"g2"}\n', "bad_frame"),
    (b'{"type":"input","id":true,"text":"x"}\n', "bad_frame"),
    (b"[" * 5000 + b"\n", "bad_json"),  # nested past the parser's recursion limit
]


async def _garbage_then_input(k, all_open: asyncio.Barrier, counted: asyncio.Event) -> None:
    conn = await KernelConn.open(k.socket, token=k.token)
    try:
        await conn.send_raw(b"".join(g for g, _ in GARBAGE))
        for _, code in GARBAGE:
            err = await conn.take(lambda f: f["type"] == "error", 60, f"the {code} error")
            assert err["code"] == code, err
        await asyncio.wait_for(all_open.wait(), 60)  # every connection open and abused at once
        # and still open while the test counts them (a turn answered first would close its connection)
        await asyncio.wait_for(counted.wait(), 60)
        text, n = text_for(None)
        turn = await conn.turn(text, timeout=60)
        assert turn.kind == "response" and markers.parse_text_verdict(turn.text) == n, turn.frames[-1]
    finally:
        await conn.aclose()


async def _garbage_before_auth(k) -> None:
    reader, writer = await open_unix(k.socket)
    try:
        writer.write(b"\x00\x01 not even close\n")
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 30)  # an error line, then EOF
        assert b'"code":"bad_json"' in data, data
    finally:
        writer.close()


def _rss(pid: int) -> int:
    return psutil.Process(pid).memory_info().rss


async def test_thousand_garbage_connections_then_normal_answers(rk):
    k = await rk("--queue", "2000", "--workers", "8")
    rss = []
    for _round in range(2):
        all_open, counted = asyncio.Barrier(1001), asyncio.Event()
        clients = asyncio.gather(
            *(_garbage_then_input(k, all_open, counted) for _ in range(1000)),
            *(_garbage_before_auth(k) for _ in range(100)),
        )
        await asyncio.wait_for(all_open.wait(), 60)
        try:
            assert (await k.stats())["connections"] >= 1000
        finally:
            counted.set()
        await clients

        async def settled() -> bool:
            return (await k.stats())["connections"] == 1

        await await_until(settled, 30, "the kernel to drop the closed connections")
        rss.append(_rss(k.pid))
    s = await k.stats()
    assert s["executed"] == 2000 and s["failed"] == 0 and s["rejected"] == 0, s
    assert s["bad_frames"] == 2 * (1000 * len(GARBAGE) + 100)
    # a second round of the same abuse costs no new memory (allocator noise aside)
    assert rss[1] - rss[0] < 32 << 20, [r >> 20 for r in rss]
    print(f"kernel RSS after each round of 1,000 abusive connections: {[r >> 20 for r in rss]} MiB")


async def test_client_that_stops_reading_is_dropped(rk):
    k = await rk("--max-write-buffer", "65536")
    loop = asyncio.get_running_loop()
    # a raw socket that is never read (an asyncio stream would read into its buffer)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, str(k.socket))
        flood = b'{"type":"auth","token":"tok"}\n' + b'{"type":"stats"}\n' * 20000
        try:
            await asyncio.wait_for(loop.sock_sendall(sock, flood), 30)
        except ConnectionError:
            pass  # dropped while we were still sending: fine
        other = await k.connect()

        async def dropped() -> bool:
            return (await other.stats())["slow_readers"] == 1

        await await_until(dropped, 20, "the kernel to drop the non-reading client")
        s = await other.stats()
        assert s["connections"] == 1
        turn = await other.turn(text_for("!batch2")[0])
        assert turn.verdict is not None and turn.verdict.all_ok
        # what it left unsent was bounded by the cap: the rest was never produced
        received = 0
        try:
            while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10):
                received += len(chunk)
        except ConnectionError:
            pass
        assert received < 4 << 20, received
    finally:
        sock.close()


async def test_silent_clients_are_closed_and_forgotten(rk):
    k = await rk("--auth-timeout", "0.5")
    silent = [await open_unix(k.socket) for _ in range(200)]
    try:
        for reader, _ in silent:
            data = await asyncio.wait_for(reader.read(), 15)
            assert b'"code":"auth_timeout"' in data
    finally:
        for _, writer in silent:
            writer.close()
    s = await k.stats()
    assert (s["auth_timeouts"], s["connections"]) == (200, 1)


async def test_client_leaving_mid_turn_abandons_it_and_its_tools(rk):
    k = await rk()
    conn = await KernelConn.open(k.socket)
    await conn.input(text_for("!slowbatch2:20000")[0])
    await conn.take(lambda f: f["type"] == "tool" and f["phase"] == "start", 10, "the tools to start")
    await await_until(lambda: len(procs_in(k.data_dir)) >= 2, 10, "the tool processes")
    await conn.aclose()
    await await_until(lambda: procs_in(k.data_dir) == [], 10, "the abandoned turn's tools to be killed")
    s = await k.stats()
    assert (s["abandoned"], s["running"]) == (1, 0), s


async def test_client_leaving_a_hung_turn_releases_the_llm_request(rk):
    k = await rk()
    conn = await KernelConn.open(k.socket)
    await conn.input(text_for("!hang")[0])
    await await_until(lambda: k.mock.state.hanging == 1, 10, "the mock to hang")
    await conn.aclose()
    await await_until(lambda: k.mock.state.hanging == 0, 10, "the kernel to drop the hung request")
    assert (await k.stats())["running"] == 0
