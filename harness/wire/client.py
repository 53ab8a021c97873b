"""KernelClient: one connection to a kernel, on a unix socket, TCP or a WebSocket.

Connect (harness/wire/transport.py: a unix connect retried on EAGAIN -- a full
listen backlog makes a non-blocking unix connect fail with EAGAIN, and
asyncio's open_unix_connection would hand back an unconnected socket -- a
loopback TCP connect, or one opened inside a sandbox by its connector), consume
the auth ack before anything else, send inputs with a unique nonce, and collect
each turn's frames until its terminal frame, an error frame for it, a
deadline, or the connection's end. Over a byte stream the adapter's
``encode``/``read_frame`` frame; over a WebSocket each message is one frame
(``encode_message``/``decode_message``). Everything above the frames is the
same on every transport.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import json
import os
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from mock.markers import compose

from ..aio import grace
from .protocol import MAX_FRAME, FrameKind, HandshakeError, Protocol, ProtocolError, parse_line
from .transport import CAPACITY_ERRNOS, Address, ConnError, Dialer, open_socket, open_unix, parse_address  # noqa: F401 - re-exported

# The default adapter's frame limit is the read limit: a longer line is a
# protocol error, and a stream reader holds at most twice its limit before it
# stops reading the socket (an adapter with a larger max_frame gets its own)
READ_LIMIT = MAX_FRAME

# What one connection may hold, whatever a kernel sends (docs/results.md, "flood").
# Sizes are the frames' bytes on the wire, so a few large frames count as much
# as many small ones: before, 256 stashed frames of 512 KiB were 128 MiB a connection.
NOTIFY_KEPT = 16  # notify frames kept (all are counted)
NOTIFY_FRAME_KEPT = 4 << 10  # a longer notify frame is counted, not kept
STASH_MAX = 256  # frames for inputs nobody waits for (late or unknown ids), kept until read
STASH_BYTES = 1 << 20  # and their bytes: beyond, the oldest go (the newest is always kept)
TURN_FRAMES_KEPT = 1000  # frames of one turn kept for the record (all are counted)
TURN_BYTES_MAX = 2 << 20  # bytes of one turn's frames before its last: beyond, the turn is a flood
FLOOD_FRAMES = 10_000  # frames not of the awaited turn while waiting for it: a flood
FLOOD_BYTES = 16 << 20  # or their bytes: sixteen frames at the frame limit
CLOSE_GRACE_S = 1.0  # a connection whose peer never reads is aborted after this


class _CountingReader(asyncio.StreamReader):
    """A StreamReader that counts the bytes fed to it: less what its buffer
    still holds, that is what was taken from it -- the wire size of each frame,
    whatever the adapter's framing. (A property for it cost 1 us a frame, 10%
    of reading one; the client reads the buffer's length itself.)"""

    received = 0

    def feed_data(self, data: bytes) -> None:
        self.received += len(data)
        super().feed_data(data)

    @property
    def buffer(self) -> bytearray:
        return self._buffer  # emptied and refilled in place, never replaced


_recv = threading.local()  # each thread's receive buffer (an event loop runs in one thread)
RECV_BYTES = 256 * 1024  # what the selector transport asks recv() for


class _BufferedStreamProtocol(asyncio.StreamReaderProtocol, asyncio.BufferedProtocol):
    """A StreamReaderProtocol the transport reads into through one buffer
    per thread (recv_into), instead of recv(256 KiB): a fresh 256 KiB bytes
    per read is an mmap and munmap for glibc's malloc, ~25 us a read when a
    frame is 100 bytes (issue 25: 29 us against 4.5 us a send+read on a
    socketpair). Each read is copied into the stream reader's buffer before
    the next read, on the same thread, can reuse it; reads are at most as
    large as before, so the frames come out the same."""

    def get_buffer(self, sizehint: int) -> memoryview:
        view = getattr(_recv, "view", None)
        if view is None:
            view = _recv.view = memoryview(bytearray(RECV_BYTES))
        return view

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(_recv.view[:nbytes])


