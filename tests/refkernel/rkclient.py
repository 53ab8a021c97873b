"""A small protocol-v1 client for the reference kernel's tests (the harness's
own client is ``harness/wire/client.py``; this one stays independent of it so the
kernel's tests do not move when the harness does). It speaks every transport
the kernel listens on: an address is what the ready line names -- a unix
socket path, ``tcp:HOST:PORT`` or ``ws://HOST:PORT/PATH``.

Frames are read by a background task into an inbox; ``take`` removes the
first frame matching a predicate, waiting for it with a deadline, so frames
that interleave (notify, stats, other inputs' deltas) never get lost.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import aiohttp

from mock import markers

_ids = itertools.count(1)


def nonce() -> str:
    return uuid.uuid4().hex[:12]


def text_for(marker: str | None, n: str | None = None) -> tuple[str, str]:
    n = n or nonce()
    return markers.compose(marker, n), n


@dataclass
class Turn:
    id: Any
    text_sent: str
    frames: list[dict[str, Any]] = field(default_factory=list)
    sent_at: float = 0.0
    done_at: float = 0.0
    done_ns: int = 0  # wall clock, comparable with the KST-S/KST-E stamps

    @property
    def terminal(self) -> dict[str, Any]:
        return self.frames[-1]

    @property
    def kind(self) -> str:
        return self.terminal["type"]

    @property
    def text(self) -> str:
        return self.terminal.get("text", "") if self.kind == "response" else ""

    @property
    def error_code(self) -> str | None:
        return self.terminal.get("code") if self.kind == "error" else None

    @property
    def tools(self) -> list[dict[str, Any]]:
        return [f for f in self.frames if f["type"] == "tool"]

    @property
    def deltas(self) -> str:
        return "".join(f["text"] for f in self.frames if f["type"] == "delta")

    @property
    def verdict(self) -> markers.VerdictLine | None:
        return markers.parse_verdict(self.text)

    @property
    def seconds(self) -> float:
        return self.done_at - self.sent_at

    def overlap(self, nonce_: str) -> int:
        stamps = markers.parse_timestamps(self.text, nonce_)
        assert stamps and all(s is not None and e is not None for s, e in stamps.values()), (
            f"no complete KST-S/KST-E timestamps for {nonce_} in {self.text[:500]!r}"
        )
        return markers.peak_overlap((s, e) for s, e in stamps.values())  # type: ignore[misc]


async def open_unix(path: str | Path, deadline_s: float = 5.0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    # A full listen backlog makes connect fail with EAGAIN: retry until the deadline.
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return await asyncio.open_unix_connection(str(path), limit=4 << 20)
        except BlockingIOError:
            pass
        except OSError as exc:
            if exc.errno != errno.EAGAIN:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"connect to {path}: listen backlog still full after {deadline_s} s")
        await asyncio.sleep(0.01)


def tcp_address(address: str) -> tuple[str, int]:
    host, _, port = address.removeprefix("tcp:").rpartition(":")
    return host.strip("[]"), int(port)


async def open_stream(address: str | Path, deadline_s: float = 5.0) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if str(address).startswith("tcp:"):
        host, port = tcp_address(str(address))
        return await asyncio.open_connection(host, port, limit=4 << 20)
    return await open_unix(address, deadline_s)


class KernelConn:
    """One connection over a stream socket (unix, tcp): one frame per line."""

    def __init__(self, reader: asyncio.StreamReader | None, writer: asyncio.StreamWriter | None) -> None:
        self.reader = reader
        self.writer = writer
        self.inbox: list[dict[str, Any]] = []
        self.eof = False
        self._arrived = asyncio.Event()
        self._task = asyncio.ensure_future(self._read())

    @classmethod
    async def open(cls, address: str | Path, token: str | None = "tok", auth: bool = True) -> "KernelConn":
        conn: KernelConn
        if str(address).startswith("ws://"):
            conn = await WsKernelConn.connect(str(address))
        else:
            conn = cls(*await open_stream(address))
        if auth:
            await conn.send({"type": "auth", "token": token})
            ack = await conn.take(lambda f: True, 10, "the auth ack")
            assert ack == {"type": "response", "kind": "auth", "ok": True, "protocol": 1}, ack
        return conn

    def _got(self, frame: dict[str, Any]) -> None:
        self.inbox.append(frame)
        self._arrived.set()

    async def _read(self) -> None:
        assert self.reader is not None
        try:
            while line := await self.reader.readline():
                self._got(json.loads(line))
        except (ConnectionError, ValueError):
            pass
        finally:
            self.eof = True
            self._arrived.set()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.send_raw(json.dumps(frame).encode() + b"\n")

    async def send_raw(self, data: bytes) -> None:
        """Bytes as they are: on a stream, with the newlines they hold."""
        assert self.writer is not None
        self.writer.write(data)
        await self.writer.drain()

    async def send_frame(self, data: bytes) -> None:
        """One frame's bytes, framed as this transport frames them."""
        await self.send_raw(data + b"\n")

    async def take(self, pred: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for k, f in enumerate(self.inbox):
                if pred(f):
                    return self.inbox.pop(k)
            if self.eof:
                raise AssertionError(f"connection closed while waiting for {what}; unclaimed frames: {self.inbox[-5:]}")
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; unclaimed frames: {self.inbox[-5:]}")
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def closed(self, timeout: float = 10) -> None:
        """Wait until the kernel closes the connection."""
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout)
        except asyncio.TimeoutError:
            raise AssertionError(f"the kernel did not close the connection within {timeout} s; frames: {self.inbox[-5:]}") from None

    async def input(self, text: str, id_: Any = None, priority: str | None = None, session: str | None = None) -> Any:
        id_ = next(_ids) if id_ is None else id_
        frame: dict[str, Any] = {"type": "input", "id": id_, "text": text}
        if priority:
            frame["priority"] = priority
        if session is not None:
            frame["session"] = session
        await self.send(frame)
        return id_

    async def collect(self, id_: Any, timeout: float = 30, sent_at: float = 0.0, text: str = "") -> Turn:
        turn = Turn(id=id_, text_sent=text, sent_at=sent_at)
        while True:
            f = await self.take(lambda f: f.get("id") == id_ and f["type"] in ("delta", "tool", "response", "error"), timeout, f"input {id_!r}")
            turn.frames.append(f)
            if f["type"] in ("response", "error"):
                turn.done_at = time.monotonic()
                turn.done_ns = time.time_ns()
                return turn

    async def turn(self, text: str, timeout: float = 30, priority: str | None = None, session: str | None = None) -> Turn:
        t0 = time.monotonic()
        id_ = await self.input(text, priority=priority, session=session)
        return await self.collect(id_, timeout, t0, text)

    async def stats(self, timeout: float = 10) -> dict[str, Any]:
        await self.send({"type": "stats"})
        return await self.take(lambda f: f["type"] == "stats", timeout, "a stats frame")

    async def aclose(self) -> None:
        assert self.writer is not None
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except (ConnectionError, OSError):
            pass
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def __aenter__(self) -> "KernelConn":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class WsKernelConn(KernelConn):
    """One connection over a WebSocket (aiohttp's client): one frame per text message."""

    def __init__(self, session: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.session = session
        self.ws = ws
        self.close_code: int | None = None
        super().__init__(None, None)

    @classmethod
    async def connect(cls, url: str) -> "WsKernelConn":
        session = aiohttp.ClientSession()
        try:
            # the client's own limit well above the kernel's: a test sees what the kernel sends
            ws = await session.ws_connect(url, max_msg_size=8 << 20, autoclose=True)
        except BaseException:
            await session.close()
            raise
        return cls(session, ws)

    async def _read(self) -> None:
        try:
            async for msg in self.ws:
                if msg.type is aiohttp.WSMsgType.TEXT:
                    self._got(json.loads(msg.data))
                else:
                    self._got({"type": "_ws", "ws_type": msg.type.name})  # a kernel sends text only
        except (ConnectionError, ValueError, aiohttp.ClientError):
            pass
        finally:
            self.close_code = self.ws.close_code
            self.eof = True
            self._arrived.set()

    async def send(self, frame: dict[str, Any]) -> None:
        await self.ws.send_str(json.dumps(frame))

    async def send_raw(self, data: bytes) -> None:
        """Bytes as one text message, even when they are not UTF-8."""
        await self.ws.send_frame(data, aiohttp.WSMsgType.TEXT)

    async def send_frame(self, data: bytes) -> None:
        await self.send_raw(data)

    async def send_binary(self, data: bytes) -> None:
        await self.ws.send_bytes(data)

    async def aclose(self) -> None:
        try:
            await self.ws.close()
        except (ConnectionError, aiohttp.ClientError):
            pass
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)
        await self.session.close()
