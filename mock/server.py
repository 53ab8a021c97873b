"""The mock LLM as an aiohttp application, and a runner that owns its socket.

``create_app(settings)`` is a plain ``web.Application`` factory; ``MockServer``
is the lifecycle (an async context manager that binds, reports its URL and
closes idempotently). No signal handlers are installed here: that is the CLI's
business.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from aiohttp import web

from . import wire
from .catalog import DEFAULT_CATALOG, Catalog
from .errors import ConfigError, MarkerError
from .markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS, MS_MAX, Call, Plan, build_plan, find_nonce, parse_marker, text_verdict
from .script import Script
from .verdict import StreamClock, check, latest_user_index, message_text, verdict_text

RECENT_CAPACITY = 1000
HANG_LIMIT_S = MS_MAX / 1000
# Client went away: aiohttp raises these (ClientConnectionResetError subclasses
# ConnectionResetError) when writing to a closed transport.
_GONE = (ConnectionResetError, BrokenPipeError)


@dataclass(frozen=True)
class MockSettings:
    host: str = "127.0.0.1"
    port: int = 0
    ttft_ms: int = 0
    chunk_delay_ms: int = 0
    text_chunks: int = 20
    tool_ms: int = DEFAULT_TOOL_MS
    mixed_ms: int = DEFAULT_MIXED_MS
    catalog: Catalog = DEFAULT_CATALOG
    script: Script | None = None
    log_path: Path | None = None
    model: str = "kstress-mock"
    # Also serve on this unix socket: inside a private network namespace the
    # TCP port is unreachable from the host, a socket file is not.
    unix_path: Path | None = None

    def __post_init__(self) -> None:
        def rule(ok: bool, name: str, value: Any, want: str) -> None:
            if not ok:
                raise ConfigError(f"{name}={value!r} is invalid: {want}")

        rule(isinstance(self.port, int) and 0 <= self.port <= 65535, "port", self.port, "use 0 (pick one) to 65535")
        rule(0 <= self.ttft_ms <= MS_MAX, "ttft_ms", self.ttft_ms, f"use 0 to {MS_MAX}")
        rule(0 <= self.chunk_delay_ms <= 60_000, "chunk_delay_ms", self.chunk_delay_ms, "use 0 to 60000")
        rule(1 <= self.text_chunks <= 10_000, "text_chunks", self.text_chunks, "use 1 to 10000")
        rule(1 <= self.tool_ms <= MS_MAX, "tool_ms", self.tool_ms, f"use 1 to {MS_MAX}")
        rule(1 <= self.mixed_ms <= MS_MAX, "mixed_ms", self.mixed_ms, f"use 1 to {MS_MAX}")
        rule(bool(self.host), "host", self.host, "give an address to bind, e.g. 127.0.0.1")

    @property
    def paced(self) -> bool:
        return self.ttft_ms > 0 or self.chunk_delay_ms > 0


@dataclass
class MockState:
    """Counters, the recent-request ring and the stream clock of one app."""

    counters: collections.Counter = field(default_factory=collections.Counter)
    plans: collections.Counter = field(default_factory=collections.Counter)
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RECENT_CAPACITY))
    clock: StreamClock = field(default_factory=StreamClock)
    inflight: int = 0
    hanging: int = 0
    started: float = field(default_factory=time.time)
    log: IO[str] | None = None
    # (marker token, nonce length) -> _Shape, or None when it cannot be templated;
    # a pure function of the settings, so reset() keeps it
    shapes: dict[tuple[str | None, int], "_Shape | None"] = field(default_factory=dict)

    def reset(self) -> None:
        self.counters.clear()
        self.plans.clear()
        self.recent.clear()
        self.clock.clear()

    def record(self, rec: dict[str, Any]) -> None:
        self.recent.append(rec)
        if self.log is not None:
            self.log.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def snapshot(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "inflight": self.inflight,
            "hanging": self.hanging,
            "nonces_tracked": len(self.clock),
            "shapes_cached": sum(1 for v in self.shapes.values() if v is not None),
            **dict(self.counters),
            "plans": dict(self.plans),
        }


SETTINGS_KEY = web.AppKey("settings", MockSettings)
STATE_KEY = web.AppKey("state", MockState)


def _usage(messages: list, completion_chars: int) -> dict[str, int]:
    prompt = sum(len(message_text(m.get("content"))) for m in messages if isinstance(m, dict))
    p, c = math.ceil(prompt / 4), math.ceil(completion_chars / 4)
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def _json_error(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
) -> web.Response:
    return web.json_response(wire.error_body(message, type_, code, param), status=status, headers=headers)


class _Reply:
    """What one chat request gets: events to stream, or a complete object."""

    __slots__ = ("events", "content", "calls", "finish", "status", "error", "headers", "plan_kind", "verdict", "verdict_ok", "nonce", "mark_nonce")

    def __init__(self) -> None:
        self.events: list[bytes] | None = None
        self.content: str | None = None
        self.calls: tuple[Call, ...] = ()
        self.finish: str | None = None
        self.status = 200
        self.error: dict[str, Any] | None = None
        self.headers: dict[str, str] | None = None
        self.plan_kind = "text"
        self.verdict: str | None = None
        self.verdict_ok = False
        self.nonce: str | None = None
        self.mark_nonce = False


async def chat_completions(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS_KEY]
    state = request.app[STATE_KEY]
    state.inflight += 1
    state.counters["requests"] += 1
    t0 = time.monotonic()
    # int()/1e6 rather than round(x, 6): the same digits, but round() with
    # ndigits goes through a decimal conversion that cost 5% of the mock's
    # requests/s under make bench
    rec: dict[str, Any] = {"ts": int(time.time() * 1e6) / 1e6, "path": request.path}
    try:
        resp = await _chat(request, settings, state, rec)
        rec["status"] = resp.status
        return resp
    except asyncio.CancelledError:
        # handler_cancellation: the client went away (e.g. gave up on a hang)
        state.counters["disconnects"] += 1
        rec["status"] = 499
        raise
    finally:
        state.inflight -= 1
        rec["ms"] = int((time.monotonic() - t0) * 1e6) / 1e3
        state.record(rec)


async def _chat(request: web.Request, settings: MockSettings, state: MockState, rec: dict[str, Any]) -> web.StreamResponse:
    raw = await request.read()
    try:
        body = json.loads(raw)
    except ValueError as exc:
        state.counters["bad_requests"] += 1
        return _json_error(400, f"the request body is not valid JSON ({exc}); send a chat.completions request object")
    if not isinstance(body, dict):
        state.counters["bad_requests"] += 1
        return _json_error(400, "the request body must be a JSON object with a 'messages' list")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        state.counters["bad_requests"] += 1
        return _json_error(400, "'messages' is missing or empty; send at least one user message", param="messages")
    user_at = latest_user_index(messages)
    if user_at is None:
        state.counters["bad_requests"] += 1
        return _json_error(400, "'messages' holds no user message; the mock reads its markers from the latest one", param="messages")
    stream = bool(body.get("stream"))
    opts = body.get("stream_options")
    include_usage = stream and isinstance(opts, dict) and bool(opts.get("include_usage"))
    model = body.get("model") if isinstance(body.get("model"), str) and body.get("model") else settings.model
    user_text = message_text(messages[user_at].get("content"))
    followup = isinstance(messages[-1], dict) and messages[-1].get("role") == "tool"
    rec["stream"] = stream
    rec["n_messages"] = len(messages)
    rec["followup"] = followup

    if stream and not followup and settings.script is None and not settings.chunk_delay_ms:
        found = _shape_for(user_text, settings, state)
        if found is not None:
            shape, nonce = found
            rec["plan"] = shape.kind
            rec["nonce"] = nonce
            rec["marker"] = shape.marker
            state.plans[shape.kind] += 1
            renderer = wire.Renderer(model=model, include_usage=include_usage, coalesce=True)
            usage = _usage(messages, shape.completion_chars) if include_usage else None
            body_ = shape.template.fill(nonce, renderer.head, renderer.tail).encode()
            events = renderer.close_events([body_], shape.finish, usage)
            return await _send(request, events, settings, state, rec, nonce if shape.has_tools else None)

    if settings.script is not None:
        reply = _scripted(settings.script, rec)
        plan: Plan | None = None
    else:
        try:
            plan = build_plan(user_text, settings.catalog, settings.tool_ms, settings.mixed_ms)
        except MarkerError as exc:
            state.counters["bad_requests"] += 1
            rec["error"] = str(exc)
            return _json_error(400, str(exc), param="messages", code="kstress_marker")
        reply = _planned(plan, messages, user_at, followup, settings, state)
        rec["plan"] = plan.kind
        rec["nonce"] = plan.nonce
        rec["marker"] = plan.marker
    state.plans[reply.plan_kind] += 1
    if reply.verdict:
        rec["verdict"] = reply.verdict
        state.counters["verdicts_ok" if reply.verdict_ok else "verdicts_bad"] += 1

    if reply.error is not None:
        state.counters["errors_injected"] += 1
        return web.json_response(reply.error, status=reply.status, headers=reply.headers)

    if plan is not None and plan.kind == "hang":
        state.hanging += 1
        try:
            await asyncio.sleep(HANG_LIMIT_S if plan.hang_ms is None else plan.hang_ms / 1000)
        finally:
            state.hanging -= 1

    if not stream:
        if plan is not None and plan.kind == "err" and reply.verdict is None:
            return _nonstream_fault(request, plan, state)
        usage = _usage(messages, len(reply.content or "") + sum(len(c.arguments) for c in reply.calls))
        if reply.mark_nonce and reply.nonce:
            state.clock.mark(reply.nonce)
        return web.json_response(wire.completion(model, reply.content, reply.calls, usage, reply.finish))

    renderer = wire.Renderer(
        model=model,
        include_usage=include_usage,
        per_chunk_id=plan is not None and plan.quirk == "per_chunk_id",
        event_line="message" if plan is not None and plan.quirk == "event_line" else None,
        coalesce=not settings.chunk_delay_ms,
    )
    events = _events(renderer, reply, plan, messages, settings)
    fault = plan is not None and plan.kind == "err" and reply.verdict is None
    if fault:
        state.counters["errors_injected"] += 1  # midstream / disconnect / malformed
    mark = reply.nonce if reply.mark_nonce and reply.nonce else None
    return await _send(request, events, settings, state, rec, mark, fault)


async def _send(
    request: web.Request,
    events: list[bytes],
    settings: MockSettings,
    state: MockState,
    rec: dict[str, Any],
    mark: str | None,
    fault: bool = False,
) -> web.StreamResponse:
    """Stream ``events``; ``mark`` is the nonce whose tool-call stream ends here."""
    resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    try:
        await resp.prepare(request)
        if settings.ttft_ms:
            await asyncio.sleep(settings.ttft_ms / 1000)
        if fault and wire.CUT in events:
            head = events[: events.index(wire.CUT)]
            await resp.write(b"".join(head))
            state.counters["disconnects_injected"] += 1
            # Drop the connection with the response unfinished, as a crashed
            # upstream does; aiohttp then skips the final chunk.
            if request.transport is not None:
                request.transport.close()
            return resp
        if settings.chunk_delay_ms:
            delay = settings.chunk_delay_ms / 1000
            for k, ev in enumerate(events):
                if k:
                    await asyncio.sleep(delay)
                await resp.write(ev)
            if mark:
                state.clock.mark(mark)
            await resp.write_eof()
        else:
            # Unpaced: the whole stream in one write, headers and the chunked
            # terminator coalesced with it (one awaited write per chunk caps
            # aiohttp near 2,000 streams/s). The bytes on the wire are the same.
            if mark:
                state.clock.mark(mark)
            await resp.write_eof(b"".join(events))
    except _GONE:
        state.counters["disconnects"] += 1
        rec["client_gone"] = True
    return resp


# --- the hot path: replies templated per shape -----------------------------------

SHAPE_KINDS = frozenset({"text", "batch", "mixed", "slowbatch", "serialbatch", "img", "ocr", "resident", "notify"})
SHAPE_CAPACITY = 1024
_MISSING = object()


@dataclass(frozen=True)
class _Shape:
    """Everything a first (non-follow-up) streamed reply to one marker needs,
    for every nonce of one length: the plan's kind, the stream template, and
    the numbers that do not depend on the nonce's characters."""

    kind: str
    marker: str | None
    template: wire.StreamTemplate
    finish: str
    has_tools: bool
    completion_chars: int