@dataclass(slots=True)
class Turn:
    """Everything one input produced. Times are time.monotonic() seconds."""

    input_id: str
    text: str
    nonce: str
    interrupt: bool = False
    t_sent: float = 0.0
    t_scheduled: float | None = None
    t_first: float | None = None
    t_done: float | None = None
    frames: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    deltas: list[str] = field(default_factory=list)
    response_text: str | None = None
    duplicate: bool = False
    error_code: str | None = None
    error_message: str | None = None
    outcome: str = "pending"  # response | error | timeout | conn_error | closed | flood | cancelled
    conn_error: str | None = None  # what happened, for people
    conn_kind: str | None = None  # a ConnError kind, for the verdict
    frames_dropped: int = 0  # frames of this turn beyond TURN_FRAMES_KEPT: counted, not kept
    text_chars: int = 0
    bytes: int = 0  # of its frames on the wire (all but the one that ended it)
    # the tool calls an agent protocol showed (AG-UI's TOOL_CALL_*), by call id:
    # {name, args, start, end, results}; None where the protocol shows none
    # (protocol v1's tool frames stay frames), and the judge checks nothing
    tools_shown: dict[str, dict[str, Any]] | None = None
    # a turn kstress cancelled (an interrupt over an agent protocol): {"t": the
    # monotonic time the cancel went out, "answer": what a cancel request was
    # answered (A2A) or None}; {"t": None, "why": ...} when the turn ended first
    cancel: dict[str, Any] | None = None

    def lost(self, kind: str, message: str) -> None:
        self.outcome, self.conn_kind, self.conn_error = "conn_error", kind, message

    @property
    def reply(self) -> str:
        """The answer's text: the terminal frame's text, else the streamed deltas."""
        if self.response_text:
            return self.response_text
        return "".join(self.deltas)

    @property
    def latency_s(self) -> float | None:
        return None if self.t_done is None else self.t_done - self.t_sent

    @property
    def first_frame_s(self) -> float | None:
        return None if self.t_first is None else self.t_first - self.t_sent


