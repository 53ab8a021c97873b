"""A scripted fake LLM for the session and tool-loop tests, and the checks
that read its recording.

It speaks the three APIs the kernel can (``--llm-api``), streamed, in the wire
formats of docs/wire.md: OpenAI chat completions (one tool-call fragment per
chunk, a named header per call, arguments cut in several pieces, a finish
chunk, usage, ``[DONE]``), Anthropic Messages (a ``tool_use`` block per call,
its input as ``input_json_delta`` pieces) and OpenAI Responses (a
``function_call`` item per call, ``fc_`` item ids, argument deltas by
``item_id``, ``response.completed``). It records every request, and answers
from a script written in the latest user message, so that a test decides what
each turn does by what it sends:

    ``loop=K``   K tool steps before the answer (default 0: answer at once)
    ``calls=N``  N calls per step (default 1), ``lookup`` each ...
    ``writer``   ... except a ``knowledge_create`` in the middle of every odd step
    ``broken``   ... and the last call of every step with a ``key`` that is not a string (a tool error)
    ``fail``     HTTP 500 instead of a reply
    ``hold``     the turn's first request waits until the test calls ``release``
    ``flaky=N``  the first N requests of step ``fstep=S`` (default 0) fail, then it answers (retry tests):
    ``status=C``   ... with HTTP C (default 429), ``after=V`` / ``after_ms=V`` its Retry-After / retry-after-ms,
    ``truncate``   ... or with the reply streamed without its terminal event(s), the connection closed cleanly,
    ``stall=MS``   ... or with the reply's first two events, then MS of silence, then the rest
    ``#NONCE``   the turn's name: in every call id and argument of the turn

The step a request is for is read from the request itself (the assistant
messages after its user message, and the step numbers in the fake's own call
ids), so a kernel that drops or renames part of the loop still gets an answer
and the recording shows what it sent. Unlike the mock (``mock/``), it checks
nothing itself: the checks below compare the recording with the script.

An Anthropic or Responses request is read into the chat shape those checks
use (``Recorded.messages``) by a strict reader (``normalize``): every block
and item must have exactly the fields the dialect's history has (an assistant
message of ``tool_use`` blocks with the input as an object, then a user
message that starts with the ``tool_result`` blocks; ``function_call`` items
with their ``fc_`` id, then ``function_call_output`` items), or the fake
answers 400 naming what it could not read (``FakeLLM.unreadable``).
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Message = dict[str, Any]


@dataclass(frozen=True)
class Script:
    nonce: str
    steps: int = 0
    calls: int = 1
    writer: bool = False
    broken: bool = False
    fail: bool = False
    hold: bool = False
    flaky: int = 0
    fstep: int = 0
    status: int = 429
    after: str | None = None
    after_ms: str | None = None
    truncate: bool = False
    stall: int = 0

    @classmethod
    def parse(cls, text: str) -> "Script":
        words = text.split()
        opts = dict(w.split("=", 1) for w in words if "=" in w)
        nonces = [w[1:] for w in words if w.startswith("#") and len(w) > 1]
        return cls(nonce=nonces[-1] if nonces else "", steps=int(opts.get("loop", 0)), calls=int(opts.get("calls", 1)),
                   writer="writer" in words, broken="broken" in words, fail="fail" in words, hold="hold" in words,
                   flaky=int(opts.get("flaky", 0)), fstep=int(opts.get("fstep", 0)), status=int(opts.get("status", 429)),
                   after=opts.get("after"), after_ms=opts.get("after_ms"), truncate="truncate" in words,
                   stall=int(opts.get("stall", 0)))

    def call(self, step: int, i: int) -> dict[str, Any]:
        """Call i of step ``step`` (0-based), as the assistant message must carry it back."""
        cid = f"call_{self.nonce}_{step}_{i}"
        if self.writer and step % 2 == 1 and i == self.calls // 2:
            name, args = "knowledge_create", {"title": f"k-{self.nonce}-{step}-{i}", "content": f"step {step} \"of\"\tloop"}
        elif self.broken and i == self.calls - 1:
            name, args = "lookup", {"key": step, "query": "a key that is not a string"}
        else:  # quotes and a tab: the pieces cut inside JSON escapes
            name, args = "lookup", {"key": f"{self.nonce}/{step}/{i}", "query": f"step {step} \"call\" {i}\t{self.nonce}"}
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    def calls_of(self, step: int) -> list[dict[str, Any]]:
        return [self.call(step, i) for i in range(self.calls)]

    @property
    def answer(self) -> str:
        return f"answer {self.nonce} after {self.steps} steps"


def text(nonce: str | None = None, **script: Any) -> tuple[str, str]:
    """An input text for the fake, and its nonce: ``text(loop=3, calls=2)``."""
    n = nonce or uuid.uuid4().hex[:12]
    words = [f"{k}={v}" for k, v in script.items() if not isinstance(v, bool)]
    words += [k for k, v in script.items() if v is True]
    return " ".join(["please", *words, f"#{n}"]), n


def turn_part(messages: list[Message]) -> list[Message]:
    """The messages of the request's own turn: from its (last) user message on."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    assert users, f"a request without a user message: {messages}"
    return messages[users[-1]:]


