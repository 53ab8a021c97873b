"""OpenAI chat completions: ``POST {--llm-url}/chat/completions``.

Tool calls are accumulated by ``index`` the way robust clients (the openai SDK,
LangChain, ...) do: a fragment with an ``id``/``name`` starts or names the call
at its index, continuation fragments append to that call's arguments. The
``ignore-stream-index`` fault replaces this with the classic naive accumulator.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from ..convo import Assistant, Entry, Reply, Result, ToolCall, ToolSpec, User
from ..errors import LLMError
from .base import Dialect, OnDelta, StreamParser, error_message, load


class _Accumulator:
    """Robust: fragments are keyed by ``index``; a fragment that brings a new
    ``id`` starts a new call even at a used index (providers that send every
    call as index 0), and one without an index (another quirk) continues the
    last call unless it brings a new id."""

    def __init__(self) -> None:
        self._calls: list[ToolCall] = []  # in the order they started
        self._parts: list[list[str]] = []
        self._at: dict[int, int] = {}  # stream index -> position in _calls
        self._last: int | None = None

    def _new(self, index: int) -> int:
        self._calls.append(ToolCall(index=index))
        self._parts.append([])
        self._at[index] = len(self._calls) - 1
        return len(self._calls) - 1

    def add(self, frag: dict[str, Any]) -> None:
        fn = frag.get("function") if isinstance(frag.get("function"), dict) else {}
        fid = frag.get("id") if isinstance(frag.get("id"), str) and frag.get("id") else None
        idx = frag.get("index")
        if isinstance(idx, int) and not isinstance(idx, bool):
            pos = self._at.get(idx)
            if pos is None or (fid is not None and self._calls[pos].id not in ("", fid)):
                pos = self._new(idx)
        else:
            pos = self._last
            if pos is None or (fid is not None and self._calls[pos].id not in ("", fid)):
                pos = self._new(max(self._at, default=-1) + 1)
        call = self._calls[pos]
        if fid is not None and not call.id:
            call.id = fid
        name = fn.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name  # providers that repeat the name must not make it "lookuplookup"
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = json.dumps(args)
        if isinstance(args, str) and args:
            parts = self._parts[pos]
            if parts == ["{}"] and fid is None:
                parts.clear()  # a "{}" placeholder in the first fragment, the real arguments after it
            parts.append(args)
        self._last = pos

    def result(self) -> list[ToolCall]:
        out = []
        order = sorted(range(len(self._calls)), key=lambda p: (self._calls[p].index, p))
        for n, pos in enumerate(order):
            call = self._calls[pos]
            call.arguments = "".join(self._parts[pos])
            call.id = call.id or f"call_refkernel_{n}"
            out.append(call)
        return out


class _NaiveAccumulator:
    """The ``ignore-stream-index`` fault: one accumulator for the whole
    message. The first fragment names the call; every later fragment's
    arguments are glued on, whichever call they belong to."""

    def __init__(self) -> None:
        self.call: ToolCall | None = None
        self._parts: list[str] = []

    def add(self, frag: dict[str, Any]) -> None:
        fn = frag.get("function") if isinstance(frag.get("function"), dict) else {}
        if self.call is None:
            self.call = ToolCall(index=0, id=frag.get("id") or "call_refkernel_0", name=fn.get("name") or "")
        args = fn.get("arguments")
        if isinstance(args, str):
            self._parts.append(args)

    def result(self) -> list[ToolCall]:
        if self.call is None:
            return []
        self.call.arguments = "".join(self._parts)
        return [self.call]


class _ChatStream(StreamParser):
    def __init__(self, on_delta: OnDelta, ignore_index: bool) -> None:
        self.acc = _NaiveAccumulator() if ignore_index else _Accumulator()
        self.on_delta = on_delta
        self.reply = Reply()
        self.content: list[str] = []
        self.done = False

    def feed(self, event: str | None, payload: bytes) -> bool:
        if payload == b"[DONE]":
            self.done = True
            return True
        obj = load(payload)
        if obj.get("error") is not None:
            raise LLMError(f"the LLM reported an error mid-stream: {error_message(payload)}")
        choices = obj.get("choices") or []
        if not isinstance(choices, list):
            raise LLMError(f"the LLM sent a malformed stream chunk (choices is not a list): {payload[:200]!r}")
        for choice in choices:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                self.content.append(text)
                self.on_delta(text)
            frags = delta.get("tool_calls") or []
            if not isinstance(frags, list):
                raise LLMError(f"the LLM sent a malformed stream chunk (tool_calls is not a list): {payload[:200]!r}")
            for frag in frags:
                if isinstance(frag, dict):
                    self.acc.add(frag)
            if choice.get("finish_reason"):
                self.reply.finish_reason = choice["finish_reason"]
        return False

    def assume_complete(self) -> None:
        self.done = True

    def end(self) -> Reply:
        # [DONE] may be missing (servers that just close): the finish chunk says the reply is whole
        if not self.done and self.reply.finish_reason is None:
            raise LLMError("the LLM stream ended before its finish_reason and [DONE]")
        self.reply.content = "".join(self.content)
        self.reply.tool_calls = self.acc.result()
        return self.reply


def _messages(system: str, entries: Sequence[Entry]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for e in entries:
        if isinstance(e, User):
            out.append({"role": "user", "content": e.text})
        elif isinstance(e, Assistant):
            if e.calls:
                calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in e.calls]
                out.append({"role": "assistant", "content": e.text or None, "tool_calls": calls})
            else:
                out.append({"role": "assistant", "content": e.text})
        elif isinstance(e, Result):
            out.append({"role": "tool", "tool_call_id": e.call.id, "content": e.content})
    return out


class ChatDialect(Dialect):
    name = "chat"
    path = "/chat/completions"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def request(self, model: str, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "messages": _messages(system, entries),
            "tools": [{"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}} for t in tools],
            "stream": stream,
        }
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body

    def parser(self, on_delta: OnDelta, ignore_index: bool) -> StreamParser:
        return _ChatStream(on_delta, ignore_index)

    def whole(self, obj: Any, on_delta: OnDelta, ignore_index: bool) -> Reply:
        try:
            choice = obj["choices"][0]
            msg = choice["message"]
            content = msg.get("content") or ""
            calls = msg.get("tool_calls") or []
            if not isinstance(content, str) or not isinstance(calls, list):
                raise TypeError
        except (KeyError, IndexError, TypeError, AttributeError):
            raise LLMError(f"the LLM sent an unreadable completion: {json.dumps(obj)[:200]}") from None
        acc = _NaiveAccumulator() if ignore_index else _Accumulator()
        for n, tc in enumerate(calls):
            if isinstance(tc, dict):
                acc.add({"index": n, **tc})
        if content:
            on_delta(content)  # the client sees the text as a stream of one piece
        return Reply(content=content, tool_calls=acc.result(), finish_reason=choice.get("finish_reason"))


CHAT = ChatDialect()