def _shape_for(user_text: str, settings: MockSettings, state: MockState) -> tuple[_Shape, str] | None:
    """The cached shape of this message's reply and its nonce, or None when the
    reply must be built the general way (no explicit nonce, a bad marker, a
    fault/hang/quirk marker, a nonce longer than 64)."""
    nonce = find_nonce(user_text)
    if nonce is None:
        return None
    try:
        marker = parse_marker(user_text)
    except MarkerError:
        return None  # the general path answers 400
    key = (marker.token if marker is not None else None, len(nonce))
    shape = state.shapes.get(key, _MISSING)
    if shape is _MISSING:
        shape = _build_shape(marker.token if marker is not None else None, len(nonce), settings)
        if len(state.shapes) < SHAPE_CAPACITY:
            state.shapes[key] = shape
    return None if shape is None else (shape, nonce)  # type: ignore[return-value]


def _build_shape(token: str | None, length: int, settings: MockSettings) -> _Shape | None:
    # build_plan depends on the message only through its marker and its nonce,
    # so "TOKEN #nonce" stands for every message with that marker
    def plan_for(nonce: str) -> Plan:
        return build_plan(f"{token or ''} #{nonce}", settings.catalog, settings.tool_ms, settings.mixed_ms)

    def render(nonce: str) -> list[str]:
        plan = plan_for(nonce)
        if plan.calls:
            return wire.tool_deltas(plan.calls)
        return wire.text_deltas(_text_reply(plan.nonce), settings.text_chunks)

    try:
        plan = plan_for(wire.NONCE_ALPHABET[:length])
    except MarkerError:
        return None
    if plan.kind not in SHAPE_KINDS or plan.quirk is not None:
        return None
    template = wire.StreamTemplate.build(render, length)
    if template is None:
        return None
    chars = sum(len(c.arguments) for c in plan.calls) if plan.calls else len(_text_reply(plan.nonce))
    return _Shape(
        kind=plan.kind,
        marker=plan.marker,
        template=template,
        finish="tool_calls" if plan.calls else "stop",
        has_tools=bool(plan.calls),
        completion_chars=chars,
    )


