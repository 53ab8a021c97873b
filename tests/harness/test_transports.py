"""The transports to a kernel (harness/wire/transport.py, harness/wire/wsconn.py): the
--socket forms, the TCP connect taxonomy, the bounds and failure reasons of
harness/wire/client.py over TCP and a WebSocket (flood, protocol errors, reset, a
peer that never reads), a custom adapter over a WebSocket, and the sandbox
connector's client against a connector on the host. No namespaces here: the
connector inside a sandbox is tests/harness/sandbox, launched kernels
tests/e2e/test_transports.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiohttp import web

from harness.wire.client import READ_LIMIT, KernelClient
from harness.errors import ConnectorGone, UsageError
from harness.wire.protocol import FrameKind, Protocol, ProtocolError
from harness.wire.transport import DIAL_INFLIGHT, Address, ConnError, Dialer, open_tcp, parse_address
from waiting import await_until

REPO = Path(__file__).resolve().parents[2]
ACK = {"type": "response", "kind": "auth", "ok": True, "protocol": 1}


# --------------------------------------------------------------------------- --socket forms


@pytest.mark.parametrize(
    "text, want",
    [
        ("/tmp/k.sock", Address("unix", path="/tmp/k.sock")),
        ("k.sock", Address("unix", path="k.sock")),
        ("./a:b.sock", Address("unix", path="./a:b.sock")),
        ("unix:/tmp/a:b.sock", Address("unix", path="/tmp/a:b.sock")),
        ("tcp:127.0.0.1:8765", Address("tcp", host="127.0.0.1", port=8765)),
        ("tcp:127.1.2.3:1", Address("tcp", host="127.1.2.3", port=1)),
        ("tcp:localhost:80", Address("tcp", host="127.0.0.1", port=80)),
        ("tcp:[::1]:65535", Address("tcp", host="::1", port=65535)),
        ("ws://127.0.0.1:8765/kernel", Address("ws", host="127.0.0.1", port=8765, url_path="/kernel")),
        ("ws://127.0.0.1:8765", Address("ws", host="127.0.0.1", port=8765, url_path="/")),
        ("ws:127.0.0.1:8765/k", Address("ws", host="127.0.0.1", port=8765, url_path="/k")),  # refkernel --listen's spelling
        ("ws://[::1]:9/a/b?c=d", Address("ws", host="::1", port=9, url_path="/a/b?c=d")),
    ],
)
def test_socket_forms(text, want):
    got = parse_address(text)
    assert got == want
    assert parse_address(got.url) == got  # the canonical form reads back the same


@pytest.mark.parametrize(
    "text, words",
    [
        ("tcp:127.0.0.1", "tcp:HOST:PORT needs a port"),
        ("tcp:127.0.0.1:", "tcp:HOST:PORT needs a port"),
        ("tcp::8765", "tcp:HOST:PORT needs a host"),
        ("tcp:127.0.0.1:0", "port '0' is invalid"),
        ("tcp:127.0.0.1:70000", "port '70000' is invalid"),
        ("tcp:127.0.0.1:http", "port 'http' is invalid"),
        ("tcp:127.0.0.1:80/x", "takes no path"),
        ("tcp:10.0.0.5:80", "10.0.0.5 is not a loopback address"),
        ("tcp:example.com:80", "'example.com' is not a loopback address"),
        ("ws://192.168.1.1:80/k", "192.168.1.1 is not a loopback address"),
        ("ws://[2001:db8::1]:80/", "2001:db8::1 is not a loopback address"),
        ("ws://127.0.0.1/k", "ws://HOST:PORT/PATH needs a port"),
        ("wss://127.0.0.1:443/k", "unknown scheme 'wss'"),
        ("http://127.0.0.1:80/", "unknown scheme 'http'"),
        ("unix:", "unix:PATH needs a path"),
    ],
)
def test_bad_socket_forms_name_the_form(text, words):
    with pytest.raises(UsageError) as info:
        parse_address(text)
    assert words in str(info.value) and text in str(info.value), str(info.value)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["kcli", "send", "--socket", "tcp:127.0.0.1", "!batch2"], "tcp:HOST:PORT needs a port"),
        (["kcli", "stats", "--socket", "ws://10.1.2.3:80/k"], "10.1.2.3 is not a loopback address"),
        (["stress", "--socket", "ftp://x", "--quiet"], "unknown scheme 'ftp'"),
        (["batch", "--socket", "tcp:8.8.8.8:53", "--quiet"], "8.8.8.8 is not a loopback address"),
        (["stress", "--listen", "tcp", "--quiet"], "need --launch"),
    ],
)
def test_bad_socket_on_the_command_line_exits_2(argv, words, tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness", *argv, *(["--out", str(tmp_path)] if argv[0] != "kcli" else [])],
                       cwd=REPO, capture_output=True, text=True, timeout=60, env=dict(os.environ, KSTRESS_HOME=str(tmp_path / "home")))
    assert r.returncode == 2 and words in r.stderr, r.stderr
    assert not list(tmp_path.glob("*-*")), "a usage error wrote a run directory"


# --------------------------------------------------------------------------- TCP connect taxonomy


def _free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def test_tcp_refused_and_full_backlog_are_named():
    port = _free_port()
    with pytest.raises(ConnError) as info:
        await open_tcp(Address("tcp", host="127.0.0.1", port=port), time.monotonic() + 2)
    assert info.value.kind == "refused"
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)  # never accepted: the accept queue holds one, loopback drops the SYNs after it
    held = []
    try:
        addr = Address("tcp", host="127.0.0.1", port=srv.getsockname()[1])
        kinds = []
        for _ in range(4):
            try:
                held.append(await open_tcp(addr, time.monotonic() + 0.5))
                kinds.append("connected")
            except ConnError as exc:
                kinds.append(exc.kind)
        assert "backlog_full" in kinds and kinds[0] == "connected", kinds
    finally:
        for s in held:
            s.close()
        srv.close()


async def test_refused_is_retried_until_the_kernel_listens():
    port = _free_port()
    addr = Address("tcp", host="127.0.0.1", port=port)
    retries: list[str] = []
    connecting = asyncio.create_task(open_tcp(addr, time.monotonic() + 10, retry_refused=True, on_retry=retries.append))
    await await_until(lambda: len(retries) >= 2, 5, "two refused attempts")
    assert set(retries) == {"refused"} and not connecting.done()
    server = await asyncio.start_server(lambda r, w: w.close(), "127.0.0.1", port)
    async with server:
        sock = await connecting
        assert sock.getpeername() == ("127.0.0.1", port)
        sock.close()


# --------------------------------------------------------------------------- kernels that misbehave, on TCP and ws


class BadKernel:
    """A protocol-v1 kernel on 127.0.0.1 (TCP, or a WebSocket at /k) that
    authenticates, then misbehaves by ``mode``:
      flood     notify frames for ever
      oversize  answers an input with a frame over the client's read limit
      notjson   answers an input with a line/message that is not JSON
      binary    answers an input with a binary message (ws)
      reset     answers an input with a TCP reset
      mute      reads nothing after the auth
    """

    def __init__(self, transport: str, mode: str) -> None:
        self.transport, self.mode = transport, mode
        self.tasks: set[asyncio.Task] = set()
        self.address = ""

    async def __aenter__(self) -> str:
        if self.transport == "tcp":
            self.server = await asyncio.start_server(self._stream, "127.0.0.1", 0)
            self.address = f"tcp:127.0.0.1:{self.server.sockets[0].getsockname()[1]}"
        else:
            app = web.Application()
            app.router.add_get("/k", self._ws)
            self.runner = web.AppRunner(app, handle_signals=False)
            await self.runner.setup()
            site = web.TCPSite(self.runner, "127.0.0.1", 0)
            await site.start()
            self.address = f"ws://127.0.0.1:{self.runner.addresses[0][1]}/k"
        return self.address

    async def __aexit__(self, *exc: object) -> None:
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        if self.transport == "tcp":
            self.server.close()
            await self.server.wait_closed()
        else:
            await self.runner.cleanup()

    async def _stream(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.tasks.add(asyncio.current_task())
        try:
            await reader.readuntil(b"\n")
            writer.write(json.dumps(ACK).encode() + b"\n")
            if self.mode == "flood":
                note = b'{"type":"notify","text":"' + b"x" * 64 + b'"}\n'
                while True:
                    writer.write(note * 64)
                    await writer.drain()
            if self.mode == "mute":
                await asyncio.Event().wait()
            frame = json.loads(await reader.readuntil(b"\n"))
            if self.mode == "oversize":
                writer.write(b'{"type":"delta","id":"' + frame["id"].encode() + b'","text":"' + b"y" * (READ_LIMIT + 1024) + b'"}\n')
            elif self.mode == "notjson":
                writer.write(b"this is not json\n")
            elif self.mode == "reset":
                writer.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            await writer.drain()
            await reader.read()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.tasks.discard(asyncio.current_task())
            writer.close()

    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        self.tasks.add(asyncio.current_task())
        ws = web.WebSocketResponse(max_msg_size=0)
        await ws.prepare(request)
        try:
            await ws.receive()
            await ws.send_str(json.dumps(ACK))
            if self.mode == "flood":
                note = '{"type":"notify","text":"' + "x" * 64 + '"}'
                while True:
                    await ws.send_str(note)
            if self.mode == "mute":
                request.transport.pause_reading()
                await asyncio.Event().wait()
            frame = json.loads((await ws.receive()).data)
            if self.mode == "oversize":
                await ws.send_str(json.dumps({"type": "delta", "id": frame["id"], "text": "y" * (READ_LIMIT + 1024)}))
            elif self.mode == "notjson":
                await ws.send_str("this is not json")
            elif self.mode == "binary":
                await ws.send_bytes(b'{"type":"response","id":"x","text":""}')
            elif self.mode == "reset":
                request.transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                request.transport.abort()
                return ws
            async for _ in ws:
                pass
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self.tasks.discard(asyncio.current_task())
        return ws


TRANSPORTS = ["tcp", "ws"]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_flood_is_named_on_every_transport(transport):
    async with BadKernel(transport, "flood") as addr:
        async with KernelClient(addr, "tok", connect_timeout_s=5) as c:
            turn = await c.turn("", 20)
    assert turn.outcome == "flood" and "frames that were not this turn's" in turn.conn_error, (turn.outcome, turn.conn_error)


@pytest.mark.parametrize("transport, mode, words", [
    ("tcp", "oversize", "over"),
    ("ws", "oversize", f"over {READ_LIMIT} bytes"),
    ("tcp", "notjson", "not JSON"),
    ("ws", "notjson", "not JSON"),
    ("ws", "binary", "binary WebSocket message"),
])
async def test_a_protocol_error_is_named_on_every_transport(transport, mode, words):
    async with BadKernel(transport, mode) as addr:
        async with KernelClient(addr, "tok", connect_timeout_s=5) as c:
            turn = await c.turn("", 20)
            assert not c.connected
    assert (turn.outcome, turn.conn_kind) == ("conn_error", "protocol") and words in turn.conn_error, (turn.outcome, turn.conn_kind, turn.conn_error)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_reset_mid_turn_is_named(transport):
    async with BadKernel(transport, "reset") as addr:
        async with KernelClient(addr, "tok", connect_timeout_s=5) as c:
            turn = await c.turn("", 20)
    assert (turn.outcome, turn.conn_kind) == ("conn_error", "reset"), (turn.outcome, turn.conn_kind, turn.conn_error)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_kernel_that_never_reads_costs_bounded_time(transport):
    async with BadKernel(transport, "mute") as addr:
        c = await KernelClient(addr, "tok", connect_timeout_s=5).connect()
        try:
            outcomes = []
            for _ in range(64):  # until the socket buffers are full and a send cannot finish
                turn = await c.send("x" * (1 << 20), raw=True, timeout_s=0.5)
                outcomes.append(turn.outcome)
                if turn.outcome != "pending":
                    break
            assert outcomes[-1] == "timeout", outcomes
        finally:
            t0 = time.monotonic()
            await c.aclose()
            closed_in = time.monotonic() - t0
    assert closed_in < 3.5, f"closing a connection whose peer never reads took {closed_in:.2f} s"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connect_and_auth_are_bounded(transport):
    async with BadKernel(transport, "mute") as addr:
        pass  # closed: nobody listens there now
    with pytest.raises(ConnError) as info:
        await KernelClient(addr, "tok", connect_timeout_s=1).connect()
    assert info.value.kind == "refused"
    # a server that accepts and never answers the auth
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    try:
        port = srv.getsockname()[1]
        addr = f"tcp:127.0.0.1:{port}" if transport == "tcp" else f"ws://127.0.0.1:{port}/k"
        t0 = time.monotonic()
        with pytest.raises(ConnError) as info:
            await KernelClient(addr, "tok", connect_timeout_s=0.5).connect()
        assert info.value.kind == "timeout" and time.monotonic() - t0 < 2.5, (info.value.kind, time.monotonic() - t0)
    finally:
        srv.close()


async def test_a_ws_path_the_kernel_does_not_serve_is_refused():
    async with BadKernel("ws", "mute") as addr:
        with pytest.raises(ConnError) as info:
            await KernelClient(addr.replace("/k", "/nothing"), "tok", connect_timeout_s=5).connect()
    assert info.value.kind == "refused" and "HTTP 404" in str(info.value), str(info.value)


# --------------------------------------------------------------------------- a custom adapter over a WebSocket


class OpProtocol(Protocol):
    """A kernel with its own frames ("op"/"rid"), and a length-prefixed byte
    stream: over a WebSocket the message is the frame, so encode/read_frame
    must not be used there."""

    def encode(self, frame):
        raise AssertionError("encode is the byte stream's framing, not a WebSocket's")

    async def read_frame(self, reader):
        raise AssertionError("read_frame is the byte stream's framing, not a WebSocket's")

    async def handshake(self, send, recv, token):
        await send({"op": "hello", "key": token})
        if (await recv()).get("op") != "welcome":
            raise ProtocolError("no welcome")

    def input_frame(self, input_id, text, interrupt=False):
        return {"op": "ask", "rid": input_id, "prompt": text}

    def classify(self, frame):
        kinds = {"chunk": FrameKind.DELTA, "done": FrameKind.TERMINAL, "fail": FrameKind.ERROR}
        return kinds.get(frame.get("op"), FrameKind.OTHER), frame.get("rid")

    def text_of(self, frame):
        return frame.get("answer", "")


async def test_a_custom_adapter_composes_with_the_ws_transport():
    async def handler(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        hello = json.loads((await ws.receive()).data)
        assert hello == {"op": "hello", "key": "tok"}
        await ws.send_str(json.dumps({"op": "welcome"}))
        async for msg in ws:
            ask = json.loads(msg.data)
            nonce = re.findall(r"#(\S+)", ask["prompt"])[-1]
            await ws.send_str(json.dumps({"op": "chunk", "rid": ask["rid"], "answer": "KST "}))
            await ws.send_str(json.dumps({"op": "done", "rid": ask["rid"], "answer": f"KST nonce={nonce} plan=text ok"}))
        return ws

    app = web.Application()
    app.router.add_get("/op", handler)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        from harness.judge.verdict import judge
        from mock.markers import build_plan

        async with KernelClient(f"ws://127.0.0.1:{runner.addresses[0][1]}/op", "tok", OpProtocol(), connect_timeout_s=5) as c:
            turn = await c.turn("", 10)
        assert turn.outcome == "response" and judge(turn, build_plan(turn.text), authenticate=False).passed, (turn.outcome, turn.reply)
        assert [f["op"] for _, f in turn.frames] == ["chunk", "done"]
    finally:
        await runner.cleanup()


def test_the_default_message_framing():
    p = Protocol()
    assert p.encode_message({"type": "stats"}) == '{"type":"stats"}'
    assert p.encode_message({"t": "\ud800"}) == '{"t":"\\ud800"}'  # orjson refuses a lone surrogate; the stdlib writes it
    assert p.decode_message('{"type":"stats","n":1}') == {"type": "stats", "n": 1}
    for data, words in [(b"{}", "binary"), ("[1]", "not an object"), ("{nope", "not JSON")]:
        with pytest.raises(ProtocolError, match=words):
            p.decode_message(data)


# --------------------------------------------------------------------------- the connector's client, on the host


@contextlib.asynccontextmanager
async def connector_to(port: int, tmp_path: Path):
    """harness.sandbox.connector on the host (no namespace), connecting to 127.0.0.1:PORT."""
    path = tmp_path / "c.sock"
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "harness.sandbox.connector", "--unix", str(path), "--port", str(port),
                                                cwd=REPO, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        assert line.decode() == f"connector listening on {path} port {port}\n", line
        yield proc, Address("tcp", host="127.0.0.1", port=port, via=str(path))
    finally:
        if proc.returncode is None:
            proc.terminate()
        await asyncio.wait_for(proc.wait(), 10)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def test_the_dialer_batches_bounds_and_cleans_up(tmp_path):
    accepted = []

    async def hold(reader, writer):
        accepted.append(writer)
        await reader.read()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    fds0 = _fds()
    try:
        async with connector_to(port, tmp_path) as (proc, addr):
            async with Dialer(addr) as d:
                # more than one message's worth of fds, more than the in-flight bound
                n = DIAL_INFLIGHT + 300
                socks = await asyncio.gather(*(d.dial(time.monotonic() + 30) for _ in range(n)))
                assert {s.getpeername() for s in socks} == {("127.0.0.1", port)} and len({s.fileno() for s in socks}) == n
                await await_until(lambda: len(accepted) >= n, 10, f"{n} connections accepted")
                for s in socks:
                    s.close()
                # dials that give up: whatever arrives for them later is closed, not leaked
                before = _fds()
                tasks = [asyncio.create_task(d.dial(time.monotonic() + 30)) for _ in range(300)]
                await asyncio.sleep(0)
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await await_until(lambda: len(accepted) >= n + 300, 10, "the abandoned connections to arrive")
                await await_until(lambda: _fds() <= before, 10, "the abandoned connections' fds to be closed")
                # and the dialer still works
                s = await d.dial(time.monotonic() + 10)
                s.close()
        assert _fds() <= fds0 + 1, (fds0, _fds())  # +1: asyncio's self-pipe may be new
    finally:
        for w in accepted:
            w.close()
        server.close()
        await server.wait_closed()


async def test_a_refused_dial_and_a_dead_connector_are_named(tmp_path):
    port = _free_port()
    async with connector_to(port, tmp_path) as (proc, addr):
        async with Dialer(addr) as d:
            with pytest.raises(ConnError) as info:
                await d.dial(time.monotonic() + 5)
            assert info.value.kind == "refused" and "inside the sandbox" in str(info.value)
            proc.kill()
            await proc.wait()
            with pytest.raises(ConnectorGone):
                await d.dial(time.monotonic() + 5)
    # a connector that was never there: the kstress side failed, exit 5, not a refused kernel
    with pytest.raises(ConnectorGone) as info:
        await KernelClient(addr, "tok", connect_timeout_s=2).connect()
    assert info.value.exit_code == 5


async def test_a_full_backlog_through_the_connector_is_named(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)
    try:
        async with connector_to(srv.getsockname()[1], tmp_path) as (_, addr):
            async with Dialer(addr) as d:
                results = await asyncio.gather(*(d.dial(time.monotonic() + 1.0) for _ in range(4)), return_exceptions=True)
        kinds = sorted("connected" if isinstance(r, socket.socket) else r.kind for r in results)
        for r in results:
            if isinstance(r, socket.socket):
                r.close()
        assert "backlog_full" in kinds and "connected" in kinds, kinds
    finally:
        srv.close()


EMFILE_PROG = r"""
import asyncio, json, resource, sys, time
from harness.wire.transport import Address, ConnError, Dialer
async def main():
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
    addr = Address("tcp", host="127.0.0.1", port=int(sys.argv[2]), via=sys.argv[1])
    async with Dialer(addr) as d:
        got = await asyncio.gather(*(d.dial(time.monotonic() + 10) for _ in range(200)), return_exceptions=True)
    print(json.dumps(sorted({"ok" if not isinstance(g, BaseException) else f"{g.kind}:{g.detail}" for g in got})))