class _Deadline:
    """A turn's deadline as asyncio.timeout_at keeps it (the task cancelled
    when it passes, the CancelledError turned into TimeoutError unless someone
    else cancelled too), on one timer per connection moved lazily: the timer
    is left running between turns, and when it fires before the current
    turn's deadline it is set again for that one. A timer made and cancelled
    per turn (asyncio.timeout_at) was ~10% of the driver's load phase through
    an instant kernel (issue 25, py-spy); this makes one per timeout_s.
    One task at a time: collect() falls back to asyncio.timeout_at when
    another task is collecting on the same connection."""

    __slots__ = ("task", "at", "handle", "fired", "cancelling", "_when")

    def __init__(self) -> None:
        self.task: asyncio.Task | None = None
        self.at = 0.0
        self.handle: asyncio.TimerHandle | None = None
        self.fired = False
        self.cancelling = 0
        self._when = 0.0

    def until(self, when: float) -> "_Deadline":
        """``async with deadline.until(t):`` as ``async with asyncio.timeout_at(t):``."""
        self._when = when
        return self

    async def __aenter__(self) -> None:
        task = asyncio.current_task()
        assert task is not None and self.task is None
        self.arm(task, self._when)

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if self.disarm(exc_type):
            raise TimeoutError from exc

    def arm(self, task: asyncio.Task, at: float) -> None:
        self.task, self.at, self.fired, self.cancelling = task, at, False, task.cancelling()
        h = self.handle
        if h is None or h.when() > at:
            if h is not None:
                h.cancel()
            self.handle = asyncio.get_running_loop().call_at(at, self._fire)

    def _fire(self) -> None:
        self.handle = None
        task = self.task
        if task is None:
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self.at:
            self.handle = loop.call_at(self.at, self._fire)
            return
        self.fired = True
        task.cancel()

    def disarm(self, exc_type: type[BaseException] | None) -> bool:
        """True when the body ended by this deadline's own cancellation (the
        turn timed out), as asyncio.Timeout.__aexit__ decides it."""
        task, self.task = self.task, None
        if not self.fired:
            return False
        self.fired = False
        assert task is not None
        return task.uncancel() <= self.cancelling and exc_type is asyncio.CancelledError

    def close(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.task = None


_seq = itertools.count()
# pid and a random salt, once per process: two syscalls per input were a
# measurable part of the harness's cost per turn, and a reused pid still gets
# other nonces than the process that had it before
_NONCE_TAG = (os.getpid(), os.urandom(2).hex())


def new_nonce(prefix: str = "k") -> str:
    """Unique per process and run: a kernel's replay guard drops identical input
    text, so every input carries one."""
    pid, salt = _NONCE_TAG
    return f"{prefix}{pid:x}x{next(_seq):x}{salt}"


def failed_turn(marker: str, exc: "ConnError") -> Turn:
    """The record of an input that could not be delivered: it was attempted,
    so it counts, as a conn_error."""
    nonce = new_nonce("f")
    turn = Turn(input_id=nonce, text=compose(marker or None, nonce), nonce=nonce)
    turn.lost(exc.kind, str(exc))
    turn.t_sent = time.monotonic()
    return turn


class KernelClient:
    """``async with KernelClient(address, token) as c: turn = await c.turn("!batch4")``

    ``address``: an :class:`Address`, a string in one of the ``--socket``
    forms, or a path (a unix socket). ``dialer``: the connector client to
    share when the address is inside a sandbox (else one per connect)."""

    def __init__(
        self,
        address: Address | str | os.PathLike,
        token: str | None = None,
        protocol: Protocol | None = None,
        connect_timeout_s: float = 10.0,
        nonce_prefix: str = "k",
        retry_refused: bool = False,
        dialer: Dialer | None = None,
    ) -> None:
        if isinstance(address, Address):
            self.address = address
        elif isinstance(address, str):
            self.address = parse_address(address)
        else:
            self.address = Address("unix", path=os.fspath(address))
        self.path = str(self.address)  # what every message calls it
        self.token = token
        self.protocol = protocol or Protocol()
        self.connect_timeout_s = connect_timeout_s
        self.nonce_prefix = nonce_prefix
        self.retry_refused = retry_refused
        self.dialer = dialer
        self.notifications: collections.deque[dict[str, Any]] = collections.deque(maxlen=NOTIFY_KEPT)
        self.notify_count = 0
        self.stash_dropped = 0
        self._stashed = 0
        self._stashed_bytes = 0
        self._size = 0  # the wire size of the frame read last
        self._reader: _CountingReader | None = None
        self._rbuf = bytearray()  # the reader's buffer
        self._writer: asyncio.StreamWriter | None = None
        self._ws: Any = None  # a wsconn.WsChannel
        self._stash: dict[str, list[tuple[float, dict[str, Any]]]] = {}
        self._stash_sizes: dict[str, list[int]] = {}  # the wire size of each stashed frame
        self._stats: list[dict[str, Any]] = []
        self._read_lock = asyncio.Lock()
        self._eof = False
        self._closed = False
        self._deadline = _Deadline()
        # protocol v1's own framing (not an adapter's read_frame): read here, parsed with orjson
        self._v1_lines = type(self.protocol).read_frame is Protocol.read_frame

    # --- lifecycle ---------------------------------------------------------

    async def connect(self) -> "KernelClient":
        deadline = time.monotonic() + self.connect_timeout_s
        sock = await open_socket(self.address, deadline, self.retry_refused, self.dialer)
        try:
            if self.address.scheme == "ws":
                await self._open_ws(sock, deadline)
            else:
                await self._open_stream(sock)
        except BaseException:
            sock.close()
            raise
        try:
            remaining = max(0.001, deadline - time.monotonic())
            await asyncio.wait_for(self.protocol.handshake(self._send, self._recv_raw, self.token), remaining)
        except asyncio.TimeoutError:
            await self.aclose()
            raise ConnError("timeout", f"{self.path}: no auth answer within {self.connect_timeout_s:.1f}s") from None
        except HandshakeError as exc:
            await self.aclose()
            raise ConnError("auth", f"{self.path}: {exc}") from None
        except (ProtocolError, ConnectionError, EOFError) as exc:
            await self.aclose()
            raise ConnError("closed", f"{self.path}: handshake failed: {exc}") from None
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _open_stream(self, sock: Any) -> None:
        """asyncio.open_(unix_)connection, with a reader that counts bytes."""
        loop = asyncio.get_running_loop()
        reader = _CountingReader(limit=self.protocol.max_frame, loop=loop)
        proto = _BufferedStreamProtocol(reader, loop=loop)
        if self.address.scheme == "unix":
            transport, _ = await loop.create_unix_connection(lambda: proto, sock=sock)
        else:
            transport, _ = await loop.create_connection(lambda: proto, sock=sock)
        self._reader, self._writer = reader, asyncio.StreamWriter(transport, proto, reader, loop)
        self._rbuf = reader.buffer

    async def _open_ws(self, sock: Any, deadline: float) -> None:
        from .wsconn import WsChannel  # aiohttp loads only for a WebSocket kernel

        self._ws = await WsChannel.open(sock, self.address, deadline, self.protocol.max_frame, CLOSE_GRACE_S)
        # bound per instance: the byte-stream path keeps its methods, and no
        # frame on either path pays a test of which transport it is on
        self._send = self._ws_send  # type: ignore[method-assign]
        self._recv_raw = self._ws_recv  # type: ignore[method-assign]

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._deadline.close()
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
            try:
                # bounded: a peer that never reads would hold unsent bytes, and the close, forever
                if not await grace(writer.wait_closed(), CLOSE_GRACE_S):
                    writer.transport.abort()
            except (ConnectionError, OSError):
                pass  # the peer already went away; nothing left to release
        ws, self._ws = self._ws, None
        if ws is not None:
            await ws.aclose(CLOSE_GRACE_S)

    async def __aenter__(self) -> "KernelClient":
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def connected(self) -> bool:
        return (self._writer is not None or self._ws is not None) and not self._eof and not self._closed

    # --- frames --------------------------------------------------------------

    async def _send(self, frame: dict[str, Any]) -> None:
        self._write(frame)
        await self._drain()

    def _write(self, frame: dict[str, Any]) -> bool:
        """Write one frame on the byte stream. True when the transport holds
        none of it and is not closing: then the input is sent, and drain()
        would return without a wait or an error (its protocol is paused only
        while the buffer is past its low-water mark; the reader's exception and
        a lost connection come with connection_lost, which a transport calls
        only once it is closing), so send() neither drains nor puts a deadline
        around it: the asyncio.timeout was ~6% of the driver's load phase
        through an instant kernel, drain()'s three coroutines ~2% (issue 25,
        py-spy)."""
        if self._writer is None:
            raise ConnError("closed", f"{self.path}: connection is closed")
        try:
            self._writer.write(self.protocol.encode(frame))
        except (ConnectionError, OSError) as exc:
            self._eof = True
            raise ConnError("reset", f"{self.path}: connection lost while sending ({exc})") from None
        transport = self._writer.transport
        return not transport.is_closing() and not transport.get_write_buffer_size()

    async def _drain(self) -> None:
        assert self._writer is not None
        try:
            await self._writer.drain()
        except (ConnectionError, OSError) as exc:
            self._eof = True
            raise ConnError("reset", f"{self.path}: connection lost while sending ({exc})") from None

    async def _recv_raw(self) -> dict[str, Any]:
        reader, buf = self._reader, self._rbuf
        assert reader is not None
        before = reader.received - len(buf)
        if self._v1_lines:  # Protocol.read_frame, inline: one coroutine a frame fewer
            try:
                line: bytes | None = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as exc:
                line = exc.partial if exc.partial.strip() else None
            except asyncio.LimitOverrunError:
                raise ProtocolError(f"kernel sent a frame over {self.protocol.max_frame} bytes without a newline") from None
            frame = None if line is None else parse_line(line)
        else:
            frame = await self.protocol.read_frame(reader)
        self._size = reader.received - len(buf) - before
        if frame is None:
            self._eof = True
            raise EOFError("kernel closed the connection")
        return frame

    async def _ws_send(self, frame: dict[str, Any]) -> None:
        if self._ws is None:
            raise ConnError("closed", f"{self.path}: connection is closed")
        try:
            await self._ws.send(self.protocol.encode_message(frame))
        except (ConnectionError, OSError) as exc:
            self._eof = True
            raise ConnError("reset", f"{self.path}: connection lost while sending ({exc})") from None

    async def _ws_recv(self) -> dict[str, Any]:
        assert self._ws is not None
        try:
            data = await self._ws.recv()
        except EOFError:
            self._eof = True
            raise
        self._size = len(data)
        return self.protocol.decode_message(data)

    def _abort(self) -> None:
        if self._writer is not None:
            self._writer.transport.abort()
        elif self._ws is not None:
            self._ws.abort()

    async def _pump(self, want: Any, deadline: float) -> None:
        """Read frames, stashing each by input id, until ``want()`` is true, EOF,
        or the deadline (time.monotonic(), the loop's clock)."""
        # one timeout for the whole wait, not one per frame: asyncio.wait_for
        # makes a task per call, a large part of the harness's cost per turn
        async with asyncio.timeout_at(deadline):
            while not want():
                if self._eof:
                    return
                async with self._read_lock:
                    if want():
                        return
                    try:
                        frame = await self._recv_raw()
                    except EOFError:
                        return
                    now = time.monotonic()
                    kind, fid = self.protocol.classify(frame)
                    if kind is FrameKind.NOTIFY:
                        self._notify(frame)
                    elif kind is FrameKind.STATS:
                        self._stats.append(frame)
                    else:
                        self._stash_frame(fid, now, frame, self._size)

    def _notify(self, frame: dict[str, Any]) -> None:
        self.notify_count += 1
        if self._size <= NOTIFY_FRAME_KEPT:
            self.notifications.append(frame)

    def _stash_frame(self, fid: str | None, t: float, frame: dict[str, Any], size: int) -> None:
        """A frame for an input nobody waits for now: kept (bounded) until its
        turn collects it; beyond STASH_MAX frames or STASH_BYTES the oldest
        inputs' frames go, counted."""
        while self._stash and (self._stashed >= STASH_MAX or self._stashed_bytes + size > STASH_BYTES):
            self._unstash(next(iter(self._stash)))
            self.stash_dropped += 1
        key = fid or ""
        self._stash.setdefault(key, []).append((t, frame))
        self._stash_sizes.setdefault(key, []).append(size)
        self._stashed += 1
        self._stashed_bytes += size

    def _unstash(self, key: str) -> list[tuple[float, dict[str, Any], int]] | None:
        frames = self._stash.pop(key, None)
        if not frames:
            return None
        sizes = self._stash_sizes.pop(key)
        self._stashed -= len(frames)
        self._stashed_bytes -= sum(sizes)
        return [(t, f, n) for (t, f), n in zip(frames, sizes)]

    # --- turns -----------------------------------------------------------------

    async def send(self, text: str, *, interrupt: bool = False, nonce: str | None = None, raw: bool = False, timeout_s: float = 60.0, session: str | None = None) -> Turn:
        """Send one input. Unless ``raw``, ``text`` is a marker (or None-like
        empty string) and a unique nonce suffix is appended. A kernel that does
        not read the input within ``timeout_s`` times the turn out."""
        nonce = nonce or new_nonce(self.nonce_prefix)
        full = text if raw else compose(text or None, nonce)
        turn = Turn(input_id=nonce, text=full, nonce=nonce, interrupt=interrupt)
        turn.t_sent = time.monotonic()
        try:
            frame = self.protocol.input_frame(nonce, full, interrupt) if session is None else self.protocol.input_frame(nonce, full, interrupt, session=session)
            if self._ws is not None or not self._write(frame):
                async with asyncio.timeout_at(turn.t_sent + timeout_s):
                    if self._ws is None:
                        await self._drain()  # the frame is written; the kernel is slow to read it
                    else:
                        await self._send(frame)
        except ConnError as exc:
            turn.lost(exc.kind, str(exc))
        except TimeoutError:
            self._eof = True  # half a frame may be out: this connection is done
            turn.outcome, turn.conn_error = "timeout", f"the kernel did not read the input within {timeout_s:g}s"
        return turn

    async def collect(self, turn: Turn, timeout_s: float) -> Turn:
        """Gather the turn's frames until its terminal/error frame or the deadline."""
        if turn.outcome != "pending":
            return turn
        key = turn.input_id
        classify = self.protocol.classify
        stray = stray_bytes = 0
        notify0 = self.notify_count
        at = turn.t_sent + timeout_s
        dl = self._deadline
        try:
            # one timeout for the whole turn (asyncio.wait_for would make a task per frame);
            # the connection's lazy timer unless another task is collecting on it
            async with (dl.until(at) if dl.task is None else asyncio.timeout_at(at)):
                while turn.outcome == "pending":
                    stashed = self._unstash(key) if self._stash else None  # read for us by another reader
                    if stashed:
                        for t, frame, size in stashed:
                            self._apply(turn, t, frame, classify(frame)[0], size)
                            if turn.outcome == "flood":
                                break
                        continue
                    if self._eof:
                        break
                    async with self._read_lock:
                        if key in self._stash:
                            continue
                        try:
                            frame = await self._recv_raw()
                        except EOFError:
                            break
                        now = time.monotonic()
                        size = self._size
                        kind, fid = classify(frame)
                        if fid == key and kind is not FrameKind.NOTIFY and kind is not FrameKind.STATS:
                            self._apply(turn, now, frame, kind, size)
                            continue
                        if kind is FrameKind.NOTIFY:
                            self._notify(frame)
                        elif kind is FrameKind.STATS:
                            self._stats.append(frame)
                            del self._stats[:-1]  # a stats() waiting on another task wants the latest
                        else:
                            self._stash_frame(fid, now, frame, size)
                        stray += 1
                        stray_bytes += size
                        if stray >= FLOOD_FRAMES or stray_bytes > FLOOD_BYTES:
                            n = self.notify_count - notify0
                            self._flood(turn, f"{stray} frames that were not this turn's while waiting for it ({n} notify, {stray - n} other; {stray_bytes} bytes)")
        except TimeoutError:
            turn.outcome = "timeout"
            return turn
        except ProtocolError as exc:
            self._eof = True
            turn.lost("protocol", str(exc))
            return turn
        except (ConnectionError, OSError) as exc:
            self._eof = True
            turn.lost("reset", f"connection lost: {exc}")
            return turn
        if turn.outcome == "pending":
            turn.outcome, turn.conn_error = "closed", "kernel closed the connection before the turn ended"
        return turn

    def _flood(self, turn: Turn, what: str) -> None:
        """Stop reading a connection the kernel floods: the turn fails by name
        and the harness holds no more of it than the bounds above."""
        turn.outcome, turn.conn_error = "flood", what
        self._eof = True
        self._abort()

    def _apply(self, turn: Turn, t: float, frame: dict[str, Any], kind: FrameKind, size: int) -> None:
        if kind is not FrameKind.TERMINAL and kind is not FrameKind.ERROR:
            # the frame that ends the turn is bounded by the frame limit alone:
            # an answer streamed in deltas and repeated whole at the end fits
            turn.bytes += size
            if turn.bytes > TURN_BYTES_MAX:
                n = len(turn.frames) + turn.frames_dropped + 1
                self._flood(turn, f"more than {TURN_BYTES_MAX} bytes of frames for this turn ({turn.bytes} in {n} frames, {turn.text_chars} characters of answer)")
                return
        if len(turn.frames) < TURN_FRAMES_KEPT:
            turn.frames.append((t, frame))
        else:
            turn.frames_dropped += 1
        if turn.t_first is None:
            turn.t_first = t
        if kind is FrameKind.DELTA:
            text = self.protocol.text_of(frame)
            turn.text_chars += len(text)
            turn.deltas.append(text)
        elif kind is FrameKind.TERMINAL:
            turn.response_text = self.protocol.text_of(frame)
            turn.duplicate = bool(frame.get("duplicate"))
            turn.outcome, turn.t_done = "response", t
        elif kind is FrameKind.ERROR:
            turn.error_code = str(frame.get("code", "error"))
            turn.error_message = str(frame.get("message", ""))
            turn.outcome, turn.t_done = "error", t

    async def turn(self, text: str = "", timeout_s: float = 60.0, *, interrupt: bool = False, nonce: str | None = None, raw: bool = False, session: str | None = None) -> Turn:
        turn = await self.send(text, interrupt=interrupt, nonce=nonce, raw=raw, timeout_s=timeout_s, session=session)
        return await self.collect(turn, timeout_s)

    async def stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        frame = self.protocol.stats_frame()
        if frame is None:
            return {}
        self._stats.clear()
        await self._send(frame)
        deadline = time.monotonic() + timeout_s
        try:
            await self._pump(lambda: bool(self._stats), deadline)
        except asyncio.TimeoutError:
            raise ConnError("timeout", f"{self.path}: no stats frame within {timeout_s:.1f}s") from None
        except (ProtocolError, ConnectionError, OSError) as exc:
            self._eof = True
            raise ConnError("closed", f"{self.path}: connection lost waiting for stats ({exc})") from None
        if not self._stats:
            raise ConnError("closed", f"{self.path}: connection closed while waiting for stats")
        return self._stats.pop(0)


def tag_nonces(tag: str) -> None:
    """A fleet worker's nonces carry its index (``tag``): disjoint from every
    other worker's on any host, where pids and two random bytes may repeat."""
    global _NONCE_TAG
    _NONCE_TAG = (os.getpid(), os.urandom(2).hex() + tag)