_OWN_ID = re.compile(r"call_(?P<nonce>[0-9A-Za-z]+)_(?P<step>\d+)_\d+")


def step_of(messages: list[Message], nonce: str) -> int:
    part = turn_part(messages)
    assistants = [m for m in part if m.get("role") == "assistant"]
    seen = [int(m["step"]) for a in assistants for c in a.get("tool_calls") or ()
            if (m := _OWN_ID.fullmatch(str(c.get("id")))) and m["nonce"] == nonce]
    return max(len(assistants), 1 + max(seen, default=-1))


class Unreadable(ValueError):
    """A request whose history is not in its dialect's shape."""


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise Unreadable(what)


def item_id(call_id: str) -> str:
    """The Responses item id the fake gives the function_call whose call_id is ``call_id``."""
    return "fc_" + call_id.removeprefix("call_")


def _anthropic(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    _expect(isinstance(body.get("max_tokens"), int) and body["max_tokens"] > 0, f"max_tokens is {body.get('max_tokens')!r}")
    if "system" in body:
        _expect(isinstance(body["system"], str), "system is not a string")
        out.append({"role": "system", "content": body["system"]})
    for m in body["messages"]:
        role, content = m.get("role"), m.get("content")
        _expect(set(m) == {"role", "content"} and role in ("user", "assistant"), f"a message {m}")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        _expect(isinstance(content, list) and content, f"a message whose content is {content!r}")
        kinds = [b.get("type") for b in content]
        if role == "user":
            # the results first, one block per tool_use; text (if any) after them
            n = kinds.count("tool_result")
            _expect(kinds[:n] == ["tool_result"] * n and all(k == "text" for k in kinds[n:]), f"user blocks {kinds}")
            for b in content[:n]:
                _expect(set(b) in ({"type", "tool_use_id", "content"}, {"type", "tool_use_id", "content", "is_error"}), f"a tool_result {b}")
                _expect(b.get("is_error", True) is True, f"a tool_result with is_error {b.get('is_error')!r} (only true is sent)")
                out.append({"role": "tool", "tool_call_id": b["tool_use_id"], "content": b["content"]})
            if content[n:]:
                out.append({"role": "user", "content": "".join(b["text"] for b in content[n:])})
            continue
        n = kinds.count("text")
        _expect(kinds[:n] == ["text"] * n and all(k == "tool_use" for k in kinds[n:]), f"assistant blocks {kinds}")
        text = "".join(b["text"] for b in content[:n])
        _expect(all(b["text"] for b in content[:n]), "an empty text block (the API refuses them)")
        calls = []
        for b in content[n:]:
            _expect(set(b) == {"type", "id", "name", "input"} and isinstance(b["input"], dict), f"a tool_use {b}")
            calls.append({"id": b["id"], "type": "function", "function": {"name": b["name"], "arguments": json.dumps(b["input"])}})
        out.append({"role": "assistant", "content": text or None, "tool_calls": calls} if calls else {"role": "assistant", "content": text})
    return out


def _responses(body: dict[str, Any]) -> list[Message]:
    out: list[Message] = []
    _expect("previous_response_id" not in body and "messages" not in body, "previous_response_id or messages in a Responses request")
    if "instructions" in body:
        out.append({"role": "system", "content": body["instructions"]})
    for item in body["input"]:
        kind = item.get("type", "message")
        if kind == "message":
            role, content = item.get("role"), item.get("content")
            if isinstance(content, list):  # an output message item repeated: its own id, its text parts
                _expect(set(item) == {"type", "id", "role", "status", "content"} and role == "assistant", f"a message item {item}")
                _expect(all(set(p) == {"type", "text", "annotations"} and p["type"] == "output_text" for p in content), f"parts {content}")
                content = "".join(p["text"] for p in content)
            else:
                _expect(set(item) <= {"type", "role", "content"} and isinstance(content, str), f"a message {item}")
            out.append({"role": role, "content": content})
        elif kind == "function_call":
            _expect(set(item) == {"type", "id", "call_id", "name", "arguments"} and isinstance(item["arguments"], str), f"a function_call {item}")
            call = {"id": item["call_id"], "type": "function", "function": {"name": item["name"], "arguments": item["arguments"]}}
            last = out[-1] if out else None
            if last is not None and last["role"] == "assistant" and "tool_calls" in last:
                last["tool_calls"].append(call)
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            out[-1].setdefault("item_ids", []).append(item["id"])
        elif kind == "function_call_output":
            _expect(set(item) == {"type", "call_id", "output"}, f"a function_call_output {item}")
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": item["output"]})
        else:
            raise Unreadable(f"an input item of type {kind!r}")
    return out


def normalize(dialect: str, body: dict[str, Any]) -> list[Message]:
    """The request's conversation in the chat shape (strictly read; Unreadable otherwise)."""
    if dialect == "chat":
        return body["messages"]
    try:
        return _anthropic(body) if dialect == "anthropic" else _responses(body)
    except (KeyError, TypeError, AttributeError) as exc:
        raise Unreadable(f"{type(exc).__name__}: {exc}") from None


@dataclass
class Recorded:
    nonce: str
    body: dict[str, Any]
    at: float
    dialect: str = "chat"
    headers: dict[str, str] | None = None
    normalized: list[Message] | None = None

    @property
    def messages(self) -> list[Message]:
        """In the chat shape, whatever the dialect (without Responses item ids: see ``item_ids``)."""
        assert self.normalized is not None
        return [{k: v for k, v in m.items() if k != "item_ids"} for m in self.normalized]

    @property
    def item_ids(self) -> list[list[str]]:
        """Responses: the item ids of each group of function_call items, in order."""
        assert self.normalized is not None
        return [m["item_ids"] for m in self.normalized if "item_ids" in m]


class FakeLLM:
    """``async with FakeLLM() as llm``: ``llm.url + "/v1"`` is the kernel's
    ``--llm-url``; ``llm.requests`` everything it was sent, in arrival order."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.unreadable: list[str] = []  # why requests were answered 400
        self._holds: dict[str, asyncio.Event] = {}
        self._closing = asyncio.Event()  # ends every stall at once
        self._failed: dict[tuple[str, int], int] = {}  # (nonce, step) -> flaky failures served
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> "FakeLLM":
        app = web.Application()
        app.router.add_get("/v1", self._alive)  # GET also answers the kernel's HEAD probe
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/v1/responses", self._responses)
        self._runner = web.AppRunner(app, handle_signals=False)
        try:
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await self.aclose()
            raise
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        self._closing.set()
        for ev in self._holds.values():
            ev.set()  # a held handler must not keep the cleanup waiting
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # --- the test's side ----------------------------------------------------------

    def release(self, nonce: str) -> None:
        self._holds.setdefault(nonce, asyncio.Event()).set()

    def requests_for(self, nonce: str) -> list[list[Message]]:
        return [r.messages for r in self.requests if r.nonce == nonce]

    def recorded_for(self, nonce: str) -> list[Recorded]:
        return [r for r in self.requests if r.nonce == nonce]

    def holding(self, nonce: str) -> bool:
        """The held turn's first request has arrived (and waits)."""
        return bool(self.requests_for(nonce)) and not self._holds.setdefault(nonce, asyncio.Event()).is_set()

    # --- the LLM's side -----------------------------------------------------------

    async def _alive(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "chat")

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "anthropic")

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, "responses")

    async def _serve(self, request: web.Request, dialect: str) -> web.StreamResponse:
        body = await request.json()
        try:
            messages = normalize(dialect, body)
        except Unreadable as exc:
            self.unreadable.append(str(exc))
            return web.json_response({"error": {"message": f"rkfake: unreadable {dialect} request: {exc}", "type": "invalid_request_error"}},
                                     status=400)
        user = turn_part(messages)[0]["content"]
        script = Script.parse(user)
        self.requests.append(Recorded(script.nonce, body, time.monotonic(), dialect, dict(request.headers), messages))
        if script.fail:
            if dialect == "anthropic":
                return web.json_response({"type": "error", "error": {"type": "api_error", "message": "scripted failure"}}, status=500)
            return web.json_response({"error": {"message": "scripted failure", "type": "server_error", "param": None,
                                                "code": None}}, status=500)
        step = step_of(messages, script.nonce)
        if script.hold and step == 0:
            await self._holds.setdefault(script.nonce, asyncio.Event()).wait()
        calls = script.calls_of(step) if step < script.steps else None
        events = {"chat": _chat_events, "anthropic": _anthropic_events, "responses": _responses_events}[dialect](
            body, calls, script.answer, script.nonce)
        flaky = step == script.fstep and self._failed.get((script.nonce, step), 0) < script.flaky
        if flaky:
            self._failed[(script.nonce, step)] = self._failed.get((script.nonce, step), 0) + 1
            if not (script.truncate or script.stall):
                return _status(dialect, script)
            if script.truncate:
                events = [e for e in events if not any(t in e for t in _TERMINAL)]
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        if flaky and script.stall:
            await resp.write(b"".join(events[:2]))
            try:
                await asyncio.wait_for(self._closing.wait(), script.stall / 1000)
            except asyncio.TimeoutError:
                pass
            events = events[2:]
        try:
            await resp.write(b"".join(events))
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the kernel gave up on a stalled stream and closed it
        return resp


