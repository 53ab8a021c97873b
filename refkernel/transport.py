"""Transports: how protocol-v1 frames reach the kernel and leave it.

A *listener* owns the listening socket -- a unix socket file, a TCP port, or a
WebSocket endpoint served by aiohttp's web server -- and hands every accepted
client to the kernel as a *channel*. A channel only frames: it reads one
frame's bytes, queues one frame's bytes for sending, says how many bytes are
still unsent, closes (after what is queued) or aborts. Everything else -- auth,
dispatch, scheduling, the slow-reader rule, shutdown -- is ``kernel.Connection``,
the same for every transport.

    listener.prepare()             checks that need no event loop (the socket path)
    await listener.start(handle)   bound; ``listener.bound`` names the real address
    await listener.stop_accepting()
    await listener.aclose()        idempotent: the unix socket file goes, aiohttp is cleaned up
"""

from __future__ import annotations

import abc
import asyncio
import collections
import contextlib
import errno
import logging
import os
import socket
import stat
from typing import Awaitable, Callable

from aiohttp import WebSocketError, WSCloseCode, WSMsgType, web

from .errors import ConfigError, SocketInUse
from .settings import MAX_FRAME, Listen

log = logging.getLogger("refkernel")

LISTEN_BACKLOG = 4096
WS_CLOSE_TIMEOUT = 2.0  # a WebSocket close (flushing what is queued, the close handshake) takes at most this


class Closed(Exception):
    """The client went away (EOF, reset, a close message)."""


class FrameTooLarge(Exception):
    """A frame longer than MAX_FRAME: its end cannot be found safely."""


class NotAFrame(Exception):
    """A message that cannot hold a frame (a binary WebSocket message); the
    text says what to send instead."""


class Channel(abc.ABC):
    @abc.abstractmethod
    async def read(self) -> bytes:
        """The next frame's bytes; raises Closed, FrameTooLarge or NotAFrame."""

    @abc.abstractmethod
    def write(self, data: bytes) -> None:
        """Queue one frame (without framing); never blocks."""

    @abc.abstractmethod
    def unsent(self) -> int:
        """Bytes queued and not yet handed to the client's socket."""

    @abc.abstractmethod
    def is_closing(self) -> bool: ...

    @abc.abstractmethod
    def close(self) -> None:
        """Send what is queued, then close."""

    @abc.abstractmethod
    def abort(self) -> None:
        """Close now, dropping what is queued."""

    async def drained(self) -> None:
        """Wait until a ``close()`` has finished, where that takes a while."""


Handler = Callable[[Channel], Awaitable[None]]


# --- newline-delimited JSON on a stream socket (unix, tcp) -----------------------------


class StreamChannel(Channel):
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer  # held: a StreamWriter that is collected closes its transport
        self.transport = writer.transport

    async def read(self) -> bytes:
        try:
            return await self.reader.readuntil(b"\n")
        except asyncio.LimitOverrunError:
            raise FrameTooLarge from None
        except (asyncio.IncompleteReadError, ConnectionError):
            raise Closed from None  # a partial last line is ignored

    def write(self, data: bytes) -> None:
        self.transport.write(data + b"\n")

    def unsent(self) -> int:
        return self.transport.get_write_buffer_size()

    def is_closing(self) -> bool:
        return self.transport.is_closing()

    def close(self) -> None:
        self.transport.close()  # the transport sends what is buffered first

    def abort(self) -> None:
        self.transport.abort()


