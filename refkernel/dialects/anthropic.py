"""Anthropic Messages: ``POST {--llm-url}/messages``.

A reply streams as ``message_start``, then content blocks by ``index``
(``content_block_start`` / ``content_block_delta`` ... / ``content_block_stop``),
then ``message_delta`` (the stop reason) and ``message_stop``. Blocks are kept
by their index, as the SDK's ``accumulate_event`` does, but without its
assumption that indexes are list positions that arrive in order: a block's
input pieces that come before its start (proxies that reorder) wait for it,
blocks may overlap, and indexes need not start at 0. A tool call's input is
the concatenation of its ``input_json_delta`` pieces; a block that brought its
whole input in ``content_block_start`` (some gateways) and no pieces keeps that.

The history goes back the way the API wants it: an assistant message of
``tool_use`` blocks (the model's ids, the input as an object), then one user
message that starts with a ``tool_result`` block per result.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..convo import Assistant, Entry, Reply, Result, ToolCall, ToolSpec, User
from ..errors import LLMError
from .base import Dialect, OnDelta, StreamParser, error_text, load, parse_arguments

API_VERSION = "2023-06-01"
# The API requires a bound; the kernel's replies are tool calls and short text.
MAX_TOKENS = 4096


def _index(obj: dict[str, Any], kind: str) -> int:
    idx = obj.get("index")
    if not isinstance(idx, int) or isinstance(idx, bool):
        raise LLMError(f"the LLM sent a {kind} event without an integer index: {json.dumps(obj)[:200]}")
    return idx


@dataclass
class _Block:
    index: int
    kind: str
    call: ToolCall | None = None
    start_input: Any = None
    parts: list[str] = field(default_factory=list)
    pieces: int = 0  # input_json_delta events received, empty ones included


class _AnthropicStream(StreamParser):
    """``naive`` is the ``ignore-stream-index`` fault: one accumulator for the
    whole message, the first tool_use block names the call and every
    input_json_delta of every block is glued onto it."""

    def __init__(self, on_delta: OnDelta, naive: bool) -> None:
        self.on_delta = on_delta
        self.naive = naive
        self.blocks: list[_Block] = []  # in the order they started
        self.at: dict[int, _Block] = {}
        self.pending: dict[int, list[str]] = {}  # input pieces of a block not started yet
        self.glued: list[str] = []  # naive: every input piece, in arrival order
        self.text: list[str] = []
        self.started = False
        self.stop_reason: str | None = None
        self.done = False

    def feed(self, event: str | None, payload: bytes) -> bool:
        return self.event(event, load(payload))

    def event(self, event: str | None, obj: dict[str, Any]) -> bool:
        # The data's type decides (proxies drop or rename the event: line).
        kind = obj.get("type") if isinstance(obj.get("type"), str) else event
        if kind == "error":
            raise LLMError(f"the LLM reported an error mid-stream: {error_text(obj.get('error'))}")
        if kind == "message_start":
            self.started = True
            return False
        if kind == "ping":
            return False
        if not self.started:
            raise LLMError(f"the LLM stream sent {kind!r} before message_start")
        if kind == "content_block_start":
            self._start(_index(obj, kind), obj.get("content_block"))
        elif kind == "content_block_delta":
            self._delta(_index(obj, kind), obj.get("delta"))
        elif kind == "message_delta":
            delta = obj.get("delta") if isinstance(obj.get("delta"), dict) else {}
            if isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
        elif kind == "message_stop":
            self.done = True
            return True
        # content_block_stop, and event types added after this client: nothing to do
        return False

    def _start(self, index: int, block: Any) -> None:
        if not isinstance(block, dict):
            raise LLMError(f"the LLM sent content_block_start {index} without a content_block")
        b = _Block(index, str(block.get("type")))
        if b.kind == "tool_use":
            b.call = ToolCall(index=index, id=str(block.get("id") or ""), name=str(block.get("name") or ""))
            b.start_input = block.get("input")
            if not self.naive:
                b.parts = self.pending.pop(index, [])
                b.pieces = len(b.parts)
        elif b.kind == "text":
            if isinstance(block.get("text"), str) and block["text"]:
                self._text(block["text"])
            self.pending.pop(index, None)  # input pieces for a text block: not a call's (the SDK drops them too)
        self.blocks.append(b)
        self.at[index] = b

    def _delta(self, index: int, delta: Any) -> None:
        if not isinstance(delta, dict):
            raise LLMError(f"the LLM sent content_block_delta {index} without a delta")
        kind = delta.get("type")
        if kind == "text_delta":
            if isinstance(delta.get("text"), str) and delta["text"]:
                self._text(delta["text"])
        elif kind == "input_json_delta":
            piece = delta.get("partial_json")
            if not isinstance(piece, str):
                raise LLMError(f"the LLM sent an input_json_delta for block {index} without a partial_json string")
            if self.naive:
                self.glued.append(piece)
                return
            b = self.at.get(index)
            if b is None:
                self.pending.setdefault(index, []).append(piece)
            elif b.kind == "tool_use":
                b.parts.append(piece)
                b.pieces += 1
            # on a text block (a gateway translating text chunks): nothing of a call
        # thinking, signature and citation deltas: not used by this kernel

    def _text(self, text: str) -> None:
        self.text.append(text)
        self.on_delta(text)

    def assume_complete(self) -> None:
        self.done = True
        self.pending.clear()

    def end(self) -> Reply:
        if not self.done:
            after = f" (it had sent stop_reason {self.stop_reason!r})" if self.stop_reason else ""
            raise LLMError(f"the LLM stream ended before message_stop{after}")
        if self.pending:
            raise LLMError(f"the LLM sent input_json_delta pieces for content block(s) {sorted(self.pending)} that never started")
        tools = sorted((b for b in self.blocks if b.call is not None), key=lambda b: b.index)  # stable: start order breaks ties
        if self.naive:
            tools = tools[:1]
            if tools:
                tools[0].parts, tools[0].pieces = self.glued, len(self.glued)
        calls = []
        for n, b in enumerate(tools):
            call = b.call
            assert call is not None
            if b.pieces == 0 and not (isinstance(b.start_input, dict) and b.start_input):
                # The API always sends at least one (empty) input_json_delta; with
                # none and an empty start, the input was lost on the way.
                raise LLMError(f"the LLM sent tool_use block {b.index} ({call.name or 'unnamed'}) with no input_json_delta "
                               "and an empty input: its arguments are unknown")
            joined = "".join(b.parts)
            if joined.strip():
                call.arguments = joined
            else:
                call.arguments = json.dumps(b.start_input) if isinstance(b.start_input, dict) else "{}"
            call.id = call.id or f"toolu_refkernel_{n}"
            calls.append(call)
        return Reply(content="".join(self.text), tool_calls=calls, finish_reason=self.stop_reason)


def _input(arguments: str) -> dict[str, Any]:
    # The API takes an object only; arguments that were not one already failed
    # as a tool error, which the model reads in the tool_result.
    value = parse_arguments(arguments)
    return value if value is not None else {}


def _messages(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    results: dict[str, Any] | None = None  # the user message the current step's results go into
    for e in entries:
        if isinstance(e, Result):
            block: dict[str, Any] = {"type": "tool_result", "tool_use_id": e.call.id, "content": e.content}
            if not e.ok:
                block["is_error"] = True
            if results is None:
                results = {"role": "user", "content": []}
                out.append(results)
            results["content"].append(block)
            continue
        results = None
        if isinstance(e, User):
            out.append({"role": "user", "content": e.text})
        elif isinstance(e, Assistant):
            if not e.calls:
                if e.text:  # the API refuses empty text; consecutive user messages it joins
                    out.append({"role": "assistant", "content": e.text})
                continue
            blocks: list[dict[str, Any]] = [{"type": "text", "text": e.text}] if e.text else []
            blocks += [{"type": "tool_use", "id": c.id, "name": c.name, "input": _input(c.arguments)} for c in e.calls]
            out.append({"role": "assistant", "content": blocks})
    return out


class AnthropicDialect(Dialect):
    name = "anthropic"
    path = "/messages"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"x-api-key": api_key, "anthropic-version": API_VERSION}

    def request(self, model: str, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "max_tokens": MAX_TOKENS}
        if system:
            body["system"] = system
        body["messages"] = _messages(entries)
        body["tools"] = [{"name": t.name, "description": t.description, "input_schema": t.parameters} for t in tools]
        body["stream"] = stream
        return body

    def parser(self, on_delta: OnDelta, ignore_index: bool) -> StreamParser:
        return _AnthropicStream(on_delta, ignore_index)

    def whole(self, obj: Any, on_delta: OnDelta, ignore_index: bool) -> Reply:
        if isinstance(obj, dict) and obj.get("type") == "error":
            raise LLMError(f"the LLM answered with an error: {error_text(obj.get('error'))}")
        content = obj.get("content") if isinstance(obj, dict) else None
        if not isinstance(content, list):
            raise LLMError(f"the LLM sent an unreadable message: {json.dumps(obj)[:200]}")
        # The same accumulator as a stream (and the same fault): each block as
        # its start and one delta.
        p = _AnthropicStream(on_delta, ignore_index)
        p.event(None, {"type": "message_start"})
        for i, block in enumerate(content):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                p.event(None, {"type": "content_block_start", "index": i, "content_block": {**block, "input": {}}})
                piece = json.dumps(block.get("input", {}))
                p.event(None, {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": piece}})
            elif block.get("type") == "text":
                p.event(None, {"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                p.event(None, {"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": block.get("text") or ""}})
        p.event(None, {"type": "message_delta", "delta": {"stop_reason": obj.get("stop_reason")}})
        p.event(None, {"type": "message_stop"})
        return p.end()


ANTHROPIC = AnthropicDialect()
