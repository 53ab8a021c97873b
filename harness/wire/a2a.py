"""The A2A driver (issue 23): an agent served over A2A's JSON-RPC binding,
version 1.0 (``SendMessage``, ``TASK_STATE_*``, ``ROLE_*``) or 0.3
(``message/send``, lowercase states, ``kind`` discriminators).

The agent card is read first (``/.well-known/agent-card.json``, then the
0.2-era ``/.well-known/agent.json``); the RPC URL, the method set and whether
to stream come from it, and one JSON-RPC call that must fail cleanly (GetTask
of a task that does not exist) proves the RPC URL answers JSON-RPC before the
first turn -- a card that names the wrong address (fasta2a's default is
http://localhost:8000) is a usage error then, not a run of failed turns.

What a turn is verified for, beyond the verdict line: the task reaches
``completed``; every other end is a failure by name (FAILURES, and
``jsonrpc_<code>``, ``http_<status>``, ``stream_cut``, ``bad_response``;
an event or body over the frame limit is a protocol error, as every
protocol's is). docs/protocol.md ("A2A") is the reference; the parsing is pure
(``parse_card``, ``SSEParser``, ``TurnReader``) so it is tested, and costed,
on recorded transcripts.

Servers differ in ways the reader absorbs rather than judges: fasta2a
answers 0.3 method names with 1.0's result wrappers (``{"task": ...}``,
``statusUpdate``) and lowercase states, so the wrappers and enums of both
versions are read whatever version was asked for.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import itertools
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin, urlsplit

import orjson

from ..errors import UsageError
from .agentproto import AgentDriver, TurnSink
from .agents import drain
from .protocol import MAX_FRAME
from .transport import ConnError

if TYPE_CHECKING:
    import aiohttp

    from .client import Turn

CARD_PATHS = ("/.well-known/agent-card.json", "/.well-known/agent.json")

METHODS = {
    "1.0": {"send": "SendMessage", "stream": "SendStreamingMessage", "get": "GetTask", "cancel": "CancelTask"},
    "0.3": {"send": "message/send", "stream": "message/stream", "get": "tasks/get", "cancel": "tasks/cancel"},
}

# A terminal state other than completed, and the name its turn fails with.
FAILURES = {
    "failed": "task_failed",
    "rejected": "task_rejected",
    "canceled": "task_canceled",
    "input-required": "input_required",
    "auth-required": "auth_required",
}
# input-required and auth-required are not terminal in the spec (the task
# waits for the client), but a kstress turn has nothing more to say: they end it.
ENDS = frozenset(FAILURES) | {"completed"}

# Polling a task that is not done yet (a server that answers message/send with
# `submitted`, as fasta2a always does): the first GetTask after POLL_FIRST_S,
# each wait doubled up to POLL_MAX_S, until the client's turn deadline cancels
# the turn. A text turn through fasta2a completes in ~30 ms, so the first polls
# keep the measured latency within a few ms of the truth; the cap keeps a long
# turn to 10 requests a second at the agent, and its latency within 100 ms.
POLL_FIRST_S = 0.005
POLL_MAX_S = 0.1

# One SSE event or JSON body is at most the frame limit (MAX_FRAME, 1 MiB),
# as on every protocol (harness/wire/agents.py): the turn's byte bound counts
# whole events only, and an event with no end would otherwise grow without one.

# The card read and probe when a turn comes before prepare (the turn's own
# deadline still cancels it sooner).
PREPARE_TIMEOUT_S = 30.0

# Turns whose task id is kept for a cancel after their stream was dropped.
PENDING_KEPT = 4096

# JSON-RPC errors that mean the RPC URL does not take our requests at all
# (parse error, invalid request, method not found): any other error to the
# probe (task not found, invalid params) shows a JSON-RPC server that knows GetTask.
_PROBE_REFUSED = {-32700, -32600, -32601}


@dataclass(frozen=True)
class Endpoint:
    """What the agent card says: where to send JSON-RPC, which method set, whether to stream."""

    card_url: str
    rpc_url: str
    version: str  # "1.0" | "0.3"
    streaming: bool


def norm_state(state: Any) -> str:
    """A task state as 0.3 spells it: TASK_STATE_INPUT_REQUIRED -> input-required."""
    if not isinstance(state, str):
        return ""
    s = state.lower()
    if s.startswith("task_state_"):
        s = s[11:]
    s = s.replace("_", "-")
    return "canceled" if s == "cancelled" else s


def loopback_url(url: str, what: str, fix: str) -> str:
    """``url`` with a loopback host (localhost read as 127.0.0.1, never
    resolved), or UsageError: the harness's traffic stays on this machine."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        parts.port  # noqa: B018 - raises on a bad port
    except ValueError as exc:
        raise UsageError(f"{what} {url!r} is not a URL ({exc}); {fix}") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(f"{what} {url!r} is not an http:// URL; {fix}")
    if host.lower() == "localhost":
        return url.replace(parts.netloc, parts.netloc.lower().replace("localhost", "127.0.0.1", 1), 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is None or not ip.is_loopback:
        raise UsageError(
            f"{what} {url!r}: {host} is not a loopback address; kstress keeps its traffic on loopback "
            f"(127.0.0.1, localhost or [::1]): {fix}"
        )
    return url


def card_urls(url: str) -> list[str]:
    """Where the agent card of the agent at ``url`` may be: ``url`` itself when
    it names a .json file (Mastra's /api/.well-known/:agentId/agent-card.json),
    else the well-known paths under it (LangGraph's /a2a/{assistant_id} too)."""
    if urlsplit(url).path.endswith(".json"):
        return [url]
    base = url.rstrip("/")
    return [base + p for p in CARD_PATHS]


def parse_card(card: Any, card_url: str) -> Endpoint:
    """The endpoint an agent card names, or UsageError naming what is missing.

    1.0: ``supportedInterfaces[]`` with ``protocolBinding`` JSONRPC (its own
    ``protocolVersion``); 0.3: ``url`` with ``preferredTransport`` JSONRPC (or
    an ``additionalInterfaces[]`` entry with transport JSONRPC). A relative URL
    is read against the card's."""
    fix = "serve the card of an A2A agent with a JSON-RPC interface (A2A 1.0 supportedInterfaces[].url with protocolBinding JSONRPC, or 0.3 url + preferredTransport JSONRPC)"
    if not isinstance(card, dict):
        raise UsageError(f"the agent card at {card_url} is not a JSON object; {fix}")
    streaming = bool((card.get("capabilities") or {}).get("streaming")) if isinstance(card.get("capabilities"), dict) else False
    rpc = version = None
    bindings: list[str] = []
    interfaces = card.get("supportedInterfaces", card.get("supported_interfaces"))
    if isinstance(interfaces, list):
        for i in interfaces:
            if not isinstance(i, dict):
                continue
            binding = str(i.get("protocolBinding", i.get("transport", "")))
            bindings.append(binding)
            if binding.upper() == "JSONRPC" and isinstance(i.get("url"), str) and i["url"]:
                rpc = i["url"]
                version = str(i.get("protocolVersion") or card.get("protocolVersion") or "1.0")
                break
    if rpc is None and isinstance(card.get("url"), str) and card["url"]:
        preferred = str(card.get("preferredTransport") or "JSONRPC")
        bindings.append(preferred)
        if preferred.upper() == "JSONRPC":
            rpc = card["url"]
        else:
            for i in card.get("additionalInterfaces") or []:
                if isinstance(i, dict) and str(i.get("transport", "")).upper() == "JSONRPC" and isinstance(i.get("url"), str):
                    rpc = i["url"]
                    break
        version = str(card.get("protocolVersion") or "0.3")
    if rpc is None:
        said = f"it declares only {sorted(set(bindings))} (kstress speaks JSONRPC)" if bindings else "it names no RPC URL"
        raise UsageError(f"the agent card at {card_url}: {said}; {fix}")
    rpc = urljoin(card_url, rpc)
    rpc = loopback_url(rpc, f"the RPC URL of the agent card at {card_url}", "serve the agent on loopback and give the card its real address (fasta2a: agent_to_a2a(url=...))")
    family = "1.0" if version.strip().startswith(("1", "v1")) else "0.3"
    return Endpoint(card_url, rpc, family, streaming)


def request_body(ep: Endpoint, method: str, params: dict[str, Any], rid: int) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": rid, "method": METHODS[ep.version][method], "params": params})


def message_params(version: str, text: str, context_id: str | None) -> dict[str, Any]:
    """A user message as ``version`` spells it (1.0: ROLE_USER and bare parts;
    0.3: ``kind`` on the message and each part). No configuration: both
    versions block by default, and a 0.2 server wants acceptedOutputModes beside one."""
    if version == "1.0":
        msg: dict[str, Any] = {"role": "ROLE_USER", "parts": [{"text": text}], "messageId": uuid.uuid4().hex}
    else:
        msg = {"kind": "message", "role": "user", "parts": [{"kind": "text", "text": text}], "messageId": uuid.uuid4().hex}
    if context_id is not None:
        msg["contextId"] = context_id
    return {"message": msg}


def parts_text(parts: Any) -> str:
    if not isinstance(parts, list):
        return ""
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


class SSEParser:
    """Server-sent events from bytes as they arrive: each event's data (its
    ``data:`` lines joined), comments, ``event:``, ``id:`` and ``retry:``
    lines read past. Lines end in LF, CRLF or CR."""

    __slots__ = ("_buf", "_data")

    def __init__(self) -> None:
        self._buf = b""
        self._data: list[bytes] = []

    @property
    def pending(self) -> int:
        return len(self._buf) + sum(len(d) for d in self._data)

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" in buf:
            if buf.endswith(b"\r"):  # its LF may be in the next chunk
                self._buf = buf
                return []
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[bytes] = []
        lines = buf.split(b"\n")
        self._buf = lines.pop()
        data = self._data
        for line in lines:
            if not line:
                if data:
                    out.append(data[0] if len(data) == 1 else b"\n".join(data))
                    data.clear()
            elif line.startswith(b"data:"):
                v = line[5:]
                data.append(v[1:] if v[:1] == b" " else v)
        return out

    def end(self) -> list[bytes]:
        """At the stream's end: an event whose blank line never came is
        taken (the spec drops it; a server that omits the last blank line
        still said what it said)."""
        out = self.feed(b"\n\n") if (self._buf or self._data) else []
        return out


class TurnReader:
    """One turn's JSON-RPC results, in order, to a ``TurnSink``: the task's
    id and context, its state, the answer's chunks. Pure: fed the results a
    stream or a poll returned, it calls the sink and says when the turn ended.

    The answer is each artifact's chunks as streamed (``append``), not the
    final full copy a server sends on top of them (fasta2a's last chunk has
    ``append: false, lastChunk: true`` and repeats the whole text): a
    non-append chunk of an artifact already begun replaces it, and is passed
    as ``done(text)`` only when it differs from what was streamed."""

    __slots__ = ("sink", "task_id", "context_id", "state", "ended", "_order", "_streamed", "_whole", "_deltas", "_status_text", "_message_text")

    def __init__(self, sink: TurnSink) -> None:
        self.sink = sink
        self.task_id: str | None = None
        self.context_id: str | None = None
        self.state = ""
        self.ended = False
        self._order: list[str] = []  # artifact ids, first seen first
        self._streamed: dict[str, list[str]] = {}  # artifact id -> its chunks streamed
        self._whole: dict[str, str] = {}  # artifact id -> text given whole (a replacement, a task's artifacts)
        self._deltas: list[str] = []
        self._status_text = ""
        self._message_text = ""

    # -- one JSON-RPC result ------------------------------------------------

    def result(self, r: Any) -> bool:
        """Read one result (a stream event, a send or get answer); True once
        the turn has ended (done or error called)."""
        if self.ended:
            return True
        if not isinstance(r, dict):
            return self._fail("bad_response", f"a JSON-RPC result that is not an object: {_excerpt(r)}")
        kind = r.get("kind")
        if kind is None:
            if "statusUpdate" in r or "status_update" in r:
                return self._status(r.get("statusUpdate") or r.get("status_update"))
            if "artifactUpdate" in r or "artifact_update" in r:
                return self._artifact(r.get("artifactUpdate") or r.get("artifact_update"))
            if "task" in r:
                return self._task(r["task"])
            if "message" in r and isinstance(r["message"], dict):
                return self._message(r["message"])
            if "status" in r and "id" in r:  # a bare Task (a GetTask answer)
                return self._task(r)
            if "parts" in r and "role" in r:
                return self._message(r)
            return self._fail("bad_response", f"a result that is no task, message, status or artifact update: {_excerpt(r)}")
        if kind == "task":
            return self._task(r)
        if kind == "status-update":
            return self._status(r)
        if kind == "artifact-update":
            return self._artifact(r)
        if kind == "message":
            return self._message(r)
        return self._fail("bad_response", f"a result of unknown kind {kind!r}: {_excerpt(r)}")

    def jsonrpc_error(self, err: Any) -> bool:
        code = err.get("code") if isinstance(err, dict) else None
        msg = err.get("message") if isinstance(err, dict) else None
        return self._fail(f"jsonrpc_{code}" if isinstance(code, int) else "jsonrpc_error", f"JSON-RPC error {code}: {msg or _excerpt(err)}")

    def finish(self) -> None:
        """The stream or body ended: a turn not ended by then was cut."""
        if not self.ended:
            said = f"in state {self.state!r}" if self.state else "before any task state"
            self._fail("stream_cut", f"the stream ended {said}, before the task reached a final state (task {self.task_id})")

    # -- the shapes -----------------------------------------------------------

    def _ids(self, task_id: Any, context_id: Any) -> None:
        if self.task_id is None and isinstance(task_id, str):
            self.task_id = task_id
        if self.context_id is None and isinstance(context_id, str):
            self.context_id = context_id

    def _task(self, t: Any) -> bool:
        if not isinstance(t, dict):
            return self._fail("bad_response", f"a task that is not an object: {_excerpt(t)}")
        self._ids(t.get("id"), t.get("contextId", t.get("context_id")))
        for a in t.get("artifacts") or ():
            if isinstance(a, dict):
                aid = str(a.get("artifactId", a.get("artifact_id", len(self._order))))
                if aid not in self._streamed and aid not in self._whole:
                    self._order.append(aid)
                if aid not in self._streamed:  # streamed chunks win over a copy of them
                    self._whole[aid] = parts_text(a.get("parts"))
        return self._state(t.get("status"))

    def _status(self, u: Any) -> bool:
        if not isinstance(u, dict):
            return self._fail("bad_response", f"a status update that is not an object: {_excerpt(u)}")
        self._ids(u.get("taskId", u.get("task_id")), u.get("contextId", u.get("context_id")))
        return self._state(u.get("status"))

    def _state(self, status: Any) -> bool:
        if not isinstance(status, dict):
            return False
        self.state = norm_state(status.get("state"))
        m = status.get("message")
        if isinstance(m, dict):
            text = parts_text(m.get("parts"))
            if text:
                self._status_text = text
        if self.state == "completed":
            return self._done()
        if self.state in FAILURES:
            why = f": {self._status_text}" if self._status_text else " (the agent gave no reason)"
            return self._fail(FAILURES[self.state], f"task {self.task_id} ended {self.state}{why}")
        return False

    def _artifact(self, u: Any) -> bool:
        # the hot path (20 of fasta2a's 24 events a turn): class checks, no
        # nested .get defaults, one text part read directly
        a = u.get("artifact") if u.__class__ is dict else None
        if a.__class__ is not dict:
            return self._fail("bad_response", f"an artifact update without an artifact: {_excerpt(u)}")
        if self.task_id is None or self.context_id is None:
            self._ids(u.get("taskId", u.get("task_id")), u.get("contextId", u.get("context_id")))
        aid = a.get("artifactId")
        if aid is None:
            aid = a.get("artifact_id", "")
        if aid.__class__ is not str:
            aid = str(aid)
        parts = a.get("parts")
        if parts.__class__ is list and len(parts) == 1 and parts[0].__class__ is dict and parts[0].get("text").__class__ is str:
            text = parts[0]["text"]
        else:
            text = parts_text(parts)
        chunks = self._streamed.get(aid)
        if chunks is None and aid not in self._whole:
            self._order.append(aid)
            # a new artifact that repeats every chunk streamed so far is a
            # full copy under another id, not more answer
            if not u.get("append") and self._deltas and text == "".join(self._deltas):
                self._whole[aid] = ""
                return False
            self._streamed[aid] = [text]
            if text:
                self._deltas.append(text)
                self.sink.delta(text)
        elif u.get("append"):
            if chunks is None:
                chunks = self._streamed[aid] = []
            chunks.append(text)
            if text:
                self._deltas.append(text)
                self.sink.delta(text)
        else:
            self._whole[aid] = text  # a replacement: the full copy
        return False

    def _message(self, m: Any) -> bool:
        self._ids(m.get("taskId", m.get("task_id")), m.get("contextId", m.get("context_id")))
        role = str(m.get("role", "")).lower()
        if role in ("user", "role_user"):
            return False  # an echo of the input
        self._message_text = parts_text(m.get("parts"))
        if self.task_id is None:
            # a Message, not a Task: the agent answered at once, and that is the turn
            self.state = "completed"
            return self._done()
        return False

    # -- the end ----------------------------------------------------------

    def answer(self) -> str:
        texts = [self._whole[aid] if aid in self._whole else "".join(self._streamed.get(aid, ())) for aid in self._order]
        text = "".join(texts)
        return text or self._message_text or self._status_text

    def _done(self) -> bool:
        self.ended = True
        text = self.answer()
        self.sink.done(None if self._deltas and text == "".join(self._deltas) else text)
        return True

    def _fail(self, code: str, message: str) -> bool:
        self.ended = True
        self.sink.error(code, message)
        return True


def feed_event(data: bytes, reader: TurnReader) -> bool:
    """One JSON-RPC response (an SSE event's data, a body) into the reader;
    True once the turn has ended."""
    try:
        answer = orjson.loads(data)
    except orjson.JSONDecodeError:
        reader.sink.frame({"raw": data[:200].decode("utf-8", "replace")}, len(data))
        return reader._fail("bad_response", f"an event that is not JSON: {_excerpt(data)}")
    reader.sink.frame(answer, len(data))
    if not isinstance(answer, dict):
        return reader._fail("bad_response", f"a JSON-RPC response that is not an object: {_excerpt(data)}")
    if "error" in answer:
        return reader.jsonrpc_error(answer["error"])
    if "result" not in answer:
        return reader._fail("bad_response", f"a JSON-RPC response with neither result nor error: {_excerpt(data)}")
    return reader.result(answer["result"])


def _excerpt(value: Any, n: int = 200) -> str:
    s = value.decode("utf-8", "replace") if isinstance(value, (bytes, bytearray)) else repr(value)
    return s if len(s) <= n else s[:n] + "..."


@dataclass
class _Pending:
    """A turn in flight, for its cancel: its task id once the server named it."""

    task_id: str | None = None
    known: asyncio.Event | None = None


class A2ADriver(AgentDriver):
    """``--protocol a2a``: ``url`` is the agent's base URL (its card under
    /.well-known/) or the card's own URL."""

    name = "a2a"

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.endpoint: Endpoint | None = None
        self.contexts: dict[str, str] = {}  # kstress session -> the server's contextId
        self._pending: collections.OrderedDict[str, _Pending] = collections.OrderedDict()
        self._ids = itertools.count(1)
        self._prepare_lock = asyncio.Lock()

    # -- before the run -----------------------------------------------------

    async def prepare(self, http: "aiohttp.ClientSession", timeout_s: float) -> None:
        import aiohttp

        loopback_url(self.url, "the agent URL", "give the URL of an agent served on this machine")
        timeout = aiohttp.ClientTimeout(total=timeout_s)
        tried: list[str] = []
        card = card_url = None
        for url in card_urls(self.url):
            status, ctype, body = await _get(http, url, timeout, "the agent card")
            if status == 404 and url != card_urls(self.url)[-1]:
                tried.append(f"{url} answered 404")
                continue
            if status != 200:
                tried.append(f"{url} answered HTTP {status}: {_excerpt(body)}")
                raise UsageError(f"no A2A agent card: {'; '.join(tried)}; give --url the agent's base URL (its card at /.well-known/agent-card.json) or the card's own URL")
            if "html" in ctype or body.lstrip()[:1] == b"<":
                raise UsageError(f"{url} answered HTML ({ctype or 'no content type'}), not an agent card: {_excerpt(body, 120)}; give --url the A2A agent's base URL, not a web page")
            try:
                card = orjson.loads(body)
            except orjson.JSONDecodeError:
                raise UsageError(f"{url} answered {ctype or 'no content type'} that is not JSON ({_excerpt(body, 120)}); an A2A agent card is a JSON object") from None
            card_url = url
            break
        assert card_url is not None
        ep = parse_card(card, card_url)
        await self._probe(http, ep, timeout)
        self.endpoint = ep

    async def _probe(self, http: "aiohttp.ClientSession", ep: Endpoint, timeout: "aiohttp.ClientTimeout") -> None:
        """GetTask of a task that does not exist must be a JSON-RPC error (or a
        result): anything else and the RPC URL is not this agent's JSON-RPC."""
        import aiohttp

        body = request_body(ep, "get", {"id": f"kstress-probe-{uuid.uuid4().hex}"}, 0)
        fix = f"the card at {ep.card_url} must name the address the agent's JSON-RPC is served at (fasta2a: agent_to_a2a(url=...); its default is http://localhost:8000)"
        try:
            async with http.post(ep.rpc_url, data=body, headers=_headers(ep, False), timeout=timeout) as resp:
                raw = await read_body(resp)
                status = resp.status
        except ConnError:
            raise  # the client's: nobody listening is not ready yet (a launch), a slow agent is what the run is for
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise UsageError(f"the RPC URL {ep.rpc_url} (from the agent card) does not answer ({type(exc).__name__}: {exc}); {fix}") from None
        try:
            answer = orjson.loads(raw)
        except orjson.JSONDecodeError:
            answer = None
        if not isinstance(answer, dict) or not ("error" in answer or "result" in answer):
            # fasta2a answers an unknown task with -32001; an HTTP error with a
            # JSON-RPC body is still JSON-RPC, a 404 page is not
            raise UsageError(f"the RPC URL {ep.rpc_url} (from the agent card) answered HTTP {status} that is not JSON-RPC ({_excerpt(raw, 120)}) to {METHODS[ep.version]['get']}; {fix}")
        err = answer.get("error")
        if isinstance(err, dict) and err.get("code") in _PROBE_REFUSED:
            raise UsageError(
                f"the RPC URL {ep.rpc_url} refused {METHODS[ep.version]['get']} with JSON-RPC error {err.get('code')} ({err.get('message')}): "
                f"the card says A2A {ep.version}, whose methods this server does not take; fix the card's protocolVersion, or serve A2A 1.0 or 0.3"
            )

    # -- a turn -------------------------------------------------------------

    async def run_turn(self, http: "aiohttp.ClientSession", turn: "Turn", sink: TurnSink, *, session: str | None, history: list[tuple[str, str]] | None) -> None:
        ep = self.endpoint
        if ep is None:
            # a driver made after the readiness probe (a launch makes one for
            # the probe and another for the run) reads the card on first use
            async with self._prepare_lock:
                if self.endpoint is None:
                    await self.prepare(http, PREPARE_TIMEOUT_S)
            ep = self.endpoint
            assert ep is not None
        reader = TurnReader(sink)
        pending = _Pending()
        self._pending[turn.nonce] = pending
        while len(self._pending) > PENDING_KEPT:
            self._pending.popitem(last=False)
        finished = False
        try:
            context = self.contexts.get(session) if session is not None else None
            params = message_params(ep.version, turn.text, context)
            streamed = await self._send(http, ep, params, reader, pending)
            if not reader.ended and reader.task_id is not None and not streamed:
                # a task not done yet (fasta2a always answers `submitted`; a
                # stream request may be answered with a JSON task too): poll it.
                # A stream that ends early is cut, not polled.
                await self._poll(http, ep, reader)
            reader.finish()
            finished = True
        finally:
            if session is not None and reader.context_id is not None:
                self.contexts.setdefault(session, reader.context_id)
            if finished or pending.task_id is None:
                # a turn cancelled mid-stream keeps its task id for cancel()
                self._pending.pop(turn.nonce, None)
            if pending.known is not None:
                pending.known.set()  # a cancel waiting for a task id that will not come

    async def _send(self, http: "aiohttp.ClientSession", ep: Endpoint, params: dict[str, Any], reader: TurnReader, pending: _Pending) -> bool:
        """Send the message and read the answer; True when it was an event stream."""
        import aiohttp

        method = "stream" if ep.streaming else "send"
        body = request_body(ep, method, params, next(self._ids))
        sink = reader.sink
        async with http.post(ep.rpc_url, data=body, headers=_headers(ep, ep.streaming)) as resp:
            if resp.status >= 400:
                raw = await read_body(resp)
                try:
                    answer = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    answer = None
                if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
                    sink.frame(answer, len(raw))
                    reader.jsonrpc_error(answer["error"])
                else:
                    reader._fail(f"http_{resp.status}", f"HTTP {resp.status} from {ep.rpc_url}: {_excerpt(raw)}")
                return False
            ctype = resp.headers.get("Content-Type", "").lower()
            if "text/event-stream" in ctype:
                sse = SSEParser()
                try:
                    async for chunk in resp.content.iter_any():
                        for data in sse.feed(chunk):
                            if self._event(data, reader, pending):
                                # the final state: fasta2a closes now; a server
                                # that does not is read a moment, so the
                                # connection is kept (an unread body closes it)
                                await drain(resp)
                                return True
                        if sse.pending > MAX_FRAME:
                            raise ConnError("protocol", f"an SSE event of more than {MAX_FRAME} bytes (the frame limit)")
                    for data in sse.end():
                        if self._event(data, reader, pending):
                            return True
                except aiohttp.ClientPayloadError as exc:
                    reader._fail("stream_cut", f"the stream broke off ({exc}) in state {reader.state!r} (task {reader.task_id})")
                return True
            raw = await read_body(resp)
            if "json" not in ctype and raw.lstrip()[:1] != b"{":
                reader._fail("bad_response", f"HTTP {resp.status} {ctype or 'with no content type'}, not JSON-RPC: {_excerpt(raw)}")
                return False
            self._event(raw, reader, pending)
            return False

    @staticmethod
    def _event(data: bytes, reader: TurnReader, pending: _Pending) -> bool:
        ended = feed_event(data, reader)
        if pending.task_id is None and reader.task_id is not None:
            pending.task_id = reader.task_id
            if pending.known is not None:
                pending.known.set()
        return ended

    async def _poll(self, http: "aiohttp.ClientSession", ep: Endpoint, reader: TurnReader) -> None:
        """GetTask until the task ends; the client's turn deadline bounds it."""
        wait = POLL_FIRST_S
        while not reader.ended:
            await asyncio.sleep(wait)
            wait = min(wait * 2, POLL_MAX_S)
            body = request_body(ep, "get", {"id": reader.task_id}, next(self._ids))
            async with http.post(ep.rpc_url, data=body, headers=_headers(ep, False)) as resp:
                raw = await read_body(resp)
                if resp.status >= 400:
                    try:
                        answer = orjson.loads(raw)
                    except orjson.JSONDecodeError:
                        answer = None
                    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
                        reader.sink.frame(answer, len(raw))
                        reader.jsonrpc_error(answer["error"])
                    else:
                        reader._fail(f"http_{resp.status}", f"HTTP {resp.status} to {METHODS[ep.version]['get']} from {ep.rpc_url}: {_excerpt(raw)}")
                    return
            self._event(raw, reader, _Pending(task_id=reader.task_id))

    # -- a cancel -----------------------------------------------------------

    async def cancel(self, http: "aiohttp.ClientSession", turn: "Turn") -> str | None:
        """CancelTask (tasks/cancel) for the turn's task; returns what the
        server answered: the task's state after it (``canceled``; fasta2a
        says ``completed`` after the task ran to its end), ``jsonrpc_<code>``,
        ``http_<status>``, ``bad_response``, or None when the turn never
        named a task (it ended, or its server never answered).

        The request needs a connection of its own while the turn's stream
        holds the turn's: on a session limited to one connection it waits
        for the stream's end."""
        ep = self.endpoint
        pending = self._pending.get(turn.nonce)
        if ep is None or pending is None:
            return None
        if pending.task_id is None:
            # sent, not yet answered: the task id comes with the first event
            pending.known = pending.known or asyncio.Event()
            await pending.known.wait()
        self._pending.pop(turn.nonce, None)
        if pending.task_id is None:
            return None  # the turn ended without naming a task
        body = request_body(ep, "cancel", {"id": pending.task_id}, next(self._ids))
        async with http.post(ep.rpc_url, data=body, headers=_headers(ep, False)) as resp:
            raw = await read_body(resp)
            status = resp.status
        return cancel_outcome(status, raw)


def cancel_outcome(status: int, raw: bytes) -> str:
    """What a CancelTask answer says, as one word for the record."""
    try:
        answer = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return f"http_{status}" if status >= 400 else "bad_response"
    if isinstance(answer, dict) and isinstance(answer.get("error"), dict):
        code = answer["error"].get("code")
        return f"jsonrpc_{code}" if isinstance(code, int) else "jsonrpc_error"
    if status >= 400:
        return f"http_{status}"
    r = answer.get("result") if isinstance(answer, dict) else None
    if isinstance(r, dict):
        task = r.get("task") if isinstance(r.get("task"), dict) else r
        state = norm_state((task.get("status") or {}).get("state") if isinstance(task.get("status"), dict) else None)
        if state:
            return state
    return "bad_response"


async def read_body(resp: "aiohttp.ClientResponse") -> bytes:
    """The whole body, at most the frame limit (content.read(n) returns what
    has arrived, not n bytes)."""
    parts: list[bytes] = []
    n = 0
    while True:
        chunk = await resp.content.read(MAX_FRAME + 1 - n)
        if not chunk:
            return b"".join(parts)
        parts.append(chunk)
        n += len(chunk)
        if n > MAX_FRAME:
            raise ConnError("protocol", f"an answer of more than {MAX_FRAME} bytes (the frame limit) from {resp.url}")


def _headers(ep: Endpoint, stream: bool) -> dict[str, str]:
    h = {"Content-Type": "application/json", "Accept": "text/event-stream" if stream else "application/json"}
    if ep.version == "1.0":
        h["A2A-Version"] = "1.0"  # a2a-sdk 1.x reads a request without it as 0.3
    return h


async def _get(http: "aiohttp.ClientSession", url: str, timeout: "aiohttp.ClientTimeout", what: str) -> tuple[int, str, bytes]:
    import aiohttp

    try:
        async with http.get(url, timeout=timeout, headers={"Accept": "application/json"}) as resp:
            return resp.status, resp.headers.get("Content-Type", "").lower(), await read_body(resp)
    except ConnError:
        raise  # the client's: nobody listening is not ready yet (a launch), a slow agent is what the run is for
    except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
        raise UsageError(f"{what} at {url} could not be read ({type(exc).__name__}: {exc}); start the agent first, or fix --url") from None