class _StreamListener:
    bound: Listen

    def __init__(self, spec: Listen) -> None:
        self.spec = spec
        self.bound = spec
        self._server: asyncio.AbstractServer | None = None

    def prepare(self) -> None:
        pass

    @staticmethod
    def _on_client(handle: Handler) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def client(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await handle(StreamChannel(reader, writer))

        return client

    async def stop_accepting(self) -> None:
        if self._server is not None:
            self._server.close()

    async def aclose(self) -> None:
        await self.stop_accepting()


class UnixListener(_StreamListener):
    """A socket file, 0600 from its first instant; a stale one (nobody
    listening) is replaced, a live one refused; removed at close if still ours."""

    def __init__(self, spec: Listen) -> None:
        super().__init__(spec)
        assert spec.path is not None
        self.path = spec.path
        self._ino: tuple[int, int] | None = None

    def prepare(self) -> None:
        path = self.path
        parent = path.parent
        if not parent.exists():
            # Created private; an existing directory is used as it is, never widened.
            try:
                parent.mkdir(mode=0o700, parents=True)
            except OSError as exc:
                raise ConfigError(f"socket={str(path)!r}: cannot create its directory ({exc.strerror})") from None
        try:
            st = path.lstat()
        except FileNotFoundError:
            return
        if not stat.S_ISSOCK(st.st_mode):
            raise ConfigError(f"socket={str(path)!r} exists and is not a socket; remove it or pick another socket path")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except (ConnectionRefusedError, FileNotFoundError):
            log.info("replacing stale socket %s (nobody listens on it)", path)
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
            return
        except (BlockingIOError, socket.timeout):
            pass  # a full listen backlog: someone is very much alive there
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN,):
                raise ConfigError(f"socket={str(path)!r}: cannot check whether it is in use ({exc.strerror})") from None
        finally:
            probe.close()
        raise SocketInUse(f"socket={str(path)!r} is in use by a live kernel; stop it first or pick another socket path")

    async def start(self, handle: Handler) -> None:
        old = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(
                self._on_client(handle), path=str(self.path), limit=MAX_FRAME, backlog=LISTEN_BACKLOG
            )
        except OSError as exc:
            raise ConfigError(f"socket={str(self.path)!r}: cannot listen there ({exc.strerror})") from None
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        st = self.path.stat()
        self._ino = (st.st_dev, st.st_ino)

    async def stop_accepting(self) -> None:
        await super().stop_accepting()
        self._remove()

    def _remove(self) -> None:
        # Only our own: a successor may already have bound the same path.
        if self._ino is None:
            return
        with contextlib.suppress(OSError):
            st = self.path.lstat()
            if (st.st_dev, st.st_ino) == self._ino:
                self.path.unlink()
        self._ino = None


def _listen_error(spec: Listen, exc: OSError) -> ConfigError:
    return ConfigError(f"listen={str(spec)!r}: cannot listen there ({exc.strerror or exc}); "
                       "pick another address or port (0 picks a free one)")


class TcpListener(_StreamListener):
    async def start(self, handle: Handler) -> None:
        try:
            self._server = await asyncio.start_server(
                self._on_client(handle), self.spec.host, self.spec.port, limit=MAX_FRAME, backlog=LISTEN_BACKLOG
            )
        except OSError as exc:
            raise _listen_error(self.spec, exc) from None
        self.bound = self.spec.with_port(self._server.sockets[0].getsockname()[1])


# --- one JSON object per text message on a WebSocket ----------------------------------


class _WebSocket(web.WebSocketResponse):
    # aiohttp closes the socket itself, from inside receive(), when a message is
    # over max_msg_size, before the kernel can say why. Over a stream socket the
    # kernel answers too_large and then closes, so that first close is held
    # back: the channel sends the error frame and closes afterwards.
    _held = False

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        if code == WSCloseCode.MESSAGE_TOO_BIG and not self._held:
            self._held = True
            return False
        return await super().close(code=code, message=message, drain=drain)