asyncio.run(main())
"""


async def test_running_out_of_fds_here_is_a_capacity_error(tmp_path):
    writers = []
    server = await asyncio.start_server(lambda r, w: writers.append(w), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    try:
        async with connector_to(port, tmp_path) as (_, addr):
            p = await asyncio.create_subprocess_exec(sys.executable, "-c", EMFILE_PROG, addr.via, str(port), cwd=REPO,
                                                     env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
            out, err = await asyncio.wait_for(p.communicate(), 60)
        assert p.returncode == 0, err.decode()
        assert json.loads(out) == ["capacity:EMFILE", "ok"], out
    finally:
        for w in writers:
            w.close()
        server.close()
        await server.wait_closed()


# --------------------------------------------------------------------------- a real kernel on the host's loopback


@pytest.mark.parametrize("listen", ["tcp:127.0.0.1:0", "ws:127.0.0.1:0/kernel"])
async def test_kcli_and_a_scenario_over_a_bare_tcp_or_ws_socket(kernel_factory, listen, tmp_path):
    async with kernel_factory(listen=listen) as k:
        assert re.fullmatch(r"(tcp:|ws://)127\.0\.0\.1:\d+(/kernel)?", k.socket), k.socket
        r = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-m", "harness", "kcli", "send", "--socket", k.socket, "--token", "tok", "!slowbatch3"],
            cwd=REPO, capture_output=True, text=True, timeout=60,
        )
        assert r.returncode == 0 and r.stdout.rstrip().endswith("verdict: ok"), r.stdout + r.stderr
        from harness.scenarios import StressSettings, run_stress

        res = await run_stress(StressSettings(conns=4, inputs=3, out=tmp_path, quiet=True), k.access())
        assert res.exit_code == 0, res.report
        [target] = json.loads((res.dir / "run.json").read_text())["meta"]["targets"]
        assert target["transport"] == k.socket.split(":")[0] and target["socket"] == k.socket


async def test_a_bare_tcp_socket_nobody_listens_on_is_a_usage_error(tmp_path):
    from harness.scenarios import Access, StressSettings, run_stress

    with pytest.raises(UsageError, match="nobody is listening there"):
        await run_stress(StressSettings(conns=1, inputs=1, out=tmp_path, quiet=True), Access(socket=f"tcp:127.0.0.1:{_free_port()}", mock="http://127.0.0.1:9"))
    assert not list(tmp_path.glob("stress-*"))
