"""HttpAgentClient: one kstress connection to an agent served over HTTP
(AG-UI, A2A, OpenAI-compatible; issue 23), with the surface scenarios use of
``KernelClient``, and the registry of protocol names.

A driver (harness/wire/agentproto.py) speaks the protocol; this client owns
everything else, the same on every protocol:

- one aiohttp session with exactly one keep-alive connection per kstress
  connection (``limit=1``), so ``--conns N`` is N connections to the agent on
  every protocol; turns sent on one connection wait for it, as protocol v1
  serves one connection in order;
- aiohttp never dials: the connector below opens its sockets with the
  transport's own ``open_socket`` (loopback TCP, or through a sandbox's
  connector), so connect failures are the same ``ConnError`` kinds
  (`refused`, `backlog_full`, `capacity`, `reset`, `timeout`) as protocol v1's;
- the turn's deadline (the driver is cancelled at it, which closes its
  stream: AG-UI's and OpenAI's only cancel), the same byte bounds of a flood
  as client.py, and one SSE event at most the frame limit (MAX_FRAME);
- a ``TurnSink`` that fills the ``Turn`` exactly as ``KernelClient._apply``
  does, so the judge and every scenario see no difference;
- each session's (input, answer) history, for the drivers whose protocol
  makes the client carry it (AG-UI, OpenAI chat). The store is the Target's,
  shared by all its connections: a session may move between connections.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import ipaddress
import socket
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable

import orjson

from mock.markers import compose

from ..errors import UsageError
from .agentproto import AgentDriver
from .client import FLOOD_BYTES, TURN_BYTES_MAX, TURN_FRAMES_KEPT, Turn, new_nonce
from .protocol import MAX_FRAME
from .transport import Address, ConnError, Dialer, open_socket

if TYPE_CHECKING:
    import aiohttp

# --protocol NAME -> the driver class, imported only when that name is used
# (kcli and --help load no driver); None: protocol v1, KernelClient's own
PROTOCOLS: dict[str, str | None] = {
    "kstress-v1": None,
    "agui": "harness.wire.agui:AguiDriver",
    "a2a": "harness.wire.a2a:A2ADriver",
    "openai-chat": "harness.wire.openai_compat:OpenAIChatDriver",
    "openai-responses": "harness.wire.openai_compat:OpenAIResponsesDriver",
}
AGENT_PROTOCOLS = tuple(n for n, v in PROTOCOLS.items() if v is not None)
CLOSE_GRACE_S = 1.0
# a cancel request (A2A's tasks/cancel) answers within this, or is recorded as "timeout"
CANCEL_REQUEST_TIMEOUT_S = 10.0


def is_agent_protocol(name: str | None) -> bool:
    return name in AGENT_PROTOCOLS


def check_agent_url(url: str, flag: str = "--url", allow: tuple[str, ...] = ()) -> Address:
    """An agent's URL: http on a loopback host with a port, as an Address
    (tcp) to dial; a UsageError naming the value, the rule and the fix."""
    if not isinstance(url, str) or not url:
        raise UsageError(f"{flag} {url!r} is empty; give the agent's URL, e.g. http://127.0.0.1:8000/agui")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http":
        why = "https is not spoken: kstress keeps its traffic on loopback, where TLS guards nothing" if parts.scheme == "https" else f"the scheme is {parts.scheme or 'missing'}"
        raise UsageError(f"{flag} {url}: {why}; an agent URL is http://127.0.0.1:PORT/PATH")
    host = parts.hostname or ""
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"{flag} {url}: the port is invalid: use 1 to 65535") from None
    if not host:
        raise UsageError(f"{flag} {url}: no host; an agent URL is http://127.0.0.1:PORT/PATH")
    if host in allow:
        pass  # off loopback, named on purpose with --allow-remote
    elif host.lower() == "localhost":
        host = "127.0.0.1"  # not resolved: a name could say anything
    else:
        try:
            ip = ipaddress.ip_address(host)
        except ValueError:
            raise UsageError(f"{flag} {url}: {host!r} is not a loopback address (no name but localhost is accepted); "
                             f"kstress keeps its traffic on loopback: use 127.0.0.1, localhost or [::1], or aim the load there on purpose with --allow-remote {host}") from None
        if not ip.is_loopback:
            raise UsageError(f"{flag} {url}: {host} is not a loopback address; kstress keeps its traffic on loopback: "
                             f"use 127.0.0.1, localhost or [::1], or aim the load at that machine on purpose with --allow-remote {host}")
        host = str(ip)
    if port is None:
        raise UsageError(f"{flag} {url}: no port; an agent URL names its port, e.g. http://127.0.0.1:8000/agui")
    return Address("tcp", host=host, port=port)


def agent_driver(name: str, url: str, flag: str = "--url") -> AgentDriver:
    """The driver of protocol ``name`` for the agent at ``url`` (checked:
    loopback http). ``kstress-v1`` and unknown names are usage errors here."""
    check_agent_url(url, flag)
    where = PROTOCOLS.get(name, "")
    if not where:
        raise UsageError(f"--protocol {name!r} is not an agent protocol; use one of {', '.join(AGENT_PROTOCOLS)} with {flag}")
    module, _, cls = where.partition(":")
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            raise
        raise UsageError(f"--protocol {name}: its driver ({where}) is not built yet in this kstress; use {', '.join(n for n in AGENT_PROTOCOLS if n != name)}") from None
    return getattr(mod, cls)(url)


class Exchange(tuple):
    """One answered turn of a session, for the next turn's history: ``(input,
    answer)``, and ``steps``, its shown tool steps (each a list of ``{"id",
    "name", "args", "content"}`` in the order the calls were shown, which is
    the order they were declared) -- what a protocol whose client carries the
    history must send back whole (the mock checks every earlier turn's tool
    exchange: docs/markers.md, *Sessions*)."""

    steps: list[list[dict[str, Any]]]

    def __new__(cls, said: str, answer: str, steps: list[list[dict[str, Any]]] | None = None) -> "Exchange":
        self = super().__new__(cls, (said, answer))
        self.steps = steps or []
        return self

    @classmethod
    def of(cls, turn: Turn) -> "Exchange":
        steps: dict[int, list[dict[str, Any]]] = {}
        for call_id, c in (turn.tools_shown or {}).items():
            steps.setdefault(c.get("step", 1), []).append({"id": call_id, "name": c.get("name") or "", "args": c.get("args") or "", "content": c.get("content") or ""})
        return cls(turn.text, turn.reply, [steps[k] for k in sorted(steps)])


class Flooded(Exception):
    """Raised by the sink out of the driver when a turn passed a byte bound."""


class StreamCut(Exception):
    """The response body ended, or broke, before the protocol's end of a turn."""


