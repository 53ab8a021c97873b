"""The mock LLM as an aiohttp application, and a runner that owns its socket.

One handler serves every dialect (``mock/dialects``): read the request into a
neutral turn, plan from its markers, judge a follow-up, record the outcome in
the verdict store (``mock/store.py``), then let the dialect encode the reply.

``create_app(settings)`` is a plain ``web.Application`` factory; ``MockServer``
is the lifecycle (an async context manager that binds, reports its URL and
closes idempotently). No signal handlers are installed here: that is the CLI's
business.

Where the rest of a request's way is:

    exchange.py   its bookkeeping (log line, store record, byte times) and the app's MockState
    shapes.py     first streamed replies, templated per marker and nonce length and cached
    fastpath.py   those replies answered from the connection, below aiohttp's request cycle
    dialects/     each API's requests and replies; wire.py, chat's SSE chunks
    markers.py, verdict.py, store.py   the grammar, the checks of a follow-up, the verdict store
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from aiohttp import web

from . import fastpath, wire
from .catalog import DEFAULT_CATALOG, Catalog
from .dialects import BY_NAME, CHAT, BadRequest, Dialect, Reply, Turn, text_reply
from .errors import ConfigError, MarkerError
from .exchange import RECENT_CAPACITY, Exchange, MockState, begin, end
from .faults import RATE_MAX, TokenBucket, retry_after_headers
from .markers import (
    DEFAULT_MIXED_MS,
    DEFAULT_TOOL_MS,
    MS_MAX,
    QUIRK_DIALECTS,
    Call,
    Fault,
    Plan,
    VerdictLine,
    build_plan,
    find_nonce,
    parse_session_nonce,
    parse_timestamps,
    text_verdict,
)
from .script import Script
from .shapes import shape_for, shape_reply
from .store import CAPACITY as STORE_CAPACITY
from .store import QUERY_LIMIT, STATUS, Entry, VerdictStore
from .verdict import check_history, check_loop, check_session, verdict_text

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
    # nonces the verdict store keeps (the newest; /_mock/verdicts answers null for older ones)
    store_capacity: int = STORE_CAPACITY
    # tags every verdict line (mock/markers.py: sign); the kernel never sees it.
    # Out of repr: settings are logged.
    verdict_key: bytes | None = field(default=None, repr=False)
    # --rate-limit: requests a second across every request (mock/faults.py:
    # TokenBucket); past it a 429 with Retry-After. None: no limit
    rate_limit: float | None = None

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
        rule(1 <= self.store_capacity <= 10_000_000, "store_capacity", self.store_capacity, "use 1 to 10000000")
        rule(
            self.rate_limit is None or (isinstance(self.rate_limit, (int, float)) and 0 < self.rate_limit <= RATE_MAX),
            "rate_limit", self.rate_limit, f"use requests per second above 0 and at most {RATE_MAX:.0f}, or None for no limit",
        )

    @property
    def paced(self) -> bool:
        return self.ttft_ms > 0 or self.chunk_delay_ms > 0


SETTINGS_KEY = web.AppKey("settings", MockSettings)
STATE_KEY = web.AppKey("state", MockState)


# --- the LLM endpoints: one handler for every dialect (the general path) ------------


def _json_error(
    status: int,
    message: str,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
) -> web.Response:
    return web.json_response(wire.error_body(message, type_, code, param), status=status, headers=headers)


def _respond(state: MockState, ex: Exchange, status: int, body: Any, headers: dict | None = None) -> web.Response:
    """A complete JSON response, committed before aiohttp writes it."""
    now = time.monotonic()
    ex.sent(now, now)
    state.commit(ex, status)
    return web.json_response(body, status=status, headers=headers)


_decode = json.JSONDecoder().decode
_TOO_DEEP = "the request body nests too deeply for the mock to read (arrays or objects inside each other, hundreds of levels); send a flatter request"


def _bad_request(state: MockState, ex: Exchange, dialect: Dialect, message: str, param: str | None = None) -> web.Response:
    """HTTP 400 in the dialect's error form, naming the problem; the store and the log say why."""
    state.counters["bad_requests"] += 1
    ex.rec["error"] = message
    if ex.entry is not None:
        ex.entry.error = message
    return _respond(state, ex, 400, dialect.error(400, message, param))


def _route(dialect: Dialect):
    async def handler(request: web.Request) -> web.StreamResponse:
        return await _handle(request, dialect)

    handler.__name__ = f"{dialect.name}_handler"
    return handler


