"""Protocol v1 over each transport the kernel listens on (--socket / --listen
unix:PATH, tcp:HOST:PORT, ws:HOST:PORT/PATH), on real sockets: the ready line,
auth, a tool turn, bad JSON, the frame size limit, a client leaving mid-turn,
a client that stops reading, and SIGTERM. The same Connection serves all
three, so the same test runs on each."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import signal
import socket
import tempfile
import time
from pathlib import Path

import aiohttp
import pytest

from rkclient import KernelConn, WsKernelConn, tcp_address, text_for
from rkhelpers import procs_in, run_kernel_cli
from waiting import await_until

MIB = 1 << 20
LISTEN = {"unix": None, "tcp": "tcp:127.0.0.1:0", "ws": "ws:127.0.0.1:0/kernel"}
READY = {
    "unix": re.compile(r"refkernel listening on (/tmp/rk-[^/\s]+/k\.sock)\n"),
    "tcp": re.compile(r"refkernel listening on tcp:127\.0\.0\.1:([1-9]\d*)\n"),
    "ws": re.compile(r"refkernel listening on ws://127\.0\.0\.1:([1-9]\d*)/kernel\n"),
}


@pytest.fixture(params=list(LISTEN))
def transport(request) -> str:
    return request.param


async def _kernel(rk, transport: str, *args: str, **kw):
    return await rk(*args, listen=LISTEN[transport], **kw)


async def test_ready_line_names_the_real_address(rk, transport):
    k = await _kernel(rk, transport)
    m = READY[transport].fullmatch(k.ready_line)
    assert m, k.ready_line
    if transport == "unix":
        assert k.ready_line == f"refkernel listening on {k.socket}\n"  # byte-identical to what it always was
    conn = await k.connect()  # port 0 was asked for; the one named is the one that answers
    assert (await conn.stats())["connections"] == 1


async def test_listen_unix_is_the_same_as_socket(rk):
    sock_dir = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    path = sock_dir / "k.sock"
    k = await rk(listen=f"unix:{path}")
    k.sock_dir = sock_dir  # removed at teardown
    assert k.ready_line == f"refkernel listening on {path}\n"
    assert (await (await k.connect()).turn(text_for(None)[0])).kind == "response"


async def test_auth_comes_first(rk, transport):
    k = await _kernel(rk, transport)
    for first, code in [
        ({"type": "auth", "token": "wrong"}, "auth_failed"),
        ({"type": "input", "id": 1, "text": "hello #x"}, "auth_required"),
        (b"not json", "bad_json"),
    ]:
        conn = await k.connect(auth=False)
        await (conn.send_frame(first) if isinstance(first, bytes) else conn.send(first))
        err = await conn.take(lambda f: True, 10, f"the {code} error")
        assert (err["type"], err["code"]) == ("error", code), err
        await conn.closed()
    good = await k.connect()  # asserts the exact ack
    await good.send({"type": "auth", "token": k.token})
    assert (await good.take(lambda f: True, 10, "bad_frame (auth twice)"))["code"] == "bad_frame"
    s = await good.stats()
    assert (s["auth_failures"], s["bad_frames"]) == (2, 2), s


async def test_silent_client_is_closed_after_auth_timeout(rk, transport):
    k = await _kernel(rk, transport, "--auth-timeout", "0.5")
    conn = await k.connect(auth=False)
    assert (await conn.take(lambda f: True, 10, "auth_timeout"))["code"] == "auth_timeout"
    await conn.closed()


async def test_a_tool_turn(rk, transport):
    k = await _kernel(rk, transport)
    conn = await k.connect()
    text, n = text_for("!slowbatch4")
    turn = await conn.turn(text)
    assert turn.verdict is not None and turn.verdict.all_ok, turn.text
    assert turn.overlap(n) == 4
    assert [f["phase"] for f in turn.tools].count("end") == 4
    assert turn.deltas == turn.text  # the streamed text is the answer
    await conn.send({"type": "input", "id": "again", "text": text})
    assert (await conn.collect("again", 10)).terminal == {"type": "response", "id": "again", "text": "", "duplicate": True}


async def test_bad_json_after_auth_keeps_the_connection(rk, transport):
    k = await _kernel(rk, transport)
    conn = await k.connect()
    await conn.send_frame(b"{not json")
    assert (await conn.take(lambda f: True, 10, "bad_json"))["code"] == "bad_json"
    await conn.send_frame(b"\xff\xfe")
    assert (await conn.take(lambda f: True, 10, "bad_json (not UTF-8)"))["code"] == "bad_json"
    await conn.send({"type": "launch-missiles", "id": 7})
    assert (await conn.take(lambda f: True, 10, "unknown_type"))["code"] == "unknown_type"
    turn = await conn.turn(text_for("!batch2")[0])
    assert turn.verdict is not None and turn.verdict.all_ok
    assert (await conn.stats())["bad_frames"] == 3


async def test_frame_size_limit(rk, transport):
    k = await _kernel(rk, transport)
    conn = await k.connect()
    # exactly 1 MiB (the newline not counted) is allowed ...
    body = b'{"type":"stats"' + b" " * (MIB - len(b'{"type":"stats"}')) + b"}"
    assert len(body) == MIB
    await conn.send_frame(body)
    assert (await conn.take(lambda f: True, 10, "stats for a 1 MiB frame"))["type"] == "stats"
    # ... one byte more is not: too_large, then close
    await conn.send_frame(b'{"type":"stats"' + b" " * (MIB - len(b'{"type":"stats"}') + 1) + b"}")
    err = await conn.take(lambda f: True, 10, "too_large")
    assert err["code"] == "too_large", err
    await conn.closed()
    if isinstance(conn, WsKernelConn):
        assert conn.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    other = await k.connect()
    assert (await other.stats())["bad_frames"] == 1


async def test_client_leaving_mid_turn_abandons_it_and_its_tools(rk, transport):
    k = await _kernel(rk, transport)
    conn = await KernelConn.open(k.address)
    await conn.input(text_for("!slowbatch2:20000")[0])
    await conn.take(lambda f: f["type"] == "tool" and f["phase"] == "start", 10, "the tools to start")
    await await_until(lambda: len(procs_in(k.data_dir)) >= 2, 10, "the tool processes")
    await conn.aclose()
    await await_until(lambda: procs_in(k.data_dir) == [], 10, "the abandoned turn's tools to be killed")
    s = await k.stats()
    assert (s["abandoned"], s["running"]) == (1, 0), s


async def test_sigterm_ends_the_turn_closes_and_stops_listening(rk, transport):
    k = await _kernel(rk, transport)
    conn = await k.connect()
    idle = await k.connect()
    id_ = await conn.input(text_for("!slowbatch2:5000")[0])
    await conn.take(lambda f: f["type"] == "tool", 10, "the tools to start")
    k.proc.send_signal(signal.SIGTERM)
    turn = await conn.collect(id_, 15)
    assert turn.error_code == "shutdown", turn.frames
    await conn.closed()
    await idle.closed()
    for c in (conn, idle):
        if isinstance(c, WsKernelConn):
            assert c.close_code == aiohttp.WSCloseCode.OK  # a close frame, not a dropped socket
    assert await asyncio.wait_for(k.proc.wait(), 15) == 0, k.stderr()
    if k.socket is not None:
        assert not k.socket.exists()
    with pytest.raises((OSError, aiohttp.ClientError)):
        await KernelConn.open(k.address)
    assert procs_in(k.data_dir) == []


def _ws_frame(payload: bytes, opcode: int = 0x1) -> bytes:
    """One masked client frame (RFC 6455 5.2), built by hand: a raw socket can then stop reading."""
    mask = os.urandom(4)
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def _ws_handshake(loop, sock: socket.socket, address: str) -> bytes:
    """Connect a raw socket to the kernel's WebSocket and upgrade it; what came after the 101's headers."""
    host, port = address.removeprefix("ws://").split("/", 1)[0].split(":")
    await loop.sock_connect(sock, (host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(sock, (
        f"GET /kernel HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:  # the kernel sends nothing past the headers until it is spoken to
        head += await asyncio.wait_for(loop.sock_recv(sock, 4096), 10)
    assert head.startswith(b"HTTP/1.1 101"), head
    return head.split(b"\r\n\r\n", 1)[1]


def _server_frames(buf: bytes) -> list[tuple[int, bytes]]:
    """The whole (unmasked, unfragmented) frames a kernel sent: (opcode, payload)."""
    frames = []
    while len(buf) >= 2:
        n, at = buf[1] & 0x7F, 2
        if n >= 126:
            at = 4 if n == 126 else 10
            n = int.from_bytes(buf[2:at], "big")
        if len(buf) < at + n:
            break
        frames.append((buf[0] & 0x0F, buf[at:at + n]))
        buf = buf[at + n:]
    return frames


@pytest.mark.parametrize("transport", ["tcp", "ws"])
async def test_client_that_stops_reading_is_dropped(rk, transport):
    k = await _kernel(rk, transport, "--max-write-buffer", "65536")
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        if transport == "tcp":
            await loop.sock_connect(sock, tcp_address(k.address))
            flood = b'{"type":"auth","token":"tok"}\n' + b'{"type":"stats"}\n' * 20000
        else:
            await _ws_handshake(loop, sock, k.address)
            flood = _ws_frame(b'{"type":"auth","token":"tok"}') + _ws_frame(b'{"type":"stats"}') * 20000
        try:
            await asyncio.wait_for(loop.sock_sendall(sock, flood), 30)
        except ConnectionError:
            pass  # dropped while we were still sending: fine
        other = await k.connect()

        async def dropped() -> bool:
            return (await other.stats())["slow_readers"] == 1

        await await_until(dropped, 20, "the kernel to drop the non-reading client")
        turn = await other.turn(text_for("!batch2")[0])
        assert turn.verdict is not None and turn.verdict.all_ok
        received = 0
        try:
            while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 20), 10):
                received += len(chunk)
        except ConnectionError:
            pass
        assert received < 4 << 20, received  # what it left unsent was bounded; the rest was never produced
    finally:
        sock.close()


async def test_ws_binary_message_is_not_a_frame(rk):
    k = await _kernel(rk, "ws")
    conn = await k.connect()
    await conn.send_binary(b'{"type":"stats"}')
    err = await conn.take(lambda f: True, 10, "bad_frame for a binary message")
    assert err["code"] == "bad_frame" and "text message" in err["message"], err
    assert (await conn.stats())["bad_frames"] == 1  # and the connection goes on
    first = await k.connect(auth=False)
    await first.send_binary(b'{"type":"auth","token":"tok"}')  # before auth: an error, then close
    assert (await first.take(lambda f: True, 10, "bad_frame"))["code"] == "bad_frame"
    await first.closed()


async def test_ws_other_paths_are_not_the_kernel(rk):
    k = await _kernel(rk, "ws")
    url = k.address.removesuffix("/kernel") + "/elsewhere"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as exc:
            await session.ws_connect(url)
        assert exc.value.status == 404
        async with session.get(k.address.replace("ws://", "http://")) as resp:  # not an upgrade
            assert resp.status == 400
    assert (await k.stats())["connections_total"] == 1  # only the stats connection itself


async def test_ws_path_defaults_to_root(rk):
    k = await rk(listen="ws:127.0.0.1:0")
    assert re.fullmatch(r"refkernel listening on ws://127\.0\.0\.1:[1-9]\d*/\n", k.ready_line), k.ready_line
    assert (await (await k.connect()).turn(text_for(None)[0])).kind == "response"


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--listen", "tcp:127.0.0.1"], "listen='tcp:127.0.0.1'"),
        (["--listen", "udp:127.0.0.1:9"], "listen='udp:127.0.0.1:9'"),
        (["--listen", "tcp:127.0.0.1:70000"], "65535"),
        (["--listen", "tcp:127.0.0.1:0/x"], "takes no path"),
        (["--listen", "ws:127.0.0.1:0kernel"], "listen='ws:127.0.0.1:0kernel'"),
        (["--listen", "unix:/tmp/" + "s" * 120], "at most 107 bytes"),
        (["--listen", "tcp:127.0.0.1:0", "--socket", "/tmp/rk-x.sock"], "argument --socket: not allowed with argument --listen"),
        ([], "one of the arguments --socket --listen is required"),
        (["--listen", "tcp:127.0.0.1:0", "--batch", "sometimes"], "invalid choice: 'sometimes'"),
        (["--listen", "tcp:127.0.0.1:0", "--delay-ms", "-1"], "delay_ms=-1"),
    ],
)
async def test_bad_listen_flags_exit_2_naming_the_value(tmp_path, flags, named):
    rc, out = await run_kernel_cli(["--llm-url", "http://127.0.0.1:9/v1", "--data-dir", str(tmp_path / "d"), *flags])
    assert rc == 2, out
    assert named in out, out


async def test_a_port_in_use_is_refused(rk, tmp_path):
    k = await _kernel(rk, "tcp")
    for listen in (k.address, "ws:" + k.address.removeprefix("tcp:")):
        rc, out = await run_kernel_cli(["--listen", listen, "--llm-url", k.mock.url + "/v1", "--data-dir", str(tmp_path / "d")])
        assert rc == 2, out
        assert f"listen={listen if listen.startswith('tcp') else listen + '/'!r}: cannot listen there" in out, out
    assert (await (await k.connect()).turn(text_for(None)[0])).kind == "response"  # the live one is untouched


async def test_ws_close_to_a_client_that_stopped_reading_is_bounded(rk):
    # Replies pile up unread -- more than the sockets hold, less than
    # --max-write-buffer (so not a slow-reader drop) -- then a too-large frame
    # makes the kernel close: flushing can never finish, so after
    # WS_CLOSE_TIMEOUT the close becomes an abort.
    k = await _kernel(rk, "ws", "--max-write-buffer", str(256 << 20))
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    try:
        await _ws_handshake(loop, sock, k.address)
        flood = _ws_frame(b'{"type":"auth","token":"tok"}') + _ws_frame(b'{"type":"stats"}') * 20000
        # the header of a text frame one byte over the limit: refused before its payload is read
        too_large = bytes([0x81, 0x80 | 127]) + (MIB + 1).to_bytes(8, "big") + os.urandom(4)
        await asyncio.wait_for(loop.sock_sendall(sock, flood + too_large), 30)
        other = await k.connect()

        async def gone() -> bool:
            return (await other.stats())["connections"] == 1

        t0 = time.monotonic()
        await await_until(gone, 15, "the kernel to give up closing the non-reading client")
        assert time.monotonic() - t0 < 2.0 + 3.0
        s = await other.stats()
        assert (s["slow_readers"], s["bad_frames"]) == (0, 1), s
    finally:
        sock.close()


async def test_ws_oversized_message_is_read_to_its_end_before_the_1009(rk):
    # A client still sending the message it was told is too large: were the
    # kernel to close before the rest arrived, the rest would draw a RST that
    # can overtake the close frame. Sent in two parts, the second only once the
    # too_large frame is in, the kernel waits for it, closes with 1009, and the
    # connection ends with a FIN, not a reset.
    k = await _kernel(rk, "ws")
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    try:
        got = await _ws_handshake(loop, sock, k.address)
        size, first = MIB + 1, 64 << 10
        await loop.sock_sendall(sock, _ws_frame(b'{"type":"auth","token":"tok"}')
                                + bytes([0x81, 0x80 | 127]) + size.to_bytes(8, "big") + os.urandom(4) + b" " * first)
        while not any(op == 0x1 and b'"too_large"' in p for op, p in _server_frames(got)):
            chunk = await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 10)
            assert chunk, _server_frames(got)
            got += chunk
        await asyncio.wait_for(loop.sock_sendall(sock, b" " * (size - first)), 10)  # no reset: still being read
        while chunk := await asyncio.wait_for(loop.sock_recv(sock, 1 << 16), 10):
            got += chunk
        closes = [p for op, p in _server_frames(got) if op == 0x8]
        assert [int.from_bytes(p[:2], "big") for p in closes] == [aiohttp.WSCloseCode.MESSAGE_TOO_BIG]
    finally:
        sock.close()