def json_event(data: str, what: str) -> dict[str, Any]:
    """One SSE event's data as the JSON object every agent protocol sends;
    anything else is a protocol error naming ``what`` it was."""
    try:
        ev = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise ConnError("protocol", f"{what} that is not JSON: {data[:120]!r}") from None
    if not isinstance(ev, dict):
        raise ConnError("protocol", f"{what} that is not a JSON object: {data[:120]!r}")
    return ev


async def sse_events(resp: "aiohttp.ClientResponse", on_size: Any = None) -> AsyncIterator[tuple[str | None, str, int]]:
    """The (event name, data, wire size) of each event of an SSE body: blank-
    line separated, `data:` lines joined by newlines, comments and `id:` /
    `retry:` lines skipped. An event over MAX_FRAME is a protocol error; a
    body broken off mid-read is StreamCut (a clean end simply stops). One
    event a step; the drivers read ``sse_batches``, a chunk's events a step."""
    async for batch in sse_batches(resp):
        for event in batch:
            yield event


async def sse_batches(resp: "aiohttp.ClientResponse") -> AsyncIterator[list[tuple[str | None, str, int]]]:
    """sse_events' events, those a chunk completes at a time.

    Read in chunks as they arrive and split here, not with the stream's
    readline: aiohttp's readline cost some 7 us a line on the loaded 2-core
    box, and a turn of small events is mostly lines (bench/openai_client.py:
    the largest part of the driver's cost per turn; docs/design-notes.md).
    A chunk's events go out as one list because an `async for` step costs
    some 1.5 us, an event's whole parse not much more. Lines end in LF (a CR
    before it is dropped), as readline split them. The events before an
    error in the same chunk go out before it, as one at a time they would."""
    import aiohttp

    content = resp.content
    name: str | None = None
    data: list[str] = []
    size = 0
    cut: list[bytes] = []  # the start of a line the chunks cut, kept as pieces: a long line is joined once
    cut_len = 0
    while True:
        try:
            chunk = await content.readany()
        except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, ConnectionError) as exc:
            raise StreamCut(f"the response body broke off ({type(exc).__name__}: {exc})") from None
        if not chunk:
            return
        if b"\n" not in chunk:
            cut.append(chunk)
            cut_len += len(chunk)
            if size + cut_len > MAX_FRAME:  # a line that does not end is an event that does not either
                raise ConnError("protocol", f"an SSE event of more than {MAX_FRAME} bytes (the frame limit)")
            continue
        if cut:
            cut.append(chunk)
            chunk = b"".join(cut)
        lines = chunk.split(b"\n")
        rest = lines.pop()
        cut, cut_len = ([rest], len(rest)) if rest else ([], 0)
        out: list[tuple[str | None, str, int]] = []
        for line in lines:
            size += len(line) + 1
            if size > MAX_FRAME:
                break
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    out.append((name, data[0] if len(data) == 1 else "\n".join(data), size))
                name, data, size = None, [], 0
                continue
            if line[0] == 58:  # b":", a comment
                continue
            field, _, value = line.partition(b":")
            if value[:1] == b" ":
                value = value[1:]
            if field == b"data":
                data.append(value.decode("utf-8", "replace"))
            elif field == b"event":
                name = value.decode("utf-8", "replace")
        if out:
            yield out
        if size + cut_len > MAX_FRAME:
            raise ConnError("protocol", f"an SSE event of more than {MAX_FRAME} bytes (the frame limit)")


