"""An agent served as an OpenAI-compatible API (``--protocol openai-chat`` /
``openai-responses``; docs/protocol.md, "OpenAI-compatible agents").

The URL is the endpoint itself (``http://127.0.0.1:PORT/v1/chat/completions``,
``.../v1/responses``); a URL ending in ``/v1`` gets the endpoint's path added.
Every turn is streamed (``"stream": true``):

    chat       choices[0].delta.content is the answer; ``data: [DONE]`` ends it.
               Tool activity is invisible on this API (only the answer's text).
    responses  response.output_text.delta is the answer; response.completed ends
               it; function_call / function_call_output items, where a server
               shows its own tool calls, are read as tool calls shown.

Errors by name: an HTTP status other than 200 ``http_<status>``; a 200 that is
not an SSE stream ``not_sse``; an ``error`` object or event ``api_error``;
response.failed ``response_failed``, response.incomplete
``response_incomplete``; a stream that ends before its end ``stream_cut``.
The client carries a session's history: chat sends the earlier (input,
answer) pairs as messages, responses as input items (no
previous_response_id: an id the server keeps cannot be judged from the
LLM's side).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from .agentproto import AgentDriver, TurnSink
from .agents import drain, json_event, probe_endpoint, read_head, sse_batches

if TYPE_CHECKING:
    import aiohttp

    from .client import Turn

HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}
MODEL = "agent"  # what the agent is asked for; a server that serves one agent ignores it


def _messages(turn: "Turn", history: list[tuple[str, str]] | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for said, answer in history or ():
        out += [{"role": "user", "content": said}, {"role": "assistant", "content": answer}]
    out.append({"role": "user", "content": turn.text})
    return out


class _OpenAIDriver(AgentDriver):
    path = ""

    def __init__(self, url: str) -> None:
        super().__init__(url.rstrip("/") + self.path if url.rstrip("/").endswith("/v1") else url)

    async def prepare(self, http: "aiohttp.ClientSession", timeout_s: float) -> None:
        # `{}` has no model and no input: a server refuses it (400/422) without a run
        await probe_endpoint(http, self.url, f"the OpenAI {self.path.rsplit('/', 1)[-1]} API", timeout_s, {}, f"http://127.0.0.1:8000/v1{self.path}")

    def body(self, turn: "Turn", session: str | None, history: list[tuple[str, str]] | None) -> dict[str, Any]:
        raise NotImplementedError

    def event(self, ev: dict[str, Any], name: str | None, sink: TurnSink) -> bool:
        """Read one event; True when it ended the turn."""
        raise NotImplementedError

    async def run_turn(self, http: "aiohttp.ClientSession", turn: "Turn", sink: TurnSink, *, session: str | None, history: list[tuple[str, str]] | None) -> None:
        async with http.post(self.url, data=orjson.dumps(self.body(turn, session, history)), headers=HEADERS) as resp:
            if resp.status != 200:
                sink.error(f"http_{resp.status}", f"{self.url} answered HTTP {resp.status} {resp.reason or ''}: {await read_head(resp)}".rstrip(": "))
                return
            ctype = resp.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                sink.error("not_sse", f"{self.url} answered {ctype or 'no Content-Type'} where a stream (text/event-stream; the request said stream: true) was due: {await read_head(resp)}")
                return
            n = 0
            async for batch in sse_batches(resp):
                for name, data, size in batch:
                    if data.strip() == "[DONE]":
                        sink.frame({"done": True}, size)
                        sink.done(None)
                        await drain(resp)
                        return
                    ev = json_event(data, "a stream event")
                    sink.frame(ev, size)
                    n += 1
                    if isinstance(ev.get("error"), dict) or ev.get("type") == "error":
                        err = ev.get("error") if isinstance(ev.get("error"), dict) else ev
                        sink.error("api_error", str(err.get("message") or err.get("code") or "an error event with no message"))
                        await drain(resp)
                        return
                    if self.event(ev, name, sink):
                        await drain(resp)
                        return
            sink.error("stream_cut", f"the stream ended after {n} events before its end ({self.end})")

    end = ""


class OpenAIChatDriver(_OpenAIDriver):
    name = "openai-chat"
    path = "/chat/completions"
    end = "data: [DONE]"

    def body(self, turn: "Turn", session: str | None, history: list[tuple[str, str]] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL, "messages": _messages(turn, history), "stream": True}
        if session is not None:
            body["user"] = session  # a hint only: the history is in the messages
        return body

    def event(self, ev: dict[str, Any], name: str | None, sink: TurnSink) -> bool:
        for choice in ev.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("content"), str) and delta["content"]:
                sink.delta(delta["content"])
        return False  # only [DONE] ends a chat stream


class OpenAIResponsesDriver(_OpenAIDriver):
    name = "openai-responses"
    path = "/responses"
    end = "response.completed"

    def body(self, turn: "Turn", session: str | None, history: list[tuple[str, str]] | None) -> dict[str, Any]:
        items: list[dict[str, Any]] = []
        for said, answer in history or ():
            items += [{"type": "message", "role": "user", "content": said}, {"type": "message", "role": "assistant", "content": answer}]
        items.append({"type": "message", "role": "user", "content": turn.text})
        return {"model": MODEL, "input": items, "stream": True, "store": False}

    def event(self, ev: dict[str, Any], name: str | None, sink: TurnSink) -> bool:
        kind = ev.get("type") or name
        if kind == "response.output_text.delta":
            if isinstance(ev.get("delta"), str):
                sink.delta(ev["delta"])
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = ev.get("item")
            if isinstance(item, dict):
                self._item(item, kind.endswith("added"), sink)
        # response.function_call_arguments.delta names the item (fc_...), not
        # the call: the arguments are read whole from output_item.done
        elif kind == "response.completed":
            sink.done(None)
            return True
        elif kind == "response.failed":
            err = (ev.get("response") or {}).get("error") or {}
            sink.error("response_failed", str(err.get("message") or "response.failed with no error message"))
            return True
        elif kind == "response.incomplete":
            why = ((ev.get("response") or {}).get("incomplete_details") or {}).get("reason")
            sink.error("response_incomplete", f"response.incomplete ({why or 'no reason given'})")
            return True
        return False

    @staticmethod
    def _item(item: dict[str, Any], added: bool, sink: TurnSink) -> None:
        kind = item.get("type")
        call = str(item.get("call_id") or item.get("id") or "")
        if kind == "function_call":
            if added:
                sink.tool(call, item.get("name"), "start")
            else:
                sink.tool(call, item.get("name"), "end", arguments=item.get("arguments") if isinstance(item.get("arguments"), str) else None)
        elif kind == "function_call_output" and not added:
            sink.tool(call, None, "result")