def _nonstream_fault(request: web.Request, plan: Plan, state: MockState) -> web.StreamResponse:
    state.counters["errors_injected"] += 1
    if plan.err == "disconnect":
        state.counters["disconnects_injected"] += 1
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)  # never reaches the client: the connection is gone
    if plan.err == "malformed":
        return web.Response(status=200, body=b'{"id":"chatcmpl-kstress","choices":[{"index":', content_type="application/json")
    return _json_error(500, f"kstress mock: injected mid-response error (marker {plan.marker})", "server_error", "internal_error")


def _scripted(script: Script, rec: dict[str, Any]) -> _Reply:
    k, entry = script.next()
    rec["script_entry"] = k
    reply = _Reply()
    reply.plan_kind = f"script:{entry.kind}"
    if entry.kind == "text":
        reply.content = entry.text
    elif entry.kind == "tools":
        reply.calls = tuple(
            Call(index=i, id=f"call_script{k}_{i}", name=name, arguments=args, role="script", parallel_safe=True)
            for i, (name, args) in enumerate(entry.calls)
        )
    else:
        reply.status = entry.status
        reply.error = wire.error_body(entry.message, "server_error" if entry.status >= 500 else "invalid_request_error")
    return reply


def _planned(plan: Plan, messages: list, user_at: int, followup: bool, settings: MockSettings, state: MockState) -> _Reply:
    reply = _Reply()
    reply.plan_kind = plan.kind
    reply.nonce = plan.nonce
    if followup:
        line, echoes = check(plan, messages, user_at, settings.catalog, state.clock.elapsed_ms(plan.nonce))
        reply.content = verdict_text(line, echoes)
        reply.verdict = line.format()
        reply.verdict_ok = line.all_ok
        reply.plan_kind = f"{plan.kind}:verdict"
        return reply
    if plan.kind == "err" and plan.err in ("500", "429", "503"):
        reply.status = int(plan.err)
        msg = f"kstress mock: injected HTTP {plan.err} (marker {plan.marker})"
        if plan.err == "429":
            reply.error = wire.error_body(msg, "requests", "rate_limit_exceeded")
            reply.headers = {"retry-after": "1", "x-ratelimit-remaining-requests": "0"}
        elif plan.err == "503":
            reply.error = wire.error_body(msg + ": the engine is currently overloaded", "server_error", "overloaded")
        else:
            reply.error = wire.error_body(msg, "server_error", "internal_error")
        return reply
    if plan.has_tools:
        reply.calls = plan.calls
        reply.mark_nonce = True
        if plan.quirk == "finish_stop":
            reply.finish = "stop"
        return reply
    reply.content = _text_reply(plan.nonce)
    return reply