class WsChannel(Channel):
    """aiohttp's sends are coroutines, a kernel's frames are written from
    plain callbacks: frames wait in a queue that one task (the pump) writes
    out in order; ``unsent`` counts that queue and the socket's own buffer."""

    def __init__(self, ws: _WebSocket, transport: asyncio.Transport | None) -> None:
        self.ws = ws
        self.transport = transport
        self._out: collections.deque[bytes] = collections.deque()
        self._queued = 0
        self._wake = asyncio.Event()
        self._closing = False
        self._close_code = WSCloseCode.OK
        self._give_up: asyncio.TimerHandle | None = None
        self._pump = asyncio.ensure_future(self._run_pump())
        self._pump.add_done_callback(self._pump_done)

    async def read(self) -> bytes:
        msg = await self.ws.receive()
        if msg.type is WSMsgType.TEXT:
            return msg.data if isinstance(msg.data, bytes) else msg.data.encode("utf-8", "surrogatepass")
        if msg.type is WSMsgType.BINARY:
            raise NotAFrame("a binary WebSocket message is not a frame; send each JSON object as one text message")
        if msg.type is WSMsgType.ERROR and isinstance(msg.data, WebSocketError) and msg.data.code == WSCloseCode.MESSAGE_TOO_BIG:
            self._close_code = WSCloseCode.MESSAGE_TOO_BIG
            raise FrameTooLarge
        raise Closed  # CLOSE, CLOSING, CLOSED, or any other error

    def write(self, data: bytes) -> None:
        self._out.append(data)
        self._queued += len(data)
        self._wake.set()

    def unsent(self) -> int:
        buffered = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return self._queued + buffered

    def is_closing(self) -> bool:
        return self._closing or self.transport is None or self.transport.is_closing()

    def close(self) -> None:
        if not self._closing:
            self._closing = True
            self._wake.set()
            # Flushing to a client that does not read, or one that never answers
            # the close frame, would wait forever inside aiohttp: past the bound
            # the close becomes an abort.
            self._give_up = asyncio.get_running_loop().call_later(WS_CLOSE_TIMEOUT, self.abort)

    def abort(self) -> None:
        self._closing = True
        self._pump.cancel()
        if self.transport is not None:
            self.transport.abort()

    def _pump_done(self, _: asyncio.Future) -> None:
        if self._give_up is not None:
            self._give_up.cancel()

    async def drained(self) -> None:
        try:
            await asyncio.wait([self._pump])
        except asyncio.CancelledError:
            self.abort()  # the server is cancelling its handlers: nothing may stay behind
            raise

    async def _run_pump(self) -> None:
        try:
            while True:
                while self._out:
                    data = self._out.popleft()
                    self._queued -= len(data)
                    await self.ws.send_frame(data, WSMsgType.TEXT)
                if self._closing:
                    break
                self._wake.clear()
                await self._wake.wait()
            await self.ws.close(code=self._close_code)
        except (ConnectionError, RuntimeError) as exc:  # the client is gone; aiohttp says so either way
            log.debug("websocket send stopped: %r", exc)
            if self.transport is not None:
                self.transport.abort()


class WsListener:
    def __init__(self, spec: Listen, shutdown_timeout: float) -> None:
        self.spec = spec
        self.bound = spec
        self._shutdown_timeout = shutdown_timeout
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._handle: Handler | None = None

    def prepare(self) -> None:
        pass

    async def start(self, handle: Handler) -> None:
        self._handle = handle
        app = web.Application()
        app.router.add_get(self.spec.url_path, self._serve)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=self._shutdown_timeout)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.spec.host, self.spec.port, backlog=LISTEN_BACKLOG)
        try:
            await self._site.start()
        except OSError as exc:
            raise _listen_error(self.spec, exc) from None
        self.bound = self.spec.with_port(self._runner.addresses[0][1])

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        # One byte over the limit is refused (aiohttp's test is size >= max_msg_size).
        # No compression: a frame's size on the wire is its size in memory.
        ws = _WebSocket(max_msg_size=MAX_FRAME + 1, compress=False, decode_text=False, timeout=WS_CLOSE_TIMEOUT)
        await ws.prepare(request)
        assert self._handle is not None
        await self._handle(WsChannel(ws, request.transport))  # type: ignore[arg-type]
        return ws

    async def stop_accepting(self) -> None:
        if self._site is not None:
            site, self._site = self._site, None
            await site.stop()

    async def aclose(self) -> None:
        await self.stop_accepting()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()  # cancels what is left of the handlers after shutdown_timeout


def listener_for(spec: Listen, shutdown_timeout: float) -> UnixListener | TcpListener | WsListener:
    if spec.scheme == "unix":
        return UnixListener(spec)
    if spec.scheme == "tcp":
        return TcpListener(spec)
    return WsListener(spec, shutdown_timeout)
