"""Anthropic Messages: ``POST /v1/messages``, stream and non-stream.

Every SSE frame carries an ``event:`` line (the Python SDK drops frames
without one). A reply is ``message_start``, then per content block
``content_block_start`` / ``content_block_delta``... / ``content_block_stop``
(one ``ping`` after the first start, as the API does), then ``message_delta``
with the stop reason and the cumulative output tokens, then ``message_stop``.
Tool input streams as ``input_json_delta`` pieces: an empty one first, as the
API sends it, then the arguments cut as the chat dialect cuts them.

Tool results come back in a ``user`` message of ``tool_result`` blocks
(``tool_use_id``, ``content`` as a string or blocks, ``is_error``).
"""

from __future__ import annotations

import functools
import json
import re
from random import getrandbits
from typing import Any, Mapping, Sequence

from ..markers import Call, Plan, wire_id
from ..verdict import BAD_ARGS, Exchange, Said, SentCall, ToolResult
from ..wire import CUT, StreamTemplate, split_arguments, split_text
from .base import BadRequest, Dialect, Reply, Turn, message_text, usage

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode

# HTTP status -> the error type the API names in its body
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    502: "api_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_EVENT_LINE = re.compile(rb"(?m)^event: [^\n]*\n")
PING = b'event: ping\ndata: {"type":"ping"}\n\n'


def new_id() -> str:
    return f"msg_{getrandbits(96):024x}"


def frame(event: str, obj: Any) -> str:
    return f"event: {event}\ndata: {_dumps(obj)}\n\n"


def _has_tool_result(content: Any) -> bool:
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("type") == "tool_result" for b in content)


def _answers_tools(messages: list[Any], k: int) -> bool:
    """Message k is a user message of tool results: it holds tool_result blocks,
    or it follows the assistant's tool_use blocks (a kernel that lost every
    result still answers the calls, with got=0)."""
    m = messages[k]
    if not isinstance(m, dict) or m.get("role") != "user":
        return False
    if _has_tool_result(m.get("content")):
        return True
    prev = messages[k - 1] if k else None
    return isinstance(prev, dict) and prev.get("role") == "assistant" and bool(_blocks(prev.get("content"), "tool_use"))


def _blocks(content: Any, kind: str) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def _sent(b: dict[str, Any]) -> SentCall:
    args = b.get("input")
    return SentCall(b.get("id"), b.get("name"), args if isinstance(args, dict) else BAD_ARGS)


def _result(b: dict[str, Any]) -> ToolResult:
    return ToolResult(b.get("tool_use_id"), message_text(b.get("content")), b.get("is_error") is True)


def tool_use_id(call: Call) -> str:
    return wire_id(call.id, "anthropic")