async def chat_completions(request: web.Request) -> web.StreamResponse:
    return await _handle(request, CHAT)


async def _handle(request: web.Request, dialect: Dialect) -> web.StreamResponse:
    settings = request.app[SETTINGS_KEY]
    state = request.app[STATE_KEY]
    ex = begin(state, request.path, dialect)
    status = 500
    try:
        try:
            resp = await _serve(request, dialect, settings, state, ex)
        except (BadRequest, RecursionError) as exc:
            # a request found malformed past the first read (a history the
            # checks cannot walk), always before any byte of a response
            if ex.committed:
                raise
            resp = _bad_request(state, ex, dialect, exc.message if isinstance(exc, BadRequest) else _TOO_DEEP, getattr(exc, "param", None))
        status = resp.status
        return resp
    except asyncio.CancelledError:
        # handler_cancellation: the client went away (e.g. gave up on a hang)
        state.counters["disconnects"] += 1
        status = 499
        raise
    finally:
        committed = ex.committed
        end(state, ex, status)
        if status == 499 and committed:
            # after the commit: the ring and the store say so, the log line stays
            ex.rec["status"] = 499
            if ex.record is not None:
                ex.record[STATUS] = 499


async def _serve(request: web.Request, dialect: Dialect, settings: MockSettings, state: MockState, ex: Exchange) -> web.StreamResponse:
    turn = _read_turn(await request.read(), dialect, state, ex)
    if not isinstance(turn, Turn):
        return turn  # malformed: answered 400
    model = turn.model or settings.model

    if turn.stream and not turn.followup and settings.script is None and not settings.chunk_delay_ms and state.bucket is None:
        found = shape_for(dialect, turn.user_text, settings, state)
        if found is not None:
            events = shape_reply(dialect, turn, found, model, state, ex)
            return await _send(request, events, settings, state, ex, dialect)

    if settings.script is not None:
        return await _scripted(request, dialect, settings, state, ex, turn, model)

    planned = _plan_turn(dialect, turn, settings, state, ex)
    if not isinstance(planned, tuple):
        return planned  # a bad marker: answered 400
    plan, entry, history = planned
    if plan.fault is not None or state.bucket is not None:
        refused = _scheduled(request, dialect, state, ex, plan, entry)
        if refused is not None:
            return refused
    if plan.kind == "loop":
        return await _loop(request, dialect, settings, state, ex, turn, model, plan, entry, history)
    if turn.followup:
        return await _judge_followup(request, dialect, settings, state, ex, turn, model, plan, entry, history)

    state.plans[plan.kind] += 1
    if plan.kind == "err":
        return await _inject(request, dialect, settings, state, ex, turn, model, plan, entry)
    if plan.kind == "hang":
        await _hang(state, ex, plan, entry)
    reply, headers = _first_reply(dialect, settings, ex, plan, entry, history)
    return await _reply(request, dialect, settings, state, ex, turn, model, reply, headers)


def _read_turn(raw: bytes, dialect: Dialect, state: MockState, ex: Exchange) -> Turn | web.Response:
    """The request's turn (its outline goes into the log line), or the 400
    that says why there is none."""
    try:
        try:
            # UTF-8 straight to the decoder: json.loads(bytes) first sniffs
            # the encoding; any other body takes that path, for its message
            body = _decode(raw.decode())
        except ValueError:
            body = json.loads(raw)
    except ValueError as exc:
        state.counters["bad_requests"] += 1
        msg = f"the request body is not valid JSON ({exc}); send a {dialect.name} request object"
        return _respond(state, ex, 400, dialect.error(400, msg))
    except RecursionError:
        return _bad_request(state, ex, dialect, _TOO_DEEP)
    try:
        turn = dialect.read(body)
    except BadRequest as exc:
        return _bad_request(state, ex, dialect, exc.message, exc.param)
    rec = ex.rec
    rec["stream"] = turn.stream
    rec["n_messages"] = turn.n_messages
    rec["followup"] = turn.followup
    return turn