def _text_reply(nonce: str) -> str:
    return (
        f"This is the kstress mock LLM answering input {nonce}. It streams its reply in pieces "
        f"so that a kernel's delta handling is exercised.\n{text_verdict(nonce)}"
    )


def _events(renderer: wire.Renderer, reply: _Reply, plan: Plan | None, messages: list, settings: MockSettings) -> list[bytes]:
    usage = None
    if renderer.include_usage:
        usage = _usage(messages, len(reply.content or "") + sum(len(c.arguments) for c in reply.calls))
    if plan is not None and plan.kind == "err" and reply.verdict is None:
        # midstream / disconnect / malformed: start a real tool call, then fail
        events = [renderer.role()]
        call = plan.calls[0] if plan.calls else None
        if plan.err in ("midstream", "disconnect") and call is not None:
            frags = wire.fragments([call])
            events.extend(renderer.chunk({"tool_calls": [f]}) for f in frags[:2])
            if plan.err == "midstream":
                events.append(wire.error_event(f"kstress mock: injected mid-stream error (marker {plan.marker})", "server_error", "internal_error"))
            else:
                events.append(wire.CUT)
            return events
        # malformed: a chunk that is not JSON, then a normal end
        events.append(renderer.chunk({"content": "partial "}))
        events.append(b'data: {"id":"chatcmpl-kstress","choices":[{"index":0,"delta":{"content":"broken\n\n')
        events.append(renderer.chunk({}, "stop"))
        events.append(wire.DONE)
        return events
    if reply.calls:
        quirk = plan.quirk if plan is not None else None
        return renderer.tool_events(reply.calls, usage, quirk)
    return renderer.text_events(reply.content or "", settings.text_chunks, usage)