class TurnRecorder:
    """The TurnSink of one turn: fills its ``Turn`` as KernelClient._apply
    fills it from protocol v1's frames (frames kept and counted, t_first, the
    deltas, the answer or the error, t_done), and keeps the tool calls the
    protocol showed in ``turn.tools_shown`` for the judge."""

    __slots__ = ("turn", "ended", "step", "in_step")

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.ended = False
        self.step = 0  # the tool step a START belongs to: a new one after a result or text
        self.in_step = False

    def frame(self, event: dict[str, Any], size: int) -> None:
        turn = self.turn
        turn.bytes += size
        if turn.bytes > TURN_BYTES_MAX:
            n = len(turn.frames) + turn.frames_dropped + 1
            raise Flooded(f"more than {TURN_BYTES_MAX} bytes of events for this turn ({turn.bytes} in {n} events, {turn.text_chars} characters of answer)")
        t = time.monotonic()
        if len(turn.frames) < TURN_FRAMES_KEPT:
            turn.frames.append((t, event))
        else:
            turn.frames_dropped += 1
        if turn.t_first is None:
            turn.t_first = t

    def delta(self, text: str) -> None:
        self.turn.text_chars += len(text)
        self.turn.deltas.append(text)
        if text:
            self.in_step = False

    def tool(self, call_id: str, name: str | None, phase: str, *, ok: bool | None = None, arguments: str | None = None, content: str | None = None) -> None:
        shown = self.turn.tools_shown
        if shown is None:
            shown = self.turn.tools_shown = {}
        if len(shown) >= TURN_FRAMES_KEPT and call_id not in shown:
            return  # bounded like the frames: a flood of ids is caught by the byte bound
        if phase == "start" and not self.in_step:
            self.step += 1
            self.in_step = True
        c = shown.setdefault(call_id, {"name": name, "args": "", "start": 0, "end": 0, "results": 0, "step": self.step, "content": None})
        if name and not c["name"]:
            c["name"] = name
        if phase == "start":
            c["start"] += 1
        elif phase == "args":
            if len(c["args"]) < FLOOD_BYTES:
                c["args"] += arguments or ""
        elif phase == "end":
            c["end"] += 1
        elif phase == "result":
            c["results"] += 1
            self.in_step = False
            if c["content"] is None and content is not None:
                c["content"] = content
        if arguments is not None and phase != "args":
            c["args"] = arguments

    def done(self, text: str | None) -> None:
        if self.ended:
            return
        self.ended = True
        turn = self.turn
        turn.response_text = text
        turn.outcome, turn.t_done = "response", time.monotonic()

    def error(self, code: str, message: str) -> None:
        if self.ended:
            return
        self.ended = True
        turn = self.turn
        turn.error_code, turn.error_message = code, message
        turn.outcome, turn.t_done = "error", time.monotonic()