def _plan_turn(
    dialect: Dialect, turn: Turn, settings: MockSettings, state: MockState, ex: Exchange
) -> tuple[Plan, Entry, str | None] | web.Response:
    """The turn's plan, its store entry and its session history token, all
    entered in the log line and the entry; or the 400 for a bad marker."""
    rec = ex.rec
    try:
        plan = _plan(turn.user_text, settings, state)
    except MarkerError as exc:
        state.counters["bad_requests"] += 1
        rec["error"] = str(exc)
        nonce = find_nonce(turn.user_text)
        if nonce is not None:
            rec["nonce"] = nonce
            ex.attach(state.store.entry(nonce), turn, dialect.name).error = str(exc)
        return _respond(state, ex, 400, dialect.error(400, str(exc), "messages", "kstress_marker"))
    rec["plan"] = plan.kind
    rec["nonce"] = plan.nonce
    rec["marker"] = plan.marker
    entry = ex.attach(state.store.entry(plan.nonce), turn, dialect.name)
    entry.plan, entry.marker = plan.kind, plan.marker
    history = _session_history(dialect, turn, plan.nonce, state, entry)
    if history is not None:
        rec["history"] = history
    return plan, entry, history


async def _judge_followup(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    plan: Plan,
    entry: Entry,
    history: str | None,
) -> web.StreamResponse:
    """A follow-up: judge what the kernel did with the calls (the history it
    sends back) and answer with the verdict line."""
    rec = ex.rec
    end = entry.get("tool_stream_end")
    tool_ms = None if end is None else int((ex.arrival - end) * 1000)
    sent, results = dialect.history(turn)
    _log_history(rec, turn, sent, results)
    line, echoes = check_history(plan, sent, results, settings.catalog, tool_ms, dialect.wire_ids(plan), dialect.item_ids(plan), history)
    _record_verdict(state, entry, rec, line, echoes)
    state.plans[f"{plan.kind}:verdict"] += 1
    return await _reply(request, dialect, settings, state, ex, turn, model, Reply(text=verdict_text(line, echoes, settings.verdict_key), pieces=settings.text_chunks, nonce=plan.nonce))


async def _hang(state: MockState, ex: Exchange, plan: Plan, entry: Entry) -> None:
    """!hang[:MS]: hold the request MS, or until its client goes away."""
    entry.hung = ex.rec["hung"] = True
    state.hanging += 1
    try:
        await asyncio.sleep(HANG_LIMIT_S if plan.hang_ms is None else plan.hang_ms / 1000)
    finally:
        state.hanging -= 1


def _first_reply(
    dialect: Dialect, settings: MockSettings, ex: Exchange, plan: Plan, entry: Entry, history: str | None
) -> tuple[Reply, dict[str, str] | None]:
    """The reply to a turn's first request and its extra headers: the plan's
    tool calls (with its quirk, where this dialect has it), or its text."""
    rec = ex.rec
    if not plan.has_tools:
        entry.text_verdict = True
        rec["text_verdict"] = text_verdict(plan.nonce, history)
        return Reply(text=text_reply(plan.nonce, history, settings.verdict_key), pieces=settings.text_chunks, nonce=plan.nonce), None
    headers = None
    reply = Reply(calls=plan.calls, finish="tool_calls", nonce=plan.nonce)
    if plan.quirk is not None:
        applies = dialect.name in QUIRK_DIALECTS[plan.quirk]
        entry.quirk, entry.quirk_applied = plan.quirk, applies
        rec["quirk_applied"] = applies
        if applies:
            reply.quirk = plan.quirk
            if plan.quirk == "finish_stop":
                reply.finish = "stop"
        else:
            # the batch goes out without deviation, and says so
            headers = {"X-Kstress-Quirk-Skipped": f"{plan.quirk} applies to {', '.join(sorted(QUIRK_DIALECTS[plan.quirk]))}"}
    ex.tool_stream = True
    return reply, headers


LOOP_PLAN_CALLS = 65_536


def _plan(text: str, settings: MockSettings, state: MockState) -> Plan:
    """build_plan, but a tool loop's plan is built once for all its requests."""
    plans = state.loop_plans
    plan = plans.get(text)
    if plan is not None:
        return plan
    plan = build_plan(text, settings.catalog, settings.tool_ms, settings.mixed_ms)
    if plan.kind == "loop" and len(plan.calls) <= LOOP_PLAN_CALLS:
        plans[text] = plan
        state.loop_plan_calls += len(plan.calls)
        while state.loop_plan_calls > LOOP_PLAN_CALLS:
            _, old = plans.popitem(last=False)
            state.loop_plan_calls -= len(old.calls)
    return plan


LOG_RESULT_CHARS = 120  # of each tool result in the log line: enough to see what came back
LOG_CALLS = 64  # calls and results per log line; the rest are counted


