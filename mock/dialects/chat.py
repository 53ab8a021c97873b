"""OpenAI chat completions: ``POST /v1/chat/completions``. The encoding itself is
``mock/wire.py`` (the oldest dialect, and the primitives the others share)."""

from __future__ import annotations

from typing import Any, Mapping

from .. import wire
from ..markers import Plan
from ..verdict import Exchange, Said, SentCall, ToolResult, chat_earlier, chat_exchanges, chat_history, latest_user_index
from ..wire import StreamTemplate
from .base import BadRequest, Dialect, Reply, Turn, message_text, usage

_OVERLOAD = ": the engine is currently overloaded"


def _include_usage(opts: Any) -> bool:
    return isinstance(opts, dict) and bool(opts.get("include_usage"))


def _tool_calls_are_lists(messages: list[Any]) -> list[Any]:
    """The messages, once every ``tool_calls`` is known to be a list (or null):
    checked only where the history is read (follow-ups, loops, sessions), not
    on every first request."""
    for k, m in enumerate(messages):
        if isinstance(m, dict):
            calls = m.get("tool_calls")
            if calls is not None and not isinstance(calls, list):
                raise BadRequest(f"messages[{k}].tool_calls is a {type(calls).__name__}: it must be a list of tool calls (or absent)", "messages")
    return messages


class ChatDialect(Dialect):
    name = "chat"
    paths = ("/v1/chat/completions", "/chat/completions")

    def read(self, body: Any) -> Turn:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object with a 'messages' list")
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' is missing or empty; send at least one user message", "messages")
        user_at = latest_user_index(messages)
        if user_at is None:
            raise BadRequest("'messages' holds no user message; the mock reads its markers from the latest one", "messages")
        stream = bool(body.get("stream"))
        model = body.get("model")
        last = messages[-1]
        content = messages[user_at].get("content")
        # positional, and the common string content read directly: this runs
        # once per request on the mock's hot path
        return Turn(
            content if isinstance(content, str) else message_text(content),
            isinstance(last, dict) and last.get("role") == "tool",
            stream,
            model if isinstance(model, str) and model else None,
            stream and _include_usage(body.get("stream_options")),
            len(messages),
            body,
            user_at,
        )

    def history(self, turn: Turn) -> tuple[list[SentCall], list[ToolResult]]:
        return chat_history(_tool_calls_are_lists(turn.body["messages"]), turn.user_at)

    def exchanges(self, turn: Turn) -> tuple[list[Exchange], bool]:
        return chat_exchanges(_tool_calls_are_lists(turn.body["messages"]), turn.user_at)

    def earlier(self, turn: Turn) -> list[Said]:
        return chat_earlier(_tool_calls_are_lists(turn.body["messages"]), turn.user_at)

    def prompt_chars(self, turn: Turn) -> int:
        return sum(len(message_text(m.get("content"))) for m in turn.body["messages"] if isinstance(m, dict))

    def _usage(self, turn: Turn, completion_chars: int) -> dict[str, int]:
        p, c = usage(self.prompt_chars(turn), completion_chars)
        return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}

    # --- errors ------------------------------------------------------------------

    def error(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
        type_ = "server_error" if status >= 500 else "invalid_request_error"
        return wire.error_body(message, type_, code, param)

    def http_fault(self, plan: Plan) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        msg = f"kstress mock: injected HTTP {plan.err} (marker {plan.marker})"
        if plan.err == "429":
            return 429, wire.error_body(msg, "requests", "rate_limit_exceeded"), {"retry-after": "1", "x-ratelimit-remaining-requests": "0"}
        if plan.err == "503":
            return 503, wire.error_body(msg + _OVERLOAD, "server_error", "overloaded"), None
        return 500, wire.error_body(msg, "server_error", "internal_error"), None

    def schedule_error(self, status: int, message: str) -> dict[str, Any]:
        if status == 429:
            return wire.error_body(message, "requests", "rate_limit_exceeded")
        if status in (503, 529):
            # 529 is Anthropic's; an OpenAI-compatible proxy in front of it
            # passes it on, the body in OpenAI's form
            return wire.error_body(message + _OVERLOAD, "server_error", "overloaded")
        return wire.error_body(message, "server_error", "internal_error")

    def nonstream_midstream(self, plan: Plan) -> tuple[int, dict[str, Any]]:
        return 500, wire.error_body(f"kstress mock: injected mid-response error (marker {plan.marker})", "server_error", "internal_error")

    def malformed_body(self) -> bytes:
        return b'{"id":"chatcmpl-kstress","choices":[{"index":'

    def fault_events(self, plan: Plan, turn: Turn, model: str) -> list[bytes]:
        # midstream / disconnect: start a real tool call, then fail
        renderer = wire.Renderer(model=model, include_usage=turn.include_usage)
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

    # --- replies -------------------------------------------------------------------

    def stream(self, reply: Reply, turn: Turn, model: str, coalesce: bool) -> list[bytes]:
        renderer = wire.Renderer(
            model=model,
            include_usage=turn.include_usage,
            per_chunk_id=reply.quirk == "per_chunk_id",
            event_line="message" if reply.quirk == "event_line" else None,
            coalesce=coalesce,
        )
        use = self._usage(turn, reply.completion_chars) if turn.include_usage else None
        if reply.calls:
            return renderer.tool_events(reply.calls, use, reply.quirk)
        return renderer.text_events(reply.text or "", reply.pieces, use)

    def complete(self, reply: Reply, turn: Turn, model: str) -> dict[str, Any]:
        finish = reply.finish if reply.calls else "stop"
        return wire.completion(model, reply.text, reply.calls, self._usage(turn, reply.completion_chars), finish)

    def models(self, model: str) -> list[dict[str, Any]]:
        return [{"id": model, "object": "model", "created": 0, "owned_by": "kstress"}]

    # --- templating ------------------------------------------------------------------

    def template_render(self, plan: Plan, reply: Reply) -> list[str]:
        if reply.calls:
            return wire.tool_deltas(reply.calls)
        return wire.text_deltas(reply.text or "", reply.pieces)

    def template_fill(self, template: StreamTemplate, nonce: str, info: Mapping[str, Any], turn: Turn, model: str) -> list[bytes]:
        renderer = wire.Renderer(model=model, include_usage=turn.include_usage, coalesce=True)
        use = self._usage(turn, info["completion_chars"]) if turn.include_usage else None
        body = template.fill_bytes(nonce, renderer.head.encode(), renderer.tail.encode())
        return renderer.close_events([body], info["finish"], use)

    def template_info(self, plan: Plan, reply: Reply) -> dict[str, Any]:
        return {"completion_chars": reply.completion_chars, "finish": "tool_calls" if reply.calls else "stop"}


CHAT = ChatDialect()
