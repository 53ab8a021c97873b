"""OpenAI Responses: ``POST {--llm-url}/responses``.

A reply streams as ``response.created``, then output items
(``response.output_item.added`` ... ``.done``; a function call's arguments as
``response.function_call_arguments.delta`` events keyed by ``item_id``, then
``.done``; text as ``response.output_text.delta``), then ``response.completed``
with the whole output. Items are kept by their id, not by ``output_index``
(servers number them from 1, or all 0): a delta that comes before its item
(proxies that reorder) waits for it. The last word on a call's arguments is,
as in the SDK, the final output of ``response.completed``, then the item's
``.done`` events, then the concatenated deltas (gateways skip the done events).

The history goes back as input items: each ``function_call`` item repeated
(its ``id``, ``call_id``, ``name``, ``arguments``), then one
``function_call_output`` per result. The whole conversation is sent every time
(no ``previous_response_id``): the kernel keeps its own history.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Sequence

from ..convo import Assistant, Entry, Reply, Result, ToolCall, ToolSpec, User
from ..errors import LLMError
from .base import Dialect, OnDelta, StreamParser, error_text, load


@dataclass
class _Item:
    index: int
    kind: str
    call: ToolCall | None = None
    parts: list[str] = field(default_factory=list)
    final: str | None = None  # the arguments as a done event or the completed output states them
    text: bool = False  # text deltas came for it


def _output_index(obj: dict[str, Any]) -> int | None:
    idx = obj.get("output_index")
    return idx if isinstance(idx, int) and not isinstance(idx, bool) else None


def _error(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, (dict, str)):
        return error_text(err)
    return error_text({"code": obj.get("code"), "message": obj.get("message")})


class _ResponsesStream(StreamParser):
    """``naive`` is the ``ignore-stream-index`` fault: item ids and output
    indexes are not looked at; the first function_call item names the call,
    every arguments delta is glued onto it, and the done events and the final
    output (which would put each call's arguments right) are not read."""

    def __init__(self, on_delta: OnDelta, naive: bool) -> None:
        self.on_delta = on_delta
        self.naive = naive
        self.items: dict[str, _Item] = {}  # by item id, in the order they were added
        self.by_index: dict[int, str] = {}  # the latest item added at each output_index
        self.pending: dict[str, list[str]] = {}  # deltas of an item not added yet
        self.glued: list[str] = []
        self.text: list[str] = []
        self.text_id = ""
        self.created = False
        self.status: str | None = None

    def feed(self, event: str | None, payload: bytes) -> bool:
        return self.event(event, load(payload))

    def event(self, event: str | None, obj: dict[str, Any]) -> bool:
        kind = obj.get("type") if isinstance(obj.get("type"), str) else event
        if kind == "error":
            raise LLMError(f"the LLM reported an error mid-stream: {_error(obj)}")
        if kind == "response.failed":
            resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
            raise LLMError(f"the LLM reported the response failed: {_error(resp) if resp.get('error') else 'no error given'}")
        if kind in ("response.created", "response.queued", "response.in_progress"):
            self.created = True
            return False
        if not self.created:
            raise LLMError(f"the LLM stream sent {kind!r} before response.created")
        if kind == "response.output_item.added":
            self._add(obj.get("item"), _output_index(obj))
        elif kind == "response.function_call_arguments.delta":
            piece = obj.get("delta")
            if not isinstance(piece, str):
                raise LLMError(f"the LLM sent a function_call_arguments.delta without a delta string: {json.dumps(obj)[:200]}")
            if self.naive:
                self.glued.append(piece)
                return False
            key = self._key(obj.get("item_id"), _output_index(obj))
            it = self.items.get(key)
            if it is None:
                self.pending.setdefault(key, []).append(piece)
            elif it.call is not None:
                it.parts.append(piece)
        elif kind == "response.function_call_arguments.done":
            if not self.naive:
                it = self.items.get(self._key(obj.get("item_id"), _output_index(obj)))
                if it is not None and isinstance(obj.get("arguments"), str):
                    it.final = obj["arguments"]
        elif kind == "response.output_item.done":
            if not self.naive:
                self._final(obj.get("item"), _output_index(obj))
        elif kind == "response.output_text.delta":
            if isinstance(obj.get("delta"), str) and obj["delta"]:
                self._text(obj["delta"], obj.get("item_id"))
        elif kind == "response.output_text.done":
            # a server that sent the text only whole
            it = self.items.get(str(obj.get("item_id")))
            if it is not None and not it.text and isinstance(obj.get("text"), str) and obj["text"]:
                self._text(obj["text"], obj.get("item_id"))
        elif kind in ("response.completed", "response.incomplete"):
            resp = obj.get("response") if isinstance(obj.get("response"), dict) else {}
            self.status = str(resp.get("status") or kind.rsplit(".", 1)[1])
            output = resp.get("output")
            if not self.naive and isinstance(output, list):
                for n, item in enumerate(output):
                    self._final(item, n)
            return True
        # content parts, reasoning, and event types added after this client: nothing to do
        return False

    def _key(self, item_id: Any, index: int | None) -> str:
        if isinstance(item_id, str) and item_id:
            return item_id
        if index is not None and index in self.by_index:
            return self.by_index[index]
        return f"#{index}"

    def _add(self, item: Any, index: int | None) -> _Item:
        if not isinstance(item, dict):
            raise LLMError("the LLM sent response.output_item.added without an item")
        index = index if index is not None else len(self.items)
        key = item["id"] if isinstance(item.get("id"), str) and item["id"] else f"#{index}"
        if key in self.items:
            raise LLMError(f"the LLM added output item {key!r} twice")
        it = _Item(index, str(item.get("type")))
        if it.kind == "function_call":
            if self.naive and any(i.call is not None for i in self.items.values()):
                it.kind = "ignored"  # the naive client knows one call only
            else:
                it.call = ToolCall(index=index, id=str(item.get("call_id") or ""), name=str(item.get("name") or ""),
                                   item_id=item["id"] if isinstance(item.get("id"), str) else "")
                it.parts = self.pending.pop(key, [])
                if not it.parts and isinstance(item.get("arguments"), str) and item["arguments"]:
                    it.parts = [item["arguments"]]
        elif it.kind == "message" and not self.text_id and key[0] != "#":
            self.text_id = key
        self.items[key] = it
        self.by_index[index] = key
        return it

    def _final(self, item: Any, index: int | None) -> None:
        """A complete item (output_item.done, or the completed output): its
        arguments are the call's."""
        if not isinstance(item, dict):
            return
        key = self._key(item.get("id"), None if item.get("id") else index)
        it = self.items.get(key) or self._add(item, index)
        if it.call is None:
            if it.kind == "message" and not self.text and isinstance(item.get("content"), list):
                # a server that sent the text only in the final item
                text = "".join(p.get("text", "") for p in item["content"] if isinstance(p, dict) and p.get("type") == "output_text")
                if text:
                    self._text(text, key)
            return
        if isinstance(item.get("arguments"), str):
            it.final = item["arguments"]
        if not it.call.id and isinstance(item.get("call_id"), str):
            it.call.id = item["call_id"]
        if not it.call.name and isinstance(item.get("name"), str):
            it.call.name = item["name"]

    def _text(self, text: str, item_id: Any) -> None:
        it = self.items.get(str(item_id))
        if it is not None:
            it.text = True
        if not self.text_id and isinstance(item_id, str):
            self.text_id = item_id
        self.text.append(text)
        self.on_delta(text)

    def assume_complete(self) -> None:
        self.status = self.status or "completed"
        self.pending.clear()

    def end(self) -> Reply:
        if self.status is None:
            raise LLMError("the LLM stream ended before response.completed")
        if self.pending:
            raise LLMError(f"the LLM sent arguments for output item(s) {sorted(self.pending)} it never added")
        fcs = sorted((it for it in self.items.values() if it.call is not None), key=lambda it: it.index)  # stable: arrival breaks ties
        calls = []
        for n, it in enumerate(fcs):
            call = it.call
            assert call is not None
            call.arguments = "".join(self.glued) if self.naive else (it.final if it.final is not None else "".join(it.parts))
            call.id = call.id or f"call_refkernel_{n}"
            calls.append(call)
        return Reply(content="".join(self.text), tool_calls=calls, finish_reason=self.status, text_id=self.text_id)


def _items(entries: Sequence[Entry]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for e in entries:
        if isinstance(e, User):
            out.append({"role": "user", "content": e.text})
        elif isinstance(e, Assistant):
            if e.text:
                if e.text_id:  # the output message item again, under its own id
                    out.append({"type": "message", "id": e.text_id, "role": "assistant", "status": "completed",
                                "content": [{"type": "output_text", "text": e.text, "annotations": []}]})
                else:
                    out.append({"role": "assistant", "content": e.text})
            for c in e.calls:
                item = {"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}
                if c.item_id:
                    item["id"] = c.item_id
                out.append(item)
        elif isinstance(e, Result):
            out.append({"type": "function_call_output", "call_id": e.call.id, "output": e.content})
    return out


class ResponsesDialect(Dialect):
    name = "responses"
    path = "/responses"

    def headers(self, api_key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {api_key}"}

    def request(self, model: str, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model}
        if system:
            body["instructions"] = system
        body["input"] = _items(entries)
        body["tools"] = [{"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters} for t in tools]
        body["stream"] = stream
        return body

    def parser(self, on_delta: OnDelta, ignore_index: bool) -> StreamParser:
        return _ResponsesStream(on_delta, ignore_index)

    def whole(self, obj: Any, on_delta: OnDelta, ignore_index: bool) -> Reply:
        output = obj.get("output") if isinstance(obj, dict) else None
        if isinstance(obj, dict) and (obj.get("status") == "failed" or obj.get("error")):
            raise LLMError(f"the LLM reported the response failed: {_error(obj)}")
        if not isinstance(output, list):
            raise LLMError(f"the LLM sent an unreadable response: {json.dumps(obj)[:200]}")
        # The same accumulator as a stream (and the same fault): each item as
        # added, its arguments as one delta, then the completed output.
        p = _ResponsesStream(on_delta, ignore_index)
        p.event(None, {"type": "response.created"})
        for i, item in enumerate(output):
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                p.event(None, {"type": "response.output_item.added", "output_index": i, "item": {**item, "arguments": ""}})
                p.event(None, {"type": "response.function_call_arguments.delta", "output_index": i, "item_id": item.get("id"),
                               "delta": item.get("arguments") if isinstance(item.get("arguments"), str) else ""})
            else:
                p.event(None, {"type": "response.output_item.added", "output_index": i, "item": item})
        p.event(None, {"type": "response.completed", "response": obj})
        return p.end()


RESPONSES = ResponsesDialect()