def _log_history(rec: dict[str, Any], turn: Turn, sent: Sequence[Any], results: Sequence[Any]) -> None:
    """A follow-up's messages, summarized in its log line: the roles in order,
    the calls the kernel says it made (id, name, arguments) and the results it
    handed back (call id, the first characters). Only follow-ups: their history
    is read anyway, and a failed turn's story (`kstress show`) is told by them;
    the first request of a turn takes the fast path and logs its plan."""
    items = turn.body.get("messages")
    if not isinstance(items, list):
        items = turn.body.get("input")
    if isinstance(items, list):
        rec["roles"] = [(m.get("role") or m.get("type")) if isinstance(m, dict) else type(m).__name__ for m in items[: LOG_CALLS * 2]]
    rec["calls"] = [[c.id, c.name, c.arguments if isinstance(c.arguments, (dict, list, str, int, float, bool, type(None))) else repr(c.arguments)] for c in sent[:LOG_CALLS]]
    rec["results"] = [[r.call_id, r.content[:LOG_RESULT_CHARS]] + ([True] if r.is_error else []) for r in results[:LOG_CALLS]]
    if len(sent) > LOG_CALLS or len(results) > LOG_CALLS:
        rec["history_sizes"] = [len(sent), len(results)]


def _record_verdict(state: MockState, entry: Entry, rec: dict[str, Any], line: VerdictLine, echoes: Sequence[tuple[str, str]] = ()) -> None:
    """A verdict reply's news: in the store entry, the log line and the counters.
    The slow tools' KST-S/KST-E timestamps go with it: a kernel that rewords the
    model's answer does not echo them, and the harness judges the schedule by them."""
    entry.verdict = line
    entry.verdicts = entry.get("verdicts", 0) + 1
    stamps = parse_timestamps("\n".join(content for _, content in echoes), entry.nonce) if echoes else {}
    if stamps:
        entry.stamps = {str(i): [st, en] for i, (st, en) in stamps.items()}
    rec["verdict"] = line.format()
    check = {
        "expected": line.expected, "got": line.got, "ids": line.ids, "args": line.args, "order": line.order,
        "errors": line.errors, "tool_ms": line.tool_ms, "all_ok": line.all_ok,
    }  # fmt: skip
    if line.loop is not None:
        check.update(steps=line.steps, steps_total=line.steps_total, loop=line.loop)
    if line.history is not None:
        check["history"] = line.history
    rec["check"] = check
    state.counters["verdicts_ok" if line.all_ok else "verdicts_bad"] += 1


def _session_history(dialect: Dialect, turn: Turn, nonce: str, state: MockState, entry: Entry) -> str | None:
    """A session turn's history token (None: the nonce is no session nonce).
    The entry keeps the turn's text as first seen, for later turns' checks,
    and its first history problem (``history`` stays at the first one that
    was not ok)."""
    parts = parse_session_nonce(nonce)
    if parts is None:
        return None
    if entry.get("user_text") is None:
        entry.user_text = turn.user_text
    store = state.store

    def original(n: str) -> str | None:
        e = store.get(n)
        return None if e is None else e.get("user_text")

    token = check_session(parts, dialect.earlier(turn), original)
    if entry.get("history") in (None, "ok"):
        entry.history = token
    state.counters["history_ok" if token == "ok" else "history_bad"] += 1
    return token


async def _loop(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    plan: Plan,
    entry: Entry,
    history: str | None,
) -> web.StreamResponse:
    """!loopK[:N[:MS]]: ask for the next step, or answer with the verdict.
    Stateless: the step comes from the request's history (verdict.check_loop);
    the store only keeps each step's tool time and the count of requests made
    after a final answer."""
    rec = ex.rec
    exchanges, answered = dialect.exchanges(turn)
    if not exchanges and not answered:
        return await _loop_step(request, dialect, settings, state, ex, turn, model, plan, entry, 1)
    check = check_loop(plan, exchanges, answered, settings.catalog, dialect.wire_ids(plan), dialect.item_ids(plan))
    k_total = plan.steps
    times = entry.get("step_tool_ms")
    if times is None:
        times = entry.step_tool_ms = [None] * k_total
    if answered:
        entry.past_final = entry.get("past_final", 0) + 1
        rec["past_final"] = True
        state.counters["past_final"] += 1
    elif 1 <= check.step <= k_total and times[check.step - 1] is None:
        end = entry.get("tool_stream_end")
        times[check.step - 1] = None if end is None else int((ex.arrival - end) * 1000)
    if check.next_step is not None:
        return await _loop_step(request, dialect, settings, state, ex, turn, model, plan, entry, check.next_step)
    tool_ms = times[min(check.step, k_total) - 1] if check.step >= 1 else None
    line = check.line(plan, tool_ms, history)
    _record_verdict(state, entry, rec, line, check.echoes)
    state.plans["loop:verdict"] += 1
    reply = Reply(text=verdict_text(line, check.echoes, settings.verdict_key), pieces=settings.text_chunks, nonce=plan.nonce)
    return await _reply(request, dialect, settings, state, ex, turn, model, reply)


