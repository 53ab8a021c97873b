"""What a dialect is, and what the three share.

A dialect owns exactly what differs between the LLM APIs: the endpoint and
headers, rendering the neutral conversation (``refkernel.convo``) into a
request body, and parsing a reply -- streamed event by event, or whole -- back
into a neutral :class:`Reply`. Transport, timeouts, SSE framing and error
classification are the client's (``refkernel.llm``), once for all of them.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Sequence

from ..convo import Entry, Reply, ToolSpec
from ..errors import LLMError

OnDelta = Callable[[str], None]


def load(payload: bytes) -> dict[str, Any]:
    """One event's data as an object; anything else is a malformed stream."""
    try:
        obj = json.loads(payload)
    except ValueError:
        raise LLMError(f"the LLM sent a malformed stream chunk: {payload[:200]!r}") from None
    if not isinstance(obj, dict):
        raise LLMError(f"the LLM sent a stream chunk that is not an object: {payload[:200]!r}")
    return obj


def error_text(err: Any) -> str:
    """An API error object (``{"type"|"code", "message"}``, or a string) as one line."""
    if isinstance(err, str):
        return err
    if not isinstance(err, dict):
        return repr(err)[:500]
    kind = err.get("type") or err.get("code")
    msg = err.get("message")
    if kind and msg:
        return f"{kind}: {msg}"
    return str(msg or kind or json.dumps(err)[:500])


def error_message(body: bytes) -> str:
    """The message of an HTTP error body, in any of the three shapes: OpenAI's
    ``{"error": {"message", "type", ...}}``, Anthropic's ``{"type": "error",
    "error": {"type", "message"}}``, or whatever text a proxy sent."""
    try:
        obj = json.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("message"):
            if obj.get("type") == "error" and err.get("type"):
                return f"{err['type']}: {err['message']}"  # Anthropic's kind of error is worth naming: rate_limit_error, overloaded_error
            return str(err["message"])
        if isinstance(err, str):
            return err
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()
    return text[:500] or "(empty body)"


def parse_arguments(arguments: str) -> dict[str, Any] | None:
    try:
        value = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class StreamParser:
    """Fed one SSE event at a time (its ``event:`` name, if any, and its data);
    ``feed`` is true at the dialect's terminal event. ``end`` gives the reply,
    or raises LLMError when the stream stopped short of a complete one."""

    def feed(self, event: str | None, payload: bytes) -> bool:
        raise NotImplementedError

    def end(self) -> Reply:
        raise NotImplementedError

    def assume_complete(self) -> None:
        """The ``accept-truncated`` fault: act as if the terminal event had come."""
        raise NotImplementedError


class Dialect:
    name: str
    path: str  # under --llm-url

    def headers(self, api_key: str) -> dict[str, str]:
        raise NotImplementedError

    def request(self, model: str, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def parser(self, on_delta: OnDelta, ignore_index: bool) -> StreamParser:
        raise NotImplementedError

    def whole(self, obj: Any, on_delta: OnDelta, ignore_index: bool) -> Reply:
        """A non-streamed reply (parsed JSON)."""
        raise NotImplementedError