@functools.cache
def _connector_class() -> type:
    import aiohttp

    class DialConnector(aiohttp.BaseConnector):
        """aiohttp's connections, dialled by kstress's transport: the same
        deadline, loopback rule, sandbox connector and ConnError kinds as a
        protocol v1 connection."""

        def __init__(self, address: Address, dialer: Dialer | None, connect_timeout_s: float) -> None:
            super().__init__(limit=1, limit_per_host=1, keepalive_timeout=60.0)
            self.address, self.dialer, self.connect_timeout_s = address, dialer, connect_timeout_s
            self.dials = 0
            self.first: socket.socket | None = None  # dialled by connect()
            self.proto: Any = None  # the connection made last

        async def _create_connection(self, req: Any, traces: Any, timeout: Any) -> Any:
            sock, self.first = self.first, None
            if sock is None:
                sock = await open_socket(self.address, time.monotonic() + self.connect_timeout_s, dialer=self.dialer)
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                _, proto = await self._loop.create_connection(self._factory, sock=sock)
            except BaseException:
                sock.close()
                raise
            self.dials += 1
            self.proto = proto
            return proto

        def alive(self) -> bool:
            """Is the one connection open? The dialled one not yet used, by a
            peek (b'' is the peer's close); else the last one aiohttp used."""
            if self.first is not None:
                try:
                    return self.first.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) != b""
                except BlockingIOError:
                    return True
                except OSError:
                    return False
            proto = self.proto
            return proto is not None and proto.is_connected()

        def _close(self, *a: Any, **kw: Any) -> Any:
            if self.first is not None:  # dialled, never used
                self.first.close()
                self.first = None
            return super()._close(*a, **kw)

    return DialConnector