async def _loop_step(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    plan: Plan,
    entry: Entry,
    step: int,
) -> web.StreamResponse:
    entry.loop_step = ex.rec["step"] = step
    state.plans["loop:step"] += 1
    ex.tool_stream = True
    reply = Reply(calls=plan.step_calls(step), finish="tool_calls", nonce=plan.nonce)
    return await _reply(request, dialect, settings, state, ex, turn, model, reply)


async def _reply(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    reply: Reply,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    if ex.fault is not None:
        return await _faulty_reply(request, dialect, settings, state, ex, turn, model, reply, headers)
    if not turn.stream:
        return _respond(state, ex, 200, dialect.complete(reply, turn, model), headers)
    events = dialect.stream(reply, turn, model, coalesce=not settings.chunk_delay_ms)
    return await _send(request, events, settings, state, ex, dialect, headers=headers)


# --- fault schedules and the rate limit (issue 24) ------------------------------------


def _scheduled(request: web.Request, dialect: Dialect, state: MockState, ex: Exchange, plan: Plan, entry: Entry) -> web.StreamResponse | None:
    """The rate limit's refusal, or this attempt's place in the nonce's fault
    schedule: an HTTP error or a reset answered here, a stall or truncation
    left on ``ex`` for the reply; None when the plan's reply goes out."""
    record = ex.record
    bucket = state.bucket
    if bucket is not None:
        wait = bucket.take(ex.arrival)
        if wait is not None:
            state.counters["rate_limited"] += 1
            ex.rec["fault"] = "rate_limit"
            headers = retry_after_headers(wait)
            if record is not None:
                record += ("rate_limit", float(headers["retry-after-ms"]) / 1000)
            msg = f"kstress mock: rate limit of {bucket.rate:g} requests/s reached (--rate-limit or /_mock/rate_limit); retry after {wait:.3f} s"
            return _respond(state, ex, 429, dialect.schedule_error(429, msg), headers)
    fault = plan.fault
    if fault is None:
        return None
    attempt = entry.get("attempts", 0) + 1
    entry.schedule, entry.attempts = fault, attempt
    ex.rec["attempt"] = attempt
    if not fault.applies(attempt):
        if record is not None:
            record += (None, None)
        return None
    label = fault.label
    ex.rec["fault"] = label
    state.counters["schedule_faults"] += 1
    if fault.kind != "flaky":
        # a stall or a truncation shapes the reply itself (_faulty_reply)
        if record is not None:
            record += (label, None)
        ex.fault = fault
        return None
    if record is not None:
        record += (label, fault.retry_after_s)
    if label == "reset":
        # the connection dropped before any byte of a response, as a crashed
        # upstream or a load balancer's reset does; status 0 in the record
        state.counters["disconnects_injected"] += 1
        state.commit(ex, 0)
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)  # never reaches the client: the connection is gone
    status = int(label)
    msg = f"kstress mock: injected HTTP {status} on attempt {attempt} (marker {fault.token})"
    if status in (503, 529):
        msg += ": Overloaded"
    headers = None if fault.retry_after_s is None else retry_after_headers(fault.retry_after_s)
    return _respond(state, ex, status, dialect.schedule_error(status, msg), headers)


STALL_HEAD_EVENTS = 2  # SSE events sent before a stall: the stream has visibly begun


