"""The fast path: first streamed replies answered below aiohttp's application layer.

A first streamed request of a cached shape (the bulk of any load: every turn
starts with one) costs aiohttp's per-request machinery -- a task, a request
object, a writer, prepare() building headers -- several times what the mock
does for it. The fast path answers it from the connection's data_received,
parsed by aiohttp's own (C) parser, when the connection is idle (no request in
progress or queued: responses stay in order) and the body came whole. Every
other request -- follow-ups, faults, hangs, pacing, other routes, anything the
fast path does not recognise -- goes to aiohttp's handler unchanged, with the
body it already read. The bytes on the wire are the ones aiohttp writes.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from .dialects import BY_NAME, BadRequest, Dialect
from .exchange import Exchange, MockState, begin, end
from .shapes import shape_for, shape_reply

if TYPE_CHECKING:
    from .server import MockSettings

# Off: every request goes to aiohttp's handler (the tests compare the two).
FAST_PATH = True

try:  # aiohttp internals the fast path subclasses; without them the mock runs on aiohttp alone
    from aiohttp.http import SERVER_SOFTWARE, HttpVersion11
    from aiohttp.http_exceptions import HttpProcessingError
    from aiohttp.helpers import rfc822_formatted_time
    from aiohttp.http_parser import RawRequestMessage
    from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
    from aiohttp.web_protocol import RequestHandler, _ErrInfo
except ImportError:  # pragma: no cover - a future aiohttp moved them
    RequestHandler = None  # type: ignore[assignment,misc]
# what _FastHandler touches of aiohttp's protocol (3.14); another aiohttp
# without one of them runs the mock on aiohttp alone
_FAST_NEEDS = (
    "_messages", "_waiter", "_payload_parser", "_upgraded", "_parser", "_handle_request", "_request_count",
    "_max_msg_queue_size", "_pause_reading_for_buffer", "_buffer_paused", "_keepalive_timeout",
    "_next_keepalive_close_time", "_force_close", "_close", "_manager", "_loop", "_paused", "_message_tail",
)  # fmt: skip
if RequestHandler is not None and not all(hasattr(RequestHandler, name) for name in _FAST_NEEDS):  # pragma: no cover
    RequestHandler = None  # type: ignore[assignment,misc]

FAST_ROUTES: dict[str, Dialect] = {path: d for d in BY_NAME.values() for path in d.paths}
# a larger body still coming goes to aiohttp; and past 2 x its 64 KiB read buffer
# the body reader pauses the socket, so a held request would never complete
FAST_WAIT_BYTES = 1 << 16
_WAIT = object()
_decode = json.JSONDecoder().decode


def _fast_events(dialect: Dialect, raw: bytes, path: str, settings: MockSettings, state: MockState) -> tuple[Exchange, list[bytes]] | None:
    """The exchange and events of a request the fast path can answer, or None
    (nothing recorded: aiohttp's handler serves it from the start)."""
    # state.bucket: a rate limit (--rate-limit or set at run time by POST
    # /_mock/rate_limit) -- every request must take a token (server._scheduled)
    if settings.script is not None or settings.chunk_delay_ms or settings.ttft_ms or state.bucket is not None:
        return None
    try:
        turn = dialect.read(_decode(raw.decode()))
    except (ValueError, RecursionError, BadRequest):
        return None
    if not turn.stream or turn.followup:
        return None
    found = shape_for(dialect, turn.user_text, settings, state)
    if found is None:
        return None
    ex = begin(state, path, dialect)
    events = shape_reply(dialect, turn, found, turn.model or settings.model, state, ex)
    return ex, events


if RequestHandler is not None:
    _SERVER = SERVER_SOFTWARE.encode()

    class _FastHandler(RequestHandler):  # type: ignore[misc,valid-type]
        # requests handed to aiohttp on this connection whose response is not
        # finished: the fast path answers only while there are none (and none
        # queued), so responses leave in request order. aiohttp's own state
        # cannot tell: between taking a request off its queue and starting its
        # task (not eager before Python 3.12) the connection looks idle.
        # _kst_wait: a request the fast path may answer whose body has not all
        # come yet (httpx and http.client send the headers and the body in two
        # writes), held until it has; nothing of it is recorded before.
        __slots__ = ("_kst_busy", "_kst_wait")

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._kst_busy = 0
            self._kst_wait: tuple[Any, Any] | None = None

        async def _handle_request(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return await super()._handle_request(*args, **kwargs)
            finally:
                self._kst_busy -= 1

        def data_received(self, data: bytes) -> None:
            if self._force_close or self._close:
                return
            if self._payload_parser is not None or self._upgraded:
                return super().data_received(data)
            try:
                messages, upgraded, tail = self._parser.feed_data(data)
            except HttpProcessingError as exc:
                messages, upgraded, tail = [(_ErrInfo(status=400, exc=exc, message=exc.message), EMPTY_PAYLOAD)], False, b""
            queued = False
            wait = self._kst_wait
            if wait is not None and (messages or upgraded or wait[1].is_eof()):
                # its body is whole now (the parser reads a request's body before the next request)
                self._kst_wait = None
                queued = self._take(wait[0], wait[1], upgraded)
            for msg, payload in messages:
                self._request_count += 1
                queued = self._take(msg, payload, upgraded) or queued
            waiter = self._waiter
            if queued and waiter is not None and not waiter.done():
                waiter.set_result(None)
            if not self._buffer_paused and len(self._messages) >= self._max_msg_queue_size:
                self._pause_reading_for_buffer()
            self._upgraded = upgraded
            if upgraded and tail:
                self._message_tail = tail

        def _take(self, msg: Any, payload: Any, upgraded: bool) -> bool:
            """Answer a request here, hold it for the rest of its body, or queue
            it for aiohttp (True)."""
            if self._kst_wait is None and not self._messages and not self._kst_busy and not upgraded:
                kept = self._answer(msg, payload)
                if kept is None:
                    return False
                if kept is _WAIT:
                    self._kst_wait = (msg, payload)
                    self._manager.kstress[1].counters["fast_path_held"] += 1  # type: ignore[union-attr]
                    return False
                payload = kept
            elif self._kst_wait is not None:  # pragma: no cover - a later request parsed means the body was whole
                held, self._kst_wait = self._kst_wait, None
                self._messages.append(held)
                self._kst_busy += 1
            self._messages.append((msg, payload))
            self._kst_busy += 1
            return True

        def _answer(self, msg: Any, payload: Any) -> Any:
            """None: answered here. Otherwise the payload to queue for aiohttp
            (the one given, or a copy of the body this read)."""
            if (
                self._paused  # the transport's buffer is full: aiohttp's writer waits for it to drain
                or not isinstance(msg, RawRequestMessage)
                or msg.method != "POST"
                or msg.version != HttpVersion11
                or msg.should_close
                or msg.upgrade
                or payload is EMPTY_PAYLOAD
                or self.transport is None
            ):
                return payload
            dialect = FAST_ROUTES.get(msg.path)
            if dialect is None:
                return payload
            if not payload.is_eof():
                length = msg.headers.get("Content-Length", "")
                return _WAIT if length.isdigit() and int(length) <= FAST_WAIT_BYTES else payload
            manager = self._manager
            settings, state = manager.kstress  # type: ignore[union-attr]
            raw = payload.read_nowait(-1)
            got = _fast_events(dialect, raw, msg.path, settings, state)
            if got is None:
                kept = StreamReader(self, 2**16, loop=self._loop)
                kept.feed_data(raw)
                kept.feed_eof()
                return kept
            ex, events = got
            body = b"".join(events)
            ex.sent(None, time.monotonic())
            state.commit(ex, 200)
            self._write_reply(
                b"HTTP/1.1 200 OK\r\nContent-Type: " + dialect.content_type.encode()
                + b"\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\nDate: " + rfc822_formatted_time().encode()
                + b"\r\nServer: " + _SERVER + b"\r\n\r\n%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"
            )  # fmt: skip
            end(state, ex, 200)
            state.counters["fast_path"] += 1
            manager.requests_count += 1  # type: ignore[union-attr]
            if self._parser is not None and hasattr(self._parser, "message_consumed"):
                self._parser.message_consumed()
            if self._keepalive_timeout > 0:
                self._next_keepalive_close_time = self._loop.time() + self._keepalive_timeout
            return None

        def _write_reply(self, data: bytes) -> None:
            self.transport.write(data)  # type: ignore[union-attr]

    class _FastServer(web.Server):
        def __call__(self) -> RequestHandler:
            return _FastHandler(self, loop=self._loop, **self._kwargs)


def serve_fast(server: web.Server, settings: MockSettings, state: MockState) -> None:
    """Have ``server``'s connections served by _FastHandler, unless the fast
    path is off or this aiohttp lacks what it touches."""
    if RequestHandler is not None and FAST_PATH:
        server.__class__ = _FastServer  # same object, one method more: its connections' handler class
        server.kstress = (settings, state)  # type: ignore[attr-defined]