# what a truncated reply leaves out: chat's finish chunk, usage chunk and [DONE];
# Anthropic's message_delta and message_stop; Responses' response.completed
_TERMINAL = (b'"finish_reason":"stop"', b'"finish_reason":"tool_calls"', b'"usage":{"prompt_tokens"', b"data: [DONE]",
             b"event: message_delta", b"event: message_stop", b"event: response.completed")


def _status(dialect: str, script: Script) -> web.Response:
    headers = {k: v for k, v in (("retry-after", script.after), ("retry-after-ms", script.after_ms)) if v is not None}
    if dialect == "anthropic":
        body: dict[str, Any] = {"type": "error", "error": {"type": "rate_limit_error" if script.status == 429 else "api_error",
                                                           "message": f"flaky {script.status}"}}
    else:
        body = {"error": {"message": f"flaky {script.status}", "type": "rate_limit_error" if script.status == 429 else "server_error",
                          "param": None, "code": None}}
    return web.json_response(body, status=script.status, headers=headers)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def _chat_events(body: dict[str, Any], calls: list[dict[str, Any]] | None, answer: str, nonce: str) -> list[bytes]:
    rid, created, model = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time()), body.get("model", "fake")
    usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        obj: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                               "system_fingerprint": "fp_rkfake",
                               "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        if usage:
            obj["usage"] = None
        return b"data: " + _dumps(obj).encode() + b"\n\n"

    events = [chunk({"role": "assistant", "content": None})]
    if calls is None:
        events += [chunk({"content": piece}) for piece in _pieces(answer)]
    else:
        for i, c in enumerate(calls):
            events.append(chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                                 "function": {"name": c["function"]["name"], "arguments": ""}}]}))
            events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                       for piece in _pieces(c["function"]["arguments"])]
    events.append(chunk({}, "stop" if calls is None else "tool_calls"))
    if usage:
        events.append(b"data: " + json.dumps({"id": rid, "object": "chat.completion.chunk", "created": created,
                                               "model": model, "system_fingerprint": "fp_rkfake", "choices": [],
                                               "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                         "total_tokens": 2}}).encode() + b"\n\n")
    events.append(b"data: [DONE]\n\n")
    return events


def _named(obj: dict[str, Any]) -> bytes:
    return f"event: {obj['type']}\ndata: {_dumps(obj)}\n\n".encode()


def _anthropic_events(body: dict[str, Any], calls: list[dict[str, Any]] | None, answer: str, nonce: str) -> list[bytes]:
    msg = {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant", "model": body.get("model", "fake"),
           "content": [], "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    events = [_named({"type": "message_start", "message": msg})]
    if calls is None:
        events.append(_named({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
        events += [_named({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}) for p in _pieces(answer)]
        events.append(_named({"type": "content_block_stop", "index": 0}))
    for i, c in enumerate(calls or ()):
        events.append(_named({"type": "content_block_start", "index": i,
                              "content_block": {"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": {}}}))
        for p in ["", *_pieces(c["function"]["arguments"])]:
            events.append(_named({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": p}}))
        events.append(_named({"type": "content_block_stop", "index": i}))
    events.append(_named({"type": "message_delta", "delta": {"stop_reason": "end_turn" if calls is None else "tool_use", "stop_sequence": None},
                          "usage": {"output_tokens": 1}}))
    events.append(_named({"type": "message_stop"}))
    return events


def _responses_events(body: dict[str, Any], calls: list[dict[str, Any]] | None, answer: str, nonce: str) -> list[bytes]:
    rid = f"resp_{uuid.uuid4().hex[:24]}"
    seq = iter(range(10**6))
    events: list[bytes] = []

    def add(obj: dict[str, Any]) -> None:
        events.append(_named({**obj, "sequence_number": next(seq)}))

    def response(status: str, output: list[dict[str, Any]]) -> dict[str, Any]:
        return {"id": rid, "object": "response", "status": status, "model": body.get("model", "fake"), "output": output, "error": None}

    add({"type": "response.created", "response": response("in_progress", [])})
    output = []
    if calls is None:
        mid = f"msg_{nonce}"
        where = {"item_id": mid, "output_index": 0, "content_index": 0}
        add({"type": "response.output_item.added", "output_index": 0,
             "item": {"id": mid, "type": "message", "status": "in_progress", "role": "assistant", "content": []}})
        for p in _pieces(answer):
            add({"type": "response.output_text.delta", **where, "delta": p})
        add({"type": "response.output_text.done", **where, "text": answer})
        item = {"id": mid, "type": "message", "status": "completed", "role": "assistant",
                "content": [{"type": "output_text", "text": answer, "annotations": []}]}
        add({"type": "response.output_item.done", "output_index": 0, "item": item})
        output.append(item)
    for i, c in enumerate(calls or ()):
        fc = {"id": item_id(c["id"]), "type": "function_call", "status": "in_progress", "arguments": "", "call_id": c["id"],
              "name": c["function"]["name"]}
        add({"type": "response.output_item.added", "output_index": i, "item": fc})
        for p in _pieces(c["function"]["arguments"]):
            add({"type": "response.function_call_arguments.delta", "item_id": fc["id"], "output_index": i, "delta": p})
        done = {**fc, "status": "completed", "arguments": c["function"]["arguments"]}
        add({"type": "response.function_call_arguments.done", "item_id": fc["id"], "output_index": i, "arguments": done["arguments"]})
        add({"type": "response.output_item.done", "output_index": i, "item": done})
        output.append(done)
    add({"type": "response.completed", "response": response("completed", output)})
    return events


def _pieces(s: str) -> list[str]:
    """Cut at 3 characters, a half and three quarters (as the mock does): never one piece."""
    cuts = sorted({c for c in (3, len(s) // 2, 3 * len(s) // 4) if 0 < c < len(s)})
    bounds = [0, *cuts, len(s)]
    return [s[a:b] for a, b in zip(bounds, bounds[1:])]


# --- the checks -------------------------------------------------------------------


def _result_ok(call: dict[str, Any], msg: Message) -> bool:
    """A tool result is the one for ``call``: its id, and the output that tool gives for these arguments."""
    args = json.loads(call["function"]["arguments"])
    want = {"lookup": f"lookup {args.get('key')}: entry ", "knowledge_create": f"created knowledge entry {args.get('title')} "}
    return (msg.get("role") == "tool" and msg.get("tool_call_id") == call["id"]
            and str(msg.get("content", "")).startswith(want[call["function"]["name"]]))


def check_loop(llm: FakeLLM, text_sent: str) -> None:
    """The turn's tool loop went right, request by request: request s (0-based)
    carries, after the turn's user message, steps 0..s-1 each as exactly the
    calls the fake sent and one result per call, in declared order, unchanged
    since the request that first carried it; every id distinct across steps."""
    script = Script.parse(text_sent)
    reqs = llm.requests_for(script.nonce)
    assert len(reqs) == script.steps + 1, f"{len(reqs)} requests for a {script.steps}-step loop"
    for s, req in enumerate(reqs):
        part = turn_part(req)
        assert part[0] == {"role": "user", "content": text_sent}, part[0]
        at = 1
        for earlier in range(s):
            calls = script.calls_of(earlier)
            got = part[at] if at < len(part) else None
            assert got == {"role": "assistant", "content": None, "tool_calls": calls}, (
                f"request {s}: step {earlier}'s assistant message is {got} (expected the fake's calls {calls})")
            results = part[at + 1:at + 1 + len(calls)]
            assert len(results) == len(calls) and all(_result_ok(c, r) for c, r in zip(calls, results)), (
                f"request {s}: step {earlier}'s results are {results}")
            at += 1 + len(calls)
        assert at == len(part), f"request {s}: unexpected messages after step {s - 1}: {part[at:]}"
        if s:
            assert req[:len(reqs[s - 1])] == reqs[s - 1], f"request {s} does not extend request {s - 1} unchanged"
    ids = [c["id"] for m in turn_part(reqs[-1]) for c in m.get("tool_calls") or ()]
    assert len(ids) == len(set(ids)) == script.steps * script.calls, ids
    last = llm.recorded_for(script.nonce)[-1]
    if last.dialect == "responses":  # each function_call item repeated under the item id the fake gave it
        steps = last.item_ids[-script.steps:] if script.steps else []
        assert steps == [[item_id(c["id"]) for c in script.calls_of(s)] for s in range(script.steps)], steps


def exchange(llm: FakeLLM, text_sent: str) -> list[Message]:
    """What a completed turn adds to its session's history, as the kernel sent
    it to the LLM: its user message and every step (all in its last request),
    then the fake's final answer."""
    script = Script.parse(text_sent)
    reqs = llm.requests_for(script.nonce)
    assert reqs, f"the fake never saw turn {script.nonce}"
    return [*turn_part(reqs[-1]), {"role": "assistant", "content": script.answer}]


def check_history(llm: FakeLLM, text_sent: str, earlier: list[str]) -> None:
    """Every request of the turn carries, between the system prompt and its own
    user message, exactly the turns ``earlier`` (their texts), in order."""
    script = Script.parse(text_sent)
    want = [m for t in earlier for m in exchange(llm, t)]
    reqs = llm.requests_for(script.nonce)
    assert reqs, f"the fake never saw turn {script.nonce}"
    for s, req in enumerate(reqs):
        assert req[0]["role"] == "system", req[0]
        got = req[1:len(req) - len(turn_part(req))]
        assert got == want, (
            f"request {s} of {script.nonce} carries {_names(got)}, expected {_names(want)}:\n{got}\n!=\n{want}")


def _names(history: list[Message]) -> list[str]:
    """The turns a history holds, by nonce (a readable summary for failures)."""
    return [Script.parse(m["content"]).nonce for m in history if m.get("role") == "user"]


# --- scenarios (shared by the session tests and the fault tests) ------------------


async def session_turn(conn: Any, session: str | None, **script: Any) -> str:
    """One turn of ``session`` on ``conn`` (an rkclient.KernelConn) that must
    end with a response; its text, for the checks above."""
    t, _ = text(**script)
    turn = await conn.turn(t, session=session)
    assert turn.kind == "response" and not turn.terminal.get("duplicate"), turn.frames[-1]
    return t


async def interleaved_sessions(k: Any) -> dict[str, tuple[str, list[str]]]:
    """Sessions A and B interleaved on one connection, then A resumed on a
    second one (a client reconnecting): turn name -> (its text, the turns its
    history must hold). Each turn has tool steps of its own, so a history
    carries assistant tool-call messages and results, not only text."""
    c1, c2 = await k.connect(), await k.connect()
    a1 = await session_turn(c1, "A", loop=2, calls=2)
    b1 = await session_turn(c1, "B", loop=1, calls=3)
    a2 = await session_turn(c1, "A")
    b2 = await session_turn(c1, "B", loop=1)
    a3 = await session_turn(c2, "A", loop=1, calls=2)
    b3 = await session_turn(c1, "B")
    return {"A1": (a1, []), "B1": (b1, []), "A2": (a2, [a1]), "B2": (b2, [b1]), "A3": (a3, [a1, a2]), "B3": (b3, [b1, b2])}


def history_failures(llm: FakeLLM, expected: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """check_history for each turn of a scenario: the failing turns, with why."""
    out = {}
    for name, (t, earlier) in expected.items():
        try:
            check_history(llm, t, earlier)
        except AssertionError as exc:
            out[name] = str(exc)
    return out
