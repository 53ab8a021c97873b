"""A WebSocket to a kernel, with aiohttp's client, over a socket that is
already connected (harness/wire/transport.py: directly, or through a sandbox's
connector). Imported only for ws addresses: aiohttp costs ~0.1 s to import.

aiohttp dials through its connector's ``_create_connection``; this one hands
back the socket it was given (as aiohttp's own UnixConnector hands back a
``create_unix_connection`` on its path), so aiohttp never dials and the
connect taxonomy and deadline stay the harness's.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
from aiohttp import WebSocketError, WSCloseCode, WSMsgType

from ..aio import finish_shielded, grace
from .protocol import ProtocolError
from .transport import Address, ConnError


class _GivenSocket(aiohttp.BaseConnector):
    """A connector for one connection over a socket connected beforehand."""

    def __init__(self, sock: socket.socket) -> None:
        super().__init__(force_close=True, limit=1)
        self._sock: socket.socket | None = sock
        self.transport: asyncio.Transport | None = None

    async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
        sock, self._sock = self._sock, None
        if sock is None:
            # a redirect, or a retry after a failed upgrade: there is no second socket
            raise aiohttp.ClientConnectionError("the kernel's socket was used already")
        try:
            self.transport, proto = await self._loop.create_connection(self._factory, sock=sock)
        except BaseException:
            sock.close()
            raise
        return proto

    def drop_unused(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


class WsChannel:
    """One WebSocket: ``send(msg)``, ``recv()`` -> the next text or binary
    message's data, ``aclose()`` (bounded), ``abort()``."""

    def __init__(self, session: aiohttp.ClientSession, connector: _GivenSocket, ws: aiohttp.ClientWebSocketResponse, max_msg_size: int) -> None:
        self._session = session
        self._connector = connector
        self.ws = ws
        self.max_msg_size = max_msg_size
        self._closed = False

    @classmethod
    async def open(cls, sock: socket.socket, address: Address, deadline: float, max_msg_size: int, close_s: float) -> "WsChannel":
        """The upgrade on ``sock`` to ws://HOST:PORT/PATH by the deadline
        (time.monotonic()); ConnError when the kernel refuses or drops it. The
        socket is the channel's from here on, closed on every failure."""
        connector = _GivenSocket(sock)
        session = aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar(), auto_decompress=False)
        url = f"http://{address.hostport}{address.url_path}"
        where = str(address)
        try:
            async with asyncio.timeout_at(deadline):
                ws = await session.ws_connect(
                    url, autoclose=True, autoping=True, heartbeat=None, compress=0, max_msg_size=max_msg_size,
                    timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=close_s),
                )
        except BaseException as exc:
            await finish_shielded(session.close())
            connector.drop_unused()
            if isinstance(exc, TimeoutError):
                raise ConnError("timeout", f"{where}: no answer to the WebSocket upgrade before the deadline") from None
            if isinstance(exc, aiohttp.WSServerHandshakeError):
                # a path the kernel serves nothing at (404), or no WebSocket at all there
                raise ConnError("refused", f"{where}: the kernel refused the WebSocket upgrade (HTTP {exc.status} {exc.message})") from None
            if isinstance(exc, (aiohttp.ServerDisconnectedError, ConnectionResetError)):
                raise ConnError("reset", f"{where}: the connection was dropped during the WebSocket upgrade ({exc})") from None
            if isinstance(exc, (aiohttp.ClientError, OSError)):
                raise ConnError("closed", f"{where}: WebSocket upgrade failed: {exc}") from None
            raise
        return cls(session, connector, ws, max_msg_size)

    async def send(self, msg: str | bytes) -> None:
        if isinstance(msg, str):
            await self.ws.send_str(msg)
        else:
            await self.ws.send_bytes(msg)

    async def recv(self) -> str | bytes:
        """The next message's data. EOFError when the kernel closed it;
        ProtocolError for a message over the limit or a broken frame;
        ConnectionResetError when the connection was lost (no close handshake)."""
        msg = await self.ws.receive()
        t = msg.type
        if t is WSMsgType.TEXT or t is WSMsgType.BINARY:
            return msg.data
        if t is WSMsgType.ERROR:
            exc = msg.data
            if isinstance(exc, WebSocketError):
                if exc.code == WSCloseCode.MESSAGE_TOO_BIG:
                    raise ProtocolError(f"kernel sent a WebSocket message over {self.max_msg_size} bytes") from None
                raise ProtocolError(f"kernel broke the WebSocket protocol: {exc}") from None
            raise ConnectionResetError(f"WebSocket connection lost: {exc}")
        if t is WSMsgType.CLOSED and self.ws.close_code == WSCloseCode.ABNORMAL_CLOSURE:
            # aiohttp keeps no cause: the connection ended (reset, or closed) without the close handshake
            raise ConnectionResetError("the WebSocket connection was lost without a close handshake (1006)")
        raise EOFError(f"kernel closed the WebSocket ({t.name.lower()}, code {self.ws.close_code})")

    def abort(self) -> None:
        if self._connector.transport is not None:
            self._connector.transport.abort()

    async def aclose(self, grace_s: float) -> None:
        """The close handshake, bounded: a kernel that never reads (or never
        answers the close) is aborted after ``grace_s``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            if not await grace(self.ws.close(), grace_s):
                self.abort()
        except (ConnectionError, OSError, aiohttp.ClientError):
            self.abort()  # already going: nothing left to say to it
        finally:
            await finish_shielded(self._close_session(grace_s))

    async def _close_session(self, grace_s: float) -> None:
        if not await grace(self._session.close(), grace_s):
            self.abort()
            await self._session.close()
        self._connector.drop_unused()