async def _faulty_reply(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    reply: Reply,
    headers: dict[str, str] | None,
) -> web.StreamResponse:
    """The reply under a stall (its first events, a pause, the rest) or a
    truncation (its first half, then a clean end without the terminal event)."""
    fault: Fault = ex.fault
    if not turn.stream:
        if fault.kind == "stall":
            # no stream to stall: the whole answer waits
            await asyncio.sleep(fault.stall_ms / 1000)
            return _respond(state, ex, 200, dialect.complete(reply, turn, model), headers)
        body = json.dumps(dialect.complete(reply, turn, model)).encode()
        ex.sent(None, time.monotonic())
        state.commit(ex, 200)
        return web.Response(status=200, body=body[: len(body) // 2], content_type="application/json", headers=headers)
    # cut on SSE event boundaries, whatever runs of events a dialect joined
    body = b"".join(dialect.stream(reply, turn, model, coalesce=True))
    events = body.split(b"\n\n")[:-1]
    resp = _stream_response(dialect, headers)
    try:
        await _stream_start(resp, request, settings)
        if fault.kind == "truncate":
            # every event up to half, none of the terminal ones: no [DONE],
            # message_stop or response.completed, and the reply's end missing
            keep = events[: max(1, len(events) // 2)]
            ex.sent(None, time.monotonic())
            state.commit(ex, 200)
            await resp.write_eof(b"".join(e + b"\n\n" for e in keep))
            return resp
        head = min(STALL_HEAD_EVENTS, len(events) - 1)
        ex.first_byte = time.monotonic()
        await resp.write(b"".join(e + b"\n\n" for e in events[:head]))
        await asyncio.sleep(fault.stall_ms / 1000)
        ex.sent(ex.first_byte, time.monotonic())
        state.commit(ex, 200)
        await resp.write_eof(b"".join(e + b"\n\n" for e in events[head:]))
    except _GONE:
        state.counters["disconnects"] += 1
        ex.rec["client_gone"] = True
    return resp


async def _inject(
    request: web.Request,
    dialect: Dialect,
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    turn: Turn,
    model: str,
    plan: Plan,
    entry: Entry,
) -> web.StreamResponse:
    """!err:KIND: an HTTP error (500, 429, 503), or a reply broken midstream,
    cut off (disconnect) or not JSON (malformed)."""
    entry.fault = ex.rec["fault"] = plan.err
    state.counters["errors_injected"] += 1
    if plan.err in ("500", "429", "503"):
        status, err_body, headers = dialect.http_fault(plan)
        return _respond(state, ex, status, err_body, headers)
    if turn.stream:
        events = dialect.fault_events(plan, turn, model)
        return await _send(request, events, settings, state, ex, dialect, fault=True)
    if plan.err == "disconnect":
        state.counters["disconnects_injected"] += 1
        ex.sent(None, time.monotonic())
        state.commit(ex, 200)
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=500)  # never reaches the client: the connection is gone
    if plan.err == "malformed":
        ex.sent(None, time.monotonic())
        state.commit(ex, 200)
        return web.Response(status=200, body=dialect.malformed_body(), content_type="application/json")
    status, err_body = dialect.nonstream_midstream(plan)
    return _respond(state, ex, status, err_body)


async def _scripted(
    request: web.Request, dialect: Dialect, settings: MockSettings, state: MockState, ex: Exchange, turn: Turn, model: str
) -> web.StreamResponse:
    k, entry = settings.script.next()  # type: ignore[union-attr]
    ex.rec["script_entry"] = k
    state.plans[f"script:{entry.kind}"] += 1
    if entry.kind == "error":
        return _respond(state, ex, entry.status, dialect.error(entry.status, entry.message))
    if entry.kind == "text":
        reply = Reply(text=entry.text, pieces=settings.text_chunks)
    else:
        calls = tuple(
            Call(index=i, id=f"call_script{k}_{i}", name=name, arguments=args, role="script", parallel_safe=True)
            for i, (name, args) in enumerate(entry.calls)
        )
        reply = Reply(calls=calls, finish="tool_calls")
    return await _reply(request, dialect, settings, state, ex, turn, model, reply)


def _stream_response(dialect: Dialect, headers: dict[str, str] | None) -> web.StreamResponse:
    """An SSE response in the dialect's content type, with any fault headers."""
    hdrs = {"Content-Type": dialect.content_type, "Cache-Control": "no-cache"}
    if headers:
        hdrs.update(headers)
    return web.StreamResponse(status=200, headers=hdrs)


async def _stream_start(resp: web.StreamResponse, request: web.Request, settings: MockSettings) -> None:
    """Send the head, then wait the time to first token (--ttft-ms)."""
    await resp.prepare(request)
    if settings.ttft_ms:
        await asyncio.sleep(settings.ttft_ms / 1000)


async def _send(
    request: web.Request,
    events: list[bytes],
    settings: MockSettings,
    state: MockState,
    ex: Exchange,
    dialect: Dialect,
    fault: bool = False,
    headers: dict[str, str] | None = None,
) -> web.StreamResponse:
    """Stream ``events``, committing the exchange right before the last write."""
    resp = _stream_response(dialect, headers)
    try:
        await _stream_start(resp, request, settings)
        if fault and wire.CUT in events:
            head = events[: events.index(wire.CUT)]
            state.counters["disconnects_injected"] += 1
            ex.sent(None, time.monotonic())
            state.commit(ex, 200)
            await resp.write(b"".join(head))
            # Drop the connection with the response unfinished, as a crashed
            # upstream does; aiohttp then skips the final chunk.
            if request.transport is not None:
                request.transport.close()
            return resp
        if settings.chunk_delay_ms:
            delay = settings.chunk_delay_ms / 1000
            last = len(events) - 1
            for k, ev in enumerate(events):
                if k:
                    await asyncio.sleep(delay)
                if k == 0:
                    ex.first_byte = time.monotonic()
                if k == last:
                    ex.sent(ex.first_byte, time.monotonic())
                    state.commit(ex, 200)
                await resp.write(ev)
            await resp.write_eof()
        else:
            # Unpaced: the whole stream in one write, headers and the chunked
            # terminator coalesced with it (one awaited write per chunk caps
            # aiohttp near 2,000 streams/s). The bytes on the wire are the same.
            ex.sent(None, time.monotonic())
            state.commit(ex, 200)
            await resp.write_eof(b"".join(events))
    except _GONE:
        state.counters["disconnects"] += 1
        ex.rec["client_gone"] = True
    return resp


# --- small endpoints -----------------------------------------------------------


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok", "service": "kstress-mock"})


async def models(request: web.Request) -> web.Response:
    # One list both vendors' SDKs read: OpenAI's {object, data[{id, object,
    # created, owned_by}]} and Anthropic's page {data[{id, type, display_name,
    # created_at}], has_more, first_id, last_id}; each ignores the other's keys.
    model = request.app[SETTINGS_KEY].model
    return web.json_response({"object": "list", "data": [_model(model)], "has_more": False, "first_id": model, "last_id": model})


async def model(request: web.Request) -> web.Response:
    name = request.match_info["model"]
    return web.json_response(_model(name))


def _model(name: str) -> dict[str, Any]:
    return {
        "id": name,
        "object": "model",
        "created": 0,
        "owned_by": "kstress",
        "type": "model",
        "display_name": f"kstress mock ({name})",
        "created_at": "1970-01-01T00:00:00Z",
    }


async def mock_requests(request: web.Request) -> web.Response:
    state = request.app[STATE_KEY]
    raw = request.query.get("n", "50")
    if not raw.isdigit() or not 1 <= int(raw) <= RECENT_CAPACITY:
        return _json_error(400, f"n={raw!r} is invalid: use 1 to {RECENT_CAPACITY}", param="n")
    recent = list(state.recent)[-int(raw):]
    return web.json_response({"requests": recent})


async def mock_verdicts(request: web.Request) -> web.Response:
    """The store's entries for the nonces asked for (null for an unknown one)
    and how many entries the store has dropped: GET ?nonce=A&nonce=B, or POST
    {"nonces": [...]} for large batches."""
    state = request.app[STATE_KEY]
    if request.method == "GET":
        nonces: Any = request.query.getall("nonce", [])
        unknown = sorted(set(request.query) - {"nonce"})
        if unknown:
            return _json_error(400, f"unknown query parameter(s) {unknown}; ask with ?nonce=A&nonce=B", param=unknown[0])
        if not nonces:
            return _json_error(400, "no nonce given; ask with ?nonce=A&nonce=B, or POST {\"nonces\": [...]}", param="nonce")
    else:
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return _json_error(400, f"the body is not valid JSON ({exc}); send {{\"nonces\": [\"A\", ...]}}")
        except RecursionError:
            return _json_error(400, "the body nests too deeply to read; send {\"nonces\": [\"A\", ...]}")
        if not isinstance(body, dict) or not isinstance(body.get("nonces"), list):
            return _json_error(400, "the body must be a JSON object with a 'nonces' list: {\"nonces\": [\"A\", ...]}", param="nonces")
        nonces = body["nonces"]
        if not nonces:
            return _json_error(400, "'nonces' is empty; give at least one nonce", param="nonces")
        for k, n in enumerate(nonces):
            if not isinstance(n, str) or not n:
                return _json_error(400, f"nonces[{k}] is {n!r}: every nonce must be a non-empty string", param="nonces")
    if len(nonces) > QUERY_LIMIT:
        return _json_error(400, f"{len(nonces)} nonces asked for at once; the limit is {QUERY_LIMIT}: split the query", param="nonces")
    # evicted: a null is "never seen" only while the store has dropped nothing
    # (the harness fails a turn whose verdict line the mock never wrote by it)
    return web.json_response({"verdicts": state.store.query(nonces), "evicted": state.store.evicted})


async def mock_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[STATE_KEY].snapshot())


async def mock_reset(request: web.Request) -> web.Response:
    request.app[STATE_KEY].reset()
    script = request.app[SETTINGS_KEY].script
    if script is not None:
        script.reset()
    return web.json_response({"reset": True})


async def mock_rate_limit(request: web.Request) -> web.Response:
    """The provider-wide rate limit, read (GET) or set at run time (POST
    {"rate": N} or {"rate": null}): a harness measures a kernel's request rate
    first, then sets the limit below it (issue 24 item 3)."""
    state = request.app[STATE_KEY]
    if request.method == "POST":
        fix = f'send {{"rate": N}} with N requests per second above 0 and at most {RATE_MAX:.0f}, or {{"rate": null}} for no limit'
        try:
            body = json.loads(await request.read())
        except ValueError as exc:
            return _json_error(400, f"the body is not valid JSON ({exc}); {fix}")
        except RecursionError:
            return _json_error(400, f"the body nests too deeply to read; {fix}")
        if not isinstance(body, dict) or set(body) != {"rate"}:
            return _json_error(400, f"the body is {_clip(body)}: it must be a JSON object with the one key 'rate'; {fix}", param="rate")
        rate = body["rate"]
        # bool is an int to Python; NaN and Infinity (json.loads reads both) fail the range
        if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 < rate <= RATE_MAX):
            return _json_error(400, f"rate={_clip(rate)} is invalid; {fix}", param="rate")
        # a fresh bucket, full: the new limit starts from its own burst, not
        # from what an earlier limit had left. Swapped in one assignment: a
        # request reads state.bucket once (_scheduled), the fast path per request
        state.bucket = None if rate is None else TokenBucket(float(rate), time.monotonic())
    bucket = state.bucket
    return web.json_response({"rate": None if bucket is None else bucket.rate})


def _clip(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


async def not_found(request: web.Request) -> web.Response:
    served = ", ".join(f"POST {d.paths[0]}" for d in BY_NAME.values())
    return _json_error(404, f"no route {request.method} {request.path}; the mock serves {served}")


# --- the app and its server ------------------------------------------------------


def create_app(settings: MockSettings | None = None) -> web.Application:
    settings = settings or MockSettings()
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[SETTINGS_KEY] = settings
    app[STATE_KEY] = MockState(store=VerdictStore(settings.store_capacity))
    if settings.rate_limit is not None:
        app[STATE_KEY].bucket = TokenBucket(settings.rate_limit, time.monotonic())
    for dialect in BY_NAME.values():
        handler = chat_completions if dialect is CHAT else _route(dialect)
        for path in dialect.paths:
            app.router.add_post(path, handler)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/v1/models/{model}", model)
    for path in ("/", "/v1", "/v1/", "/health"):
        app.router.add_get(path, health)  # add_get also answers HEAD
    app.router.add_get("/_mock/requests", mock_requests)
    app.router.add_get("/_mock/stats", mock_stats)
    app.router.add_get("/_mock/verdicts", mock_verdicts)
    app.router.add_post("/_mock/verdicts", mock_verdicts)
    app.router.add_post("/_mock/reset", mock_reset)
    app.router.add_get("/_mock/rate_limit", mock_rate_limit)
    app.router.add_post("/_mock/rate_limit", mock_rate_limit)
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


class _Runner(web.AppRunner):
    """aiohttp's runner, its connections served by the fast path (mock/fastpath.py)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # installed even under --rate-limit: POST /_mock/rate_limit can lift
        # the limit at run time; while one is set the fast path hands every
        # request to aiohttp's handler (fastpath._fast_events), which takes a token
        fastpath.serve_fast(server, self._app[SETTINGS_KEY], self._app[STATE_KEY])
        return server


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
        self._runner = _Runner(self.app, handler_cancellation=True, access_log=None)
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


