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
# Before the 1009 close the rest of an oversized WebSocket message is read and
# discarded, at most this long and this much (a client may declare 2**63 bytes
# and send them forever); past either bound the close goes ahead regardless.
# The time bound sits inside WS_CLOSE_TIMEOUT, so the close frame still has a
# second to go out.
WS_DRAIN_TIMEOUT = 1.0
WS_DRAIN_MAX = 16 * MAX_FRAME


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


class _OversizeWatch(asyncio.Protocol):
    """Sits between a WebSocket's transport and aiohttp's protocol, passing
    every callback on unchanged, and follows the client's frames by their
    headers alone (RFC 6455 5.2) to see where a message over MAX_FRAME ends.

    aiohttp refuses such a message at its header and discards whatever
    follows. If the kernel then closed at once, the rest of the message would
    still be on its way: Linux answers data for a closed socket with a RST,
    and a client still sending meets the RST before it has read the close
    frame (it sees 1006, not 1009). So the close waits for ``ended`` -- the
    last byte of that message has been read -- or for the drain's bounds.
    The limit rule is aiohttp's (a data message's payload, its fragments
    summed, over MAX_FRAME); were the two ever to differ, the close would only
    wait out WS_DRAIN_TIMEOUT."""

    def __init__(self, inner: asyncio.BaseProtocol) -> None:
        self.inner = inner
        self.ended = asyncio.Event()
        self._head = b""  # a frame header split across reads
        self._skip = 0  # payload bytes of the current frame still to come
        self._ends_message = False  # the current frame is the last of a data message
        self._size = 0  # payload bytes of the current data message so far
        self._over = False
        self._drained = 0  # bytes read since the message went over the limit

    def data_received(self, data: bytes) -> None:
        if not self.ended.is_set():
            self._follow(data)
        self.inner.data_received(data)  # type: ignore[attr-defined]

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()  # type: ignore[attr-defined]

    def connection_lost(self, exc: Exception | None) -> None:
        self.ended.set()  # nothing more will come
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()

    def _follow(self, data: bytes) -> None:
        if self._over:
            self._drained += len(data)
            if self._drained > WS_DRAIN_MAX:
                self.ended.set()
                return
        if self._head:
            data, self._head = self._head + data, b""
        pos = 0
        while True:
            step = min(self._skip, len(data) - pos)
            self._skip -= step
            pos += step
            if self._skip:
                return  # the frame goes on in a later read
            if self._ends_message and self._over:
                self.ended.set()
                return
            pos = self._header(data, pos)
            if pos < 0:
                return

    def _header(self, data: bytes, pos: int) -> int:
        """Take the frame header at ``pos``; the position after it, or -1 when
        the header is not all there yet (kept for the next read)."""
        if len(data) - pos < 2:
            self._head = data[pos:]
            return -1
        first, second = data[pos], data[pos + 1]
        length = second & 0x7F
        extended = 2 if length == 126 else 8 if length == 127 else 0
        end = pos + 2 + extended + (4 if second & 0x80 else 0)
        if len(data) < end:
            self._head = data[pos:]
            return -1
        if extended:
            length = int.from_bytes(data[pos + 2:pos + 2 + extended], "big")
        opcode = first & 0x0F
        self._skip = length
        self._ends_message = False
        if opcode < 0x8:  # a data frame; control frames may come between a message's fragments
            if opcode != 0x0:  # not a continuation: a new message
                self._size = 0
            self._size += length
            self._over = self._over or self._size > MAX_FRAME
            self._ends_message = bool(first & 0x80)
        return end


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

    def __init__(self, ws: _WebSocket, transport: asyncio.Transport | None, watch: _OversizeWatch | None) -> None:
        self.ws = ws
        self.transport = transport
        self._watch = watch
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

    async def _drain_oversized(self) -> None:
        # See _OversizeWatch: the 1009 goes out once the client has sent the
        # whole message it was told is too large.
        if self._watch is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(WS_DRAIN_TIMEOUT):
                await self._watch.ended.wait()

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
            if self._close_code == WSCloseCode.MESSAGE_TOO_BIG:
                await self._drain_oversized()
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
        transport = request.transport
        watch = None
        if transport is not None:
            # In place before the 101 goes out, so it sees the first byte of the first frame
            # (a client may send nothing more until it has the 101: RFC 6455 4.1).
            watch = _OversizeWatch(transport.get_protocol())
            transport.set_protocol(watch)
        await ws.prepare(request)
        assert self._handle is not None
        await self._handle(WsChannel(ws, transport, watch))  # type: ignore[arg-type]
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