class HttpAgentClient:
    """``async with HttpAgentClient(driver) as c: turn = await c.turn("!batch4")``

    ``address``: where to dial (default: the driver's URL's host and port);
    with ``via`` set, through ``dialer`` (a sandbox's connector).
    ``histories``: session -> [(input, answer)], shared by a Target's clients."""

    def __init__(
        self,
        driver: AgentDriver,
        address: Address | None = None,
        *,
        dialer: Dialer | None = None,
        connect_timeout_s: float = 10.0,
        nonce_prefix: str = "k",
        histories: dict[str, list[tuple[str, str]]] | None = None,
    ) -> None:
        self.driver = driver
        self.address = address or check_agent_url(driver.url)
        self.path = driver.url  # what every message calls it
        self.dialer = dialer
        self.connect_timeout_s = connect_timeout_s
        self.nonce_prefix = nonce_prefix
        self.histories = histories if histories is not None else {}
        self.notify_count = 0  # an agent protocol has no broadcast
        self.http: "aiohttp.ClientSession | None" = None
        self._running: dict[str, asyncio.Task[None]] = {}
        self._closed = False

    # --- lifecycle ---------------------------------------------------------

    async def connect(self) -> "HttpAgentClient":
        """Opens the session and its one connection now: a refused or full
        agent fails here with its ConnError kind, as protocol v1's connect."""
        import aiohttp

        conn = _connector_class()(self.address, self.dialer, self.connect_timeout_s)
        # read_bufsize: an SSE line may reach the frame limit (aiohttp refuses
        # a line over twice its buffer)
        self.http = aiohttp.ClientSession(connector=conn, read_bufsize=MAX_FRAME, timeout=aiohttp.ClientTimeout(total=None),
                                          auto_decompress=False, skip_auto_headers=("User-Agent",))
        try:
            # dialled now, so a refused or full agent fails here by its kind;
            # the connector hands this socket to the first request
            conn.first = await open_socket(self.address, time.monotonic() + self.connect_timeout_s, dialer=self.dialer)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        running = list(self._running.values())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        http, self.http = self.http, None
        if http is not None:
            await http.close()

    async def __aenter__(self) -> "HttpAgentClient":
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def connected(self) -> bool:
        """Open, and its connection too (hold counts them): an agent that closes
        an idle keep-alive connection is not holding it, though the next turn
        would dial again; one with a turn in flight is connected."""
        if self.http is None or self._closed:
            return False
        return bool(self._running) or self.http.connector.alive()  # type: ignore[union-attr]

    async def stats(self, timeout_s: float = 5.0) -> dict[str, Any]:
        return {}  # an agent has no stats frame: scenarios treat the stats as absent

    async def prepare(self, timeout_s: float) -> None:
        """The driver's readiness probe on this connection (UsageError when the
        URL is not an agent of the protocol)."""
        assert self.http is not None, "connect() first"
        await self.driver.prepare(self.http, timeout_s)

    # --- turns -----------------------------------------------------------------

    async def send(self, text: str, *, interrupt: bool = False, nonce: str | None = None, raw: bool = False, timeout_s: float = 60.0, session: str | None = None) -> Turn:
        nonce = nonce or new_nonce(self.nonce_prefix)
        full = text if raw else compose(text or None, nonce)
        turn = Turn(input_id=nonce, text=full, nonce=nonce, interrupt=interrupt)
        turn.t_sent = time.monotonic()
        if self.http is None:
            turn.lost("closed", f"{self.path}: connection is closed")
            return turn
        self._running[nonce] = asyncio.ensure_future(self._run(turn, session))
        return turn

    async def _run(self, turn: Turn, session: str | None) -> None:
        import aiohttp

        sink = TurnRecorder(turn)
        if self.driver.shows_tools:
            turn.tools_shown = {}  # held to the mock's calls even when none is shown
        history = list(self.histories.get(session, ())) if session is not None else None
        try:
            await self.driver.run_turn(self.http, turn, sink, session=session, history=history)  # type: ignore[arg-type]
        except Flooded as exc:
            turn.outcome, turn.conn_error = "flood", str(exc)
            return
        except StreamCut as exc:
            sink.error("stream_cut", str(exc))
        except ConnError as exc:
            turn.lost(exc.kind, f"{self.path}: {exc}")
            return
        except aiohttp.ClientConnectorError as exc:  # never ours: our connector raises ConnError
            turn.lost("refused", f"{self.path}: {exc}")
            return
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, ConnectionError) as exc:
            turn.lost("reset", f"{self.path}: connection lost: {exc}")
            return
        except aiohttp.ClientPayloadError as exc:
            sink.error("stream_cut", f"the response body broke off ({exc})")
        except aiohttp.ClientError as exc:
            # not HTTP at all (a protocol v1 kernel at the URL, garbage): what a
            # v1 frame that is no JSON is
            turn.lost("protocol", f"{self.path}: not an HTTP answer ({type(exc).__name__}: {exc})")
            return
        if turn.outcome == "pending":
            sink.error("stream_cut", "the driver read the response to its end and found no end of the turn")
        if session is not None and turn.outcome == "response":
            self.histories.setdefault(session, []).append(Exchange.of(turn))

    async def collect(self, turn: Turn, timeout_s: float) -> Turn:
        task = self._running.get(turn.input_id)
        if task is None or turn.outcome != "pending" and task.done():
            self._running.pop(turn.input_id, None)
            return turn
        try:
            async with asyncio.timeout_at(turn.t_sent + timeout_s):
                await asyncio.shield(task)
        except TimeoutError:
            # the cancel of a stream protocol: its connection closes with it
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            if turn.outcome == "pending":
                turn.outcome = "timeout"
        finally:
            self._running.pop(turn.input_id, None)
        return turn

    async def turn(self, text: str = "", timeout_s: float = 60.0, *, interrupt: bool = False, nonce: str | None = None, raw: bool = False, session: str | None = None) -> Turn:
        turn = await self.send(text, interrupt=interrupt, nonce=nonce, raw=raw, timeout_s=timeout_s, session=session)
        return await self.collect(turn, timeout_s)

    async def interrupt(self, text: str, timeout_s: float, at: Callable[[Turn], Awaitable[Any]]) -> Turn:
        """An interrupt over an agent protocol is a cancel (issue 23 item 4):
        send ``text``, wait for ``at(turn)`` -- the cancel point, e.g. the
        mock has answered the turn's first request and its tools run -- then
        cancel the turn the protocol's way (the driver's cancel request, A2A's
        tasks/cancel, on a connection of its own; then the stream is closed,
        which is AG-UI's whole cancel). ``turn.cancel["t"]`` is when the cancel
        went out; the judge reads from the mock whether the agent stopped. A
        turn that ends before its cancel point is left as it ended, with
        ``turn.cancel["why"]``, and judged as any turn."""
        turn = await self.send(text, interrupt=True, timeout_s=timeout_s)
        task = self._running.get(turn.input_id)
        if task is None:
            return turn
        point = asyncio.ensure_future(at(turn))
        try:
            await asyncio.wait((point, task), timeout=max(0.0, turn.t_sent + timeout_s - time.monotonic()), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not point.done():
                point.cancel()
            await asyncio.gather(point, return_exceptions=True)
        if task.done() or not point.done() or point.cancelled() or point.exception() is not None:
            if task.done():
                turn.cancel = {"t": None, "why": "the turn ended before its cancel point"}
            else:
                why = point.exception() if point.done() and not point.cancelled() else None
                turn.cancel = {"t": None, "why": f"the cancel point was not reached ({why})" if why else "the cancel point was not reached before the turn's deadline"}
            return await self.collect(turn, timeout_s)
        turn.cancel = {"t": time.monotonic(), "answer": None}
        try:
            turn.cancel["answer"] = await self._cancel_request(turn, timeout_s)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            self._running.pop(turn.input_id, None)
        if turn.outcome == "pending":
            turn.outcome = "cancelled"
            turn.t_done = time.monotonic()
        return turn

    async def _cancel_request(self, turn: Turn, timeout_s: float) -> str | None:
        """The driver's cancel request, on a connection of its own: the turn's
        one connection is busy with its stream. None for a protocol whose
        cancel is closing the stream (AG-UI, OpenAI-compatible)."""
        if type(self.driver).cancel is AgentDriver.cancel:
            return None
        import aiohttp

        side = aiohttp.ClientSession(connector=_connector_class()(self.address, self.dialer, self.connect_timeout_s),
                                     timeout=aiohttp.ClientTimeout(total=None), auto_decompress=False, skip_auto_headers=("User-Agent",))
        try:
            async with asyncio.timeout(min(timeout_s, CANCEL_REQUEST_TIMEOUT_S)):
                return await self.driver.cancel(side, turn)
        except TimeoutError:
            return "timeout"
        except (ConnError, aiohttp.ClientError, OSError) as exc:
            return f"conn_error ({exc})"
        finally:
            await side.close()


async def probe_endpoint(http: "aiohttp.ClientSession", url: str, protocol: str, timeout_s: float, body: Any, example: str) -> int:
    """Is ``url`` an endpoint of ``protocol``? POSTs ``body`` (an input the
    protocol refuses, so no agent run starts: AG-UI and OpenAI servers answer
    400/422) and refuses, as a usage error naming the URL, what came back and
    the fix, what cannot be one: 404, 405, a web page. Returns the status."""
    try:
        async with asyncio.timeout(timeout_s):
            async with http.post(url, json=body, headers={"Accept": "text/event-stream, application/json"}) as resp:
                head = (await resp.content.read(512)).decode("utf-8", "replace")
                status, ctype = resp.status, resp.headers.get("Content-Type", "")
    except TimeoutError:
        raise ConnError("timeout", f"{url}: no answer to a probe within {timeout_s:g}s") from None
    fix = f"give the URL the agent serves {protocol} at, e.g. {example}"
    if status == 404:
        raise UsageError(f"agent URL {url}: HTTP 404 Not Found: there is no {protocol} endpoint at this path; {fix}")
    if status == 405:
        raise UsageError(f"agent URL {url}: HTTP 405 Method Not Allowed: this path does not take the POST a {protocol} request is; {fix}")
    if "html" in ctype.lower() or head.lstrip()[:15].lower().startswith(("<!doctype", "<html")):
        raise UsageError(f"agent URL {url}: answered a web page (HTTP {status}, {ctype or 'no Content-Type'}), not {protocol}; {fix}")
    return status


async def read_head(resp: "aiohttp.ClientResponse", n: int = 300) -> str:
    """The first bytes of a body, for an error message (never the whole of it)."""
    try:
        data = await resp.content.read(n)
    except Exception:  # noqa: BLE001 - a message's detail; the status says enough
        return ""
    return " ".join(data.decode("utf-8", "replace").split())[:n]


async def drain(resp: "aiohttp.ClientResponse", grace_s: float = CLOSE_GRACE_S) -> None:
    """After the protocol's end of a turn: read the body's rest for a moment so
    the connection is reused (keep-alive); a body that does not end is closed."""
    try:
        async with asyncio.timeout(grace_s):
            while await resp.content.readany():
                pass
    except Exception:  # noqa: BLE001 - the turn is over; the connection may go
        resp.close()