# --- small endpoints -----------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "service": "kstress-mock"})


async def models(request: web.Request) -> web.Response:
    settings = request.app[SETTINGS_KEY]
    return web.json_response(
        {"object": "list", "data": [{"id": settings.model, "object": "model", "created": 0, "owned_by": "kstress"}]}
    )


async def mock_requests(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    raw = request.query.get("n", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= RECENT_CAPACITY:
        return _json_error(400, f"n={raw!r} is invalid: use 1 to {RECENT_CAPACITY}", param="n")
    recent = list(state.recent)[-int(raw):]
    return web.json_response({"requests": recent})


async def mock_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].snapshot())


async def mock_reset(request: web.Request) -> web.Response:
    request.app[STATE_KEY].reset()
    script = request.app[SETTINGS_KEY].script
    if script is not None:
        script.reset()
    return web.json_response({"reset": True})


async def not_found(request: web.Request) -> web.Response:
    return _json_error(404, f"no route {request.method} {request.path}; the mock serves /v1/chat/completions")


def create_app(settings: MockSettings | None = None) -> web.Application:
    settings = settings or MockSettings()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SETTINGS_KEY] = settings
    app[STATE_KEY] = MockState()
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/chat/completions", chat_completions)
    app.router.add_get("/v1/models", models)
    for path in ("/", "/v1", "/v1/", "/health"):
        app.router.add_get(path, health)  # add_get also answers HEAD
    app.router.add_get("/_mock/requests", mock_requests)
    app.router.add_get("/_mock/stats", mock_stats)
    app.router.add_post("/_mock/reset", mock_reset)
    # last, so it only sees what no route above matched: an OpenAI-style 404
    # instead of aiohttp's plain-text one
    app.router.add_route("*", "/{tail:.*}", not_found)

    async def open_log(app: web.Application) -> Any:
        if settings.log_path is not None:
            try:
                # line-buffered: a harness copies the lines of its run while the
                # mock keeps serving (a detached sandbox), so every line must be
                # on disk once its request is answered
                app[STATE_KEY].log = open(settings.log_path, "a", buffering=1)
            except OSError as exc:
                raise ConfigError(f"--log {settings.log_path}: cannot open it for appending ({exc.strerror})") from None
        yield
        if app[STATE_KEY].log is not None:
            app[STATE_KEY].log.close()
            app[STATE_KEY].log = None

    app.cleanup_ctx.append(open_log)
    return app


class MockServer:
    """Runs the app on host:port (0 = pick one). ``async with MockServer(s) as m: m.url``."""

    def __init__(self, settings: MockSettings | None = None) -> None:
        self.settings = settings or MockSettings()
        self.app = create_app(self.settings)
        self._runner: web.AppRunner | None = None
        self.host = self.settings.host
        self.port = self.settings.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def state(self) -> MockState:
        return self.app[STATE_KEY]

    async def start(self) -> "MockServer":
        # handler_cancellation: a hung request must be released the moment its
        # client goes away, leaving no task behind.
        self._runner = web.AppRunner(self.app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.settings.host, self.settings.port, backlog=4096, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await self.aclose()
            raise ConfigError(
                f"cannot listen on {self.settings.host}:{self.settings.port} ({exc.strerror}); "
                "pick another --port or 0 for a free one"
            ) from None
        self.host, self.port = self._runner.addresses[0][:2]
        if self.settings.unix_path is not None:
            try:
                await web.UnixSite(self._runner, str(self.settings.unix_path)).start()
            except OSError as exc:
                await self.aclose()
                raise ConfigError(f"cannot listen on unix socket {self.settings.unix_path} ({exc.strerror})") from None
        return self

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def __aenter__(self) -> "MockServer":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