class AnthropicDialect(Dialect):
    name = "anthropic"
    paths = ("/v1/messages", "/messages")

    # --- reading -------------------------------------------------------------------

    def read(self, body: Any) -> Turn:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object with a 'messages' list")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' is missing or empty; send at least one user message", "messages")
        # tool results arrive in user messages too: the input is the latest user
        # message that is not an answer to tool calls
        user_at = None
        for k in range(len(messages) - 1, -1, -1):
            m = messages[k]
            if isinstance(m, dict) and m.get("role") == "user" and not _answers_tools(messages, k):
                user_at = k
                break
        if user_at is None:
            raise BadRequest(
                "'messages' holds no user message without tool_result blocks; the mock reads its markers from the latest one",
                "messages",
            )
        model = body.get("model")
        return Turn(
            user_text=message_text(messages[user_at].get("content")),
            followup=messages[-1] is not messages[user_at] and _answers_tools(messages, len(messages) - 1),
            stream=bool(body.get("stream")),
            model=model if isinstance(model, str) and model else None,
            include_usage=True,
            n_messages=len(messages),
            body=body,
            user_at=user_at,
        )

    def history(self, turn: Turn) -> tuple[list[SentCall], list[ToolResult]]:
        messages = turn.body["messages"]
        start = turn.user_at + 1
        sent: list[SentCall] = []
        for k in range(len(messages) - 1, turn.user_at, -1):
            m = messages[k]
            if isinstance(m, dict) and m.get("role") == "assistant" and _blocks(m.get("content"), "tool_use"):
                sent.extend(_sent(b) for b in _blocks(m["content"], "tool_use"))
                start = k + 1
                break
        results = []
        for m in messages[start:]:
            if isinstance(m, dict) and m.get("role") == "user":
                results.extend(_result(b) for b in _blocks(m.get("content"), "tool_result"))
        return sent, results

    def exchanges(self, turn: Turn) -> tuple[list[Exchange], bool]:
        messages = turn.body["messages"]
        out: list[Exchange] = []
        answered = False
        for m in messages[turn.user_at + 1 :]:
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if m.get("role") == "assistant":
                uses = _blocks(content, "tool_use")
                if uses:
                    out.append(Exchange([_sent(b) for b in uses], []))
                    answered = False
                else:
                    answered = True
            elif m.get("role") == "user":
                blocks = _blocks(content, "tool_result")
                if blocks and not out:
                    out.append(Exchange([], []))
                for b in blocks:
                    out[-1].results.append(_result(b))
                answered = False
        return out, answered

    def earlier(self, turn: Turn) -> list[Said]:
        messages = turn.body["messages"]
        out = []
        for k in range(turn.user_at):
            m = messages[k]
            if not isinstance(m, dict):
                continue
            content = m.get("content")
            if m.get("role") == "user":
                if _answers_tools(messages, k):
                    out.append(Said(False, "", tuple(b.get("tool_use_id") for b in _blocks(content, "tool_result")), results=True))
                else:
                    out.append(Said(True, message_text(content)))
            elif m.get("role") == "assistant":
                text = content if isinstance(content, str) else "".join(b["text"] for b in _blocks(content, "text") if isinstance(b.get("text"), str))
                out.append(Said(False, text, tuple(b.get("id") for b in _blocks(content, "tool_use"))))
        return out

    def prompt_chars(self, turn: Turn) -> int:
        n = len(message_text(turn.body.get("system")))
        for m in turn.body["messages"]:
            if isinstance(m, dict):
                content = m.get("content")
                n += len(message_text(content))
                n += sum(len(message_text(b.get("content"))) for b in _blocks(content, "tool_result"))
        return n

    def wire_ids(self, plan: Plan) -> Mapping[str, Call]:
        return {tool_use_id(c): c for c in plan.calls}

    # --- errors --------------------------------------------------------------------

    def error(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
        type_ = ERROR_TYPES.get(status) or ("api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": type_, "message": message}}

    def http_fault(self, plan: Plan) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        # the API's overload status is 529, not 503
        status = 529 if plan.err == "503" else int(plan.err or 500)
        msg = f"kstress mock: injected HTTP {status} (marker {plan.marker})"
        if status == 429:
            return 429, self.error(429, msg), {"retry-after": "1", "anthropic-ratelimit-requests-remaining": "0"}
        if status == 529:
            return 529, self.error(529, msg + ": Overloaded"), None
        return 500, self.error(500, msg), None

    def malformed_body(self) -> bytes:
        return b'{"id":"msg_kstress","type":"message","role":"assistant","content":[{"type":'

    def fault_events(self, plan: Plan, turn: Turn, model: str) -> list[bytes]:
        events = [self._start(turn, model)]
        call = plan.calls[0] if plan.calls else None
        if plan.err in ("midstream", "disconnect") and call is not None:
            pieces = split_arguments(call.arguments)
            events.append(frame("content_block_start", _tool_start(0, call)).encode())
            events.append(PING)
            events.append(frame("content_block_delta", _json_delta(0, "")).encode())
            events.append(frame("content_block_delta", _json_delta(0, pieces[0])).encode())
            if plan.err == "midstream":
                err = self.error(500, f"kstress mock: injected mid-stream error (marker {plan.marker})")
                events.append(frame("error", err).encode())
            else:
                events.append(CUT)
            return events
        # malformed: a frame whose data is not JSON, then a normal end
        events.append(frame("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).encode())
        events.append(frame("content_block_delta", _text_delta(0, "partial ")).encode())
        events.append(b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"broken\n\n')
        events.append(frame("content_block_stop", {"type": "content_block_stop", "index": 0}).encode())
        events.append(_end("end_turn", 2).encode())
        return events

    # --- replies -------------------------------------------------------------------

    def _start(self, turn: Turn, model: str, content: bool = True) -> bytes:
        return _message_start_frame(new_id(), model, usage(self.prompt_chars(turn), 0)[0], content).encode()

    def stream(self, reply: Reply, turn: Turn, model: str, coalesce: bool) -> list[bytes]:
        quirk = reply.quirk
        head = self._start(turn, model, content=quirk != "no_content")
        body = [f.encode() for f in _body_frames(reply, quirk)]
        events = [head, *body]
        if quirk == "no_event_line":
            # a proxy that forwards data lines only
            events = [_EVENT_LINE.sub(b"", ev) for ev in events]
        return events

    def complete(self, reply: Reply, turn: Turn, model: str) -> dict[str, Any]:
        p, c = usage(self.prompt_chars(turn), reply.completion_chars)
        if reply.calls:
            content = [{"type": "tool_use", "id": tool_use_id(k), "name": k.name, "input": json.loads(k.arguments)} for k in reply.calls]
        else:
            content = [{"type": "text", "text": reply.text or ""}]
        return {
            "id": new_id(),
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": p, "output_tokens": c},
        }

    # --- templating ----------------------------------------------------------------

    def template_render(self, plan: Plan, reply: Reply) -> list[str]:
        # everything after message_start (the only frame with the response's id,
        # the model and the prompt's size) is a function of the plan
        return ["".join(_body_frames(reply, None))]

    def template_fill(self, template: StreamTemplate, nonce: str, info: Mapping[str, Any], turn: Turn, model: str) -> list[bytes]:
        # the general path (_start) stays uncached: it is what the tests hold this to
        input_tokens = usage(self.prompt_chars(turn), 0)[0]
        cached = _message_start(model, input_tokens)
        start = _message_start_frame(new_id(), model, input_tokens, True).encode() if cached is None else cached.replace(_ID_STAND_IN, new_id().encode())
        return [start, template.fill_bytes(nonce, b"", b"")]


def _message_start_frame(mid: str, model: str, input_tokens: int, content: bool) -> str:
    message: dict[str, Any] = {"id": mid, "type": "message", "role": "assistant", "model": model, "content": []}
    if not content:
        del message["content"]
    message.update(stop_reason=None, stop_sequence=None, usage={"input_tokens": input_tokens, "output_tokens": 1})
    return frame("message_start", {"type": "message_start", "message": message})


_ID_STAND_IN = b"msg_\\u0000"  # what the encoder makes of a NUL in the id: no id looks like it


@functools.lru_cache(maxsize=256)
def _message_start(model: str, input_tokens: int) -> bytes | None:
    """message_start with a stand-in for the message's id: the same for every
    reply of one model and prompt size (encoding it was a third of the
    dialect's cost per templated reply). None when the model's name holds the
    stand-in."""
    text = _message_start_frame("msg_\x00", model, input_tokens, True).encode()
    return text if text.count(_ID_STAND_IN) == 1 else None


def _tool_start(index: int, call: Call) -> dict[str, Any]:
    return {
        "type": "content_block_start",
        "index": index,
        "content_block": {"type": "tool_use", "id": tool_use_id(call), "name": call.name, "input": {}},
    }


def _json_delta(index: int, piece: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}


def _text_delta(index: int, piece: str) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}


def _stop(index: int) -> str:
    return frame("content_block_stop", {"type": "content_block_stop", "index": index})


def _end(stop_reason: str, output_tokens: int) -> str:
    delta = {"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": None}, "usage": {"output_tokens": output_tokens}}
    return frame("message_delta", delta) + frame("message_stop", {"type": "message_stop"})


def _body_frames(reply: Reply, quirk: str | None) -> list[str]:
    """Every frame after message_start, for a correct reply or one quirk."""
    _, out_tokens = usage(0, reply.completion_chars)
    ping = PING.decode()
    if not reply.calls:
        pieces = split_text(reply.text or "", reply.pieces)
        frames = [frame("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}), ping]
        frames += [frame("content_block_delta", _text_delta(0, p)) for p in pieces]
        frames += [_stop(0), _end("end_turn", out_tokens)]
        return frames

    calls: Sequence[Call] = reply.calls
    base = 1 if quirk in ("index1_first", "empty_json_delta") else 0
    frames: list[str] = []
    if quirk == "empty_json_delta":
        # a text block streamed as empty input_json_delta instead of text_delta,
        # as a gateway translating another API's text chunks did
        preamble = f"Running {len(calls)} tool call(s)."
        frames.append(frame("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}))
        frames += [frame("content_block_delta", _json_delta(0, "")) for _ in split_text(preamble, 4)]
        frames.append(_stop(0))
    if quirk == "overlap_blocks":
        # every tool block opened before any is closed, their deltas interleaved
        pieces = [split_arguments(c.arguments) for c in calls]
        frames += [frame("content_block_start", _tool_start(base + i, c)) for i, c in enumerate(calls)]
        frames.append(ping)
        for k in range(max(len(p) for p in pieces)):
            frames += [frame("content_block_delta", _json_delta(base + i, p[k])) for i, p in enumerate(pieces) if k < len(p)]
        frames += [_stop(base + i) for i in range(len(calls))]
    else:
        for i, c in enumerate(calls):
            index = base + i
            pieces = split_arguments(c.arguments)
            deltas = [frame("content_block_delta", _json_delta(index, "")), *(frame("content_block_delta", _json_delta(index, p)) for p in pieces)]
            if quirk == "drop_json_delta":
                deltas = []
            start = [frame("content_block_start", _tool_start(index, c))]
            if i == 0:
                start.append(ping)  # where the API sends it: after the first block's start
            if quirk == "delta_before_start":
                # the first argument piece before the block that should carry it
                frames += [deltas[1], *start, deltas[0], *deltas[2:]]
            else:
                frames += [*start, *deltas]
            frames.append(_stop(index))
    frames.append(_end("tool_use", out_tokens))
    return frames


ANTHROPIC = AnthropicDialect()
