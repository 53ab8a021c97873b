"""OpenAI Responses: ``POST /v1/responses``, stream and non-stream.

A stream is ``response.created``, ``response.in_progress``, then per output
item ``response.output_item.added`` ... ``response.output_item.done`` (a
function call's arguments as ``response.function_call_arguments.delta`` events
keyed by ``item_id``, then ``.done``; a text message as a content part and
``response.output_text.delta`` events), then ``response.completed`` carrying
the whole output. Every event has an ``event:`` line naming its type and a
``sequence_number`` counting from 0, as the API sends them.

Ids: function_call items ``fc_<nonce>_<i>`` with ``call_id`` ``call_<nonce>_<i>``
(the plan's id); a text message item ``msg_<nonce>``.

Tool results come back as input items: the ``function_call`` items repeated,
then ``function_call_output`` items (``call_id``, ``output``). A request that
leans on ``previous_response_id`` instead of repeating the input is refused:
the mock keeps no conversations.
"""

from __future__ import annotations

import functools
import json
import time
from random import getrandbits
from typing import Any, Mapping

from ..markers import Call, Plan, item_id, parse_call_step
from ..verdict import Exchange, Said, SentCall, ToolResult, json_arguments
from ..wire import CUT, StreamTemplate, split_arguments, split_text
from .base import BadRequest, Dialect, Reply, Turn, message_text, usage
from .chat import CHAT

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def new_id() -> str:
    return f"resp_{getrandbits(96):024x}"


def frame(obj: dict[str, Any]) -> str:
    return f"event: {obj['type']}\ndata: {_dumps(obj)}\n\n"


def _is_user(item: Any) -> bool:
    return isinstance(item, dict) and item.get("role") == "user" and item.get("type", "message") == "message"


def _fc_item(call: Call, done: bool) -> dict[str, Any]:
    return {
        "id": item_id(call.id),
        "type": "function_call",
        "status": "completed" if done else "in_progress",
        "arguments": call.arguments if done else "",
        "call_id": call.id,
        "name": call.name,
    }


def _msg_item(msg_id: str, text: str | None) -> dict[str, Any]:
    content = [] if text is None else [_part(text)]
    return {"id": msg_id, "type": "message", "status": "completed" if text is not None else "in_progress", "content": content, "role": "assistant"}


def _part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "annotations": [], "logprobs": [], "text": text}


def _usage(p: int, c: int) -> dict[str, Any]:
    return {
        "input_tokens": p,
        "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 0},
        "output_tokens": c,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": p + c,
    }


class ResponsesDialect(Dialect):
    name = "responses"
    paths = ("/v1/responses", "/responses")

    # --- reading -------------------------------------------------------------------

    def read(self, body: Any) -> Turn:
        if not isinstance(body, dict):
            raise BadRequest("the request body must be a JSON object with an 'input' string or list")
        items = body.get("input")
        model = body.get("model")
        model = model if isinstance(model, str) and model else None
        stream = bool(body.get("stream"))
        if isinstance(items, str) and items:
            return Turn(items, False, stream, model, True, 1, body, -1)
        if not isinstance(items, list) or not items:
            raise BadRequest("'input' is missing or empty; send a string or a list of input items with a user message", "input")
        user_at = None
        for k in range(len(items) - 1, -1, -1):
            if _is_user(items[k]):
                user_at = k
                break
        if user_at is None:
            hint = " (the mock keeps no conversations: send the whole input, not previous_response_id)" if body.get("previous_response_id") else ""
            raise BadRequest(f"'input' holds no user message; the mock reads its markers from the latest one{hint}", "input")
        last = items[-1]
        return Turn(
            user_text=message_text(items[user_at].get("content")),
            followup=isinstance(last, dict) and last.get("type") == "function_call_output",
            stream=stream,
            model=model,
            include_usage=True,
            n_messages=len(items),
            body=body,
            user_at=user_at,
        )

    def history(self, turn: Turn) -> tuple[list[SentCall], list[ToolResult]]:
        # no assistant message groups a turn's calls here: every function_call
        # and function_call_output after the user input belongs to it (a kernel
        # may list each call right before its output)
        sent, results = [], []
        for item in turn.body["input"][turn.user_at + 1 :]:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "function_call":
                sent.append(SentCall(item.get("call_id"), item.get("name"), json_arguments(item.get("arguments")), item.get("id")))
            elif item.get("type") == "function_call_output":
                results.append(ToolResult(item.get("call_id"), message_text(item.get("output"))))
        return sent, results

    def exchanges(self, turn: Turn) -> tuple[list[Exchange], bool]:
        # no assistant message groups a step's calls: a function_call starts
        # the next step when its id names another step than the calls before
        # it (known steps, or any change after results), or repeats one of them
        out: list[Exchange] = []
        answered = False
        for item in turn.body["input"][turn.user_at + 1 :]:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if kind == "function_call":
                call_id = item.get("call_id")
                ref = parse_call_step(call_id)
                tag = ref[1] if ref is not None else None
                cur = out[-1] if out else None
                if (
                    cur is None
                    or (tag != cur.tag and (cur.results or (tag is not None and cur.tag is not None)))
                    or any(c.id == call_id for c in cur.sent)
                ):
                    cur = Exchange([], [], tag)
                    out.append(cur)
                cur.sent.append(SentCall(call_id, item.get("name"), json_arguments(item.get("arguments")), item.get("id")))
                answered = False
            elif kind == "function_call_output":
                if not out:
                    out.append(Exchange([], []))
                out[-1].results.append(ToolResult(item.get("call_id"), message_text(item.get("output"))))
                answered = False
            elif item.get("role") == "assistant":
                answered = True
        return out, answered

    def earlier(self, turn: Turn) -> list[Said]:
        items = turn.body["input"]
        # The mock keeps no responses: what an earlier response or an item
        # reference stands for is unknown to it, so the history cannot be judged.
        out = [Said(False, unresolved="previous_response_id")] if turn.body.get("previous_response_id") else []
        for item in items[: max(turn.user_at, 0)]:
            if not isinstance(item, dict):
                continue
            kind = item.get("type")
            if _is_user(item):
                out.append(Said(True, message_text(item.get("content"))))
            elif kind in ("function_call", "function_call_output"):
                out.append(Said(False, "", (item.get("call_id"),), results=kind == "function_call_output"))
            elif item.get("role") == "assistant":
                out.append(Said(False, message_text(item.get("content")), ()))
            elif kind == "item_reference" or (kind is None and "role" not in item and "id" in item):
                out.append(Said(False, unresolved="item_reference"))
        return out

    def prompt_chars(self, turn: Turn) -> int:
        items = turn.body["input"]
        n = len(message_text(turn.body.get("instructions")))
        if isinstance(items, str):
            return n + len(items)
        for item in items:
            if isinstance(item, dict):
                n += len(message_text(item.get("content"))) + len(message_text(item.get("output")))
                n += len(item["arguments"]) if isinstance(item.get("arguments"), str) else 0
        return n

    def item_ids(self, plan: Plan) -> Mapping[str, str]:
        return {c.id: item_id(c.id) for c in plan.calls}

    # --- errors: the same vendor's HTTP errors as chat ---------------------------------

    def error(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
        return CHAT.error(status, message, param, code)

    def http_fault(self, plan: Plan) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        return CHAT.http_fault(plan)

    def schedule_error(self, status: int, message: str) -> dict[str, Any]:
        return CHAT.schedule_error(status, message)

    def nonstream_midstream(self, plan: Plan) -> tuple[int, dict[str, Any]]:
        return CHAT.nonstream_midstream(plan)

    def malformed_body(self) -> bytes:
        return b'{"id":"resp_kstress","object":"response","output":[{"type":'

    def fault_events(self, plan: Plan, turn: Turn, model: str) -> list[bytes]:
        r = _Response(self, turn, model)
        out = [r.lifecycle("response.created"), r.lifecycle("response.in_progress")]
        call = plan.calls[0] if plan.calls else None
        if plan.err in ("midstream", "disconnect") and call is not None:
            fc = item_id(call.id)
            out.append(r.event({"type": "response.output_item.added", "output_index": 0, "item": _fc_item(call, False)}))
            out.append(r.event({"type": "response.function_call_arguments.delta", "item_id": fc, "output_index": 0, "delta": split_arguments(call.arguments)[0]}))
            if plan.err == "disconnect":
                return [*(e.encode() for e in out), CUT]
            # how the API reports a response that failed after it started
            failed = r.response("failed", [_fc_item(call, False)], None)
            failed["error"] = {"code": "server_error", "message": f"kstress mock: injected mid-stream error (marker {plan.marker})"}
            out.append(r.event({"type": "response.failed", "response": failed}))
            return [e.encode() for e in out]
        # malformed: an event whose data is not JSON, then a normal end
        msg_id = f"msg_{plan.nonce}"
        out.append(r.event({"type": "response.output_item.added", "output_index": 0, "item": _msg_item(msg_id, None)}))
        out.append(r.event({"type": "response.content_part.added", "item_id": msg_id, "output_index": 0, "content_index": 0, "part": _part("")}))
        out.append(r.event({"type": "response.output_text.delta", "item_id": msg_id, "output_index": 0, "content_index": 0, "delta": "partial ", "logprobs": []}))
        r.seq += 1
        broken = 'event: response.output_text.delta\ndata: {"type":"response.output_text.delta","item_id":"' + msg_id + '","delta":"broken\n\n'
        out.append(broken)
        out.append(r.completed([_msg_item(msg_id, "partial ")], 2))
        return [e.encode() for e in out]

    # --- replies -------------------------------------------------------------------

    def stream(self, reply: Reply, turn: Turn, model: str, coalesce: bool) -> list[bytes]:
        r = _Response(self, turn, model)
        quirk = reply.quirk
        out = [r.lifecycle("response.created"), r.lifecycle("response.in_progress")]
        items, output = _items(reply, r.seq, quirk)
        r.seq += len(items)
        out += items
        if quirk != "no_completed":
            if quirk == "changed_response_id":
                r.id = new_id()
            out.append(r.completed(output, usage(0, reply.completion_chars)[1]))
        return [e.encode() for e in out]

    def complete(self, reply: Reply, turn: Turn, model: str) -> dict[str, Any]:
        r = _Response(self, turn, model)
        _, output = _items(reply, 0, None)
        return r.response("completed", output, _usage(*usage(self.prompt_chars(turn), reply.completion_chars)))

    # --- templating ----------------------------------------------------------------

    def template_render(self, plan: Plan, reply: Reply) -> list[str]:
        # the item events and the final output depend only on the plan; the
        # lifecycle events around them carry the response's id, time and model
        items, output = _items(reply, 2, None)
        return ["".join(items), _dumps(output)]

    def template_info(self, plan: Plan, reply: Reply) -> dict[str, Any]:
        items, _ = _items(reply, 2, None)
        return {"completion_chars": reply.completion_chars, "completed_seq": 2 + len(items)}

    def template_fill(self, template: StreamTemplate, nonce: str, info: Mapping[str, Any], turn: Turn, model: str) -> list[bytes]:
        events, output = template.parts_bytes(nonce)
        key = (int(time.time()), model, turn.body.get("parallel_tool_calls") is not False, usage(self.prompt_chars(turn), 0)[0],
               usage(0, info["completion_chars"])[1], info["completed_seq"])  # fmt: skip
        rid = new_id()
        around = _around(*key)
        if around is None:  # the model's name holds the id's stand-in: built in full
            lifecycle, head, tail = _around_frames(rid, *key)
        else:
            bid = rid.encode()
            lifecycle, head, tail = (x.replace(_ID_STAND_IN, bid) for x in around)
        return [lifecycle, events, head + output + tail]


_ID_STAND_IN = b"resp_\\u0000"  # what the encoder makes of a NUL in the id: no id looks like it


def _around_frames(rid: str, created: int, model: str, parallel: bool, prompt_tokens: int, completion_tokens: int, seq: int) -> tuple[bytes, bytes, bytes]:
    """The lifecycle events, and response.completed split where its output goes."""
    r = _Response.__new__(_Response)
    r.id, r.created, r.model, r.parallel, r.prompt_tokens, r.seq = rid, created, model, parallel, prompt_tokens, 0
    lifecycle = r.lifecycle("response.created") + r.lifecycle("response.in_progress")
    r.seq = seq
    head, tail = r.completed_around(completion_tokens)
    return lifecycle.encode(), head.encode(), tail.encode()


@functools.lru_cache(maxsize=256)
def _around(created: int, model: str, parallel: bool, prompt_tokens: int, completion_tokens: int, seq: int) -> tuple[bytes, bytes, bytes] | None:
    """_around_frames with a stand-in for the response's id: the JSON of the
    response object is the same for every response of one second, model and
    size, and encoding it three times was half of the dialect's cost per
    reply. None when the model's name holds the stand-in."""
    parts = _around_frames("resp_\x00", created, model, parallel, prompt_tokens, completion_tokens, seq)
    return parts if b"".join(parts).count(_ID_STAND_IN) == 3 else None


class _Response:
    """The per-response parts: id, time, model, usage, sequence numbers."""

    def __init__(self, dialect: ResponsesDialect, turn: Turn, model: str) -> None:
        self.id = new_id()
        self.created = int(time.time())
        self.model = model
        self.prompt_tokens = usage(dialect.prompt_chars(turn), 0)[0]
        self.parallel = turn.body.get("parallel_tool_calls") is not False
        self.seq = 0

    def response(self, status: str, output: list[dict[str, Any]], use: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": self.parallel,
            "tool_choice": "auto",
            "tools": [],
            "usage": use,
        }

    def event(self, obj: dict[str, Any]) -> str:
        seq, self.seq = self.seq, self.seq + 1
        return frame({"type": obj.pop("type"), "sequence_number": seq, **obj})

    def lifecycle(self, type_: str) -> str:
        return self.event({"type": type_, "response": self.response("in_progress", [], None)})

    def completed(self, output: list[dict[str, Any]], completion_tokens: int) -> str:
        head, tail = self.completed_around(completion_tokens)
        return head + _dumps(output) + tail

    def completed_around(self, completion_tokens: int) -> tuple[str, str]:
        """response.completed split where its output array goes."""
        body = self.response("completed", [], _usage(self.prompt_tokens, completion_tokens))
        text = frame({"type": "response.completed", "sequence_number": self.seq, "response": body})
        head, sep, tail = text.partition('"output":[]')
        return head + '"output":', tail


def _items(reply: Reply, seq: int, quirk: str | None) -> tuple[list[str], list[dict[str, Any]]]:
    """The output item events (sequence numbers from ``seq``) and the final
    output, for a correct reply or one quirk."""
    events: list[str] = []

    def add(obj: dict[str, Any]) -> None:
        nonlocal seq
        events.append(frame({"type": obj.pop("type"), "sequence_number": seq, **obj}))
        seq += 1

    if not reply.calls:
        msg_id = f"msg_{reply.nonce}" if reply.nonce else f"msg_{getrandbits(96):024x}"
        text = reply.text or ""
        where = {"item_id": msg_id, "output_index": 0, "content_index": 0}
        add({"type": "response.output_item.added", "output_index": 0, "item": _msg_item(msg_id, None)})
        add({"type": "response.content_part.added", **where, "part": _part("")})
        for p in split_text(text, reply.pieces):
            add({"type": "response.output_text.delta", **where, "delta": p, "logprobs": []})
        add({"type": "response.output_text.done", **where, "text": text, "logprobs": []})
        add({"type": "response.content_part.done", **where, "part": _part(text)})
        add({"type": "response.output_item.done", "output_index": 0, "item": _msg_item(msg_id, text)})
        return events, [_msg_item(msg_id, text)]

    base = 1 if quirk == "index1_first" else 0
    for i, c in enumerate(reply.calls):
        index = 0 if quirk == "dup_output_index" else base + i
        fc = item_id(c.id)
        deltas = [{"type": "response.function_call_arguments.delta", "item_id": fc, "output_index": index, "delta": p} for p in split_arguments(c.arguments)]
        added = {"type": "response.output_item.added", "output_index": index, "item": _fc_item(c, False)}
        if quirk == "delta_before_added":
            # the first argument piece before the item it belongs to
            add(deltas[0])
            add(added)
            deltas = deltas[1:]
        else:
            add(added)
        for d in deltas:
            add(d)
        add({"type": "response.function_call_arguments.done", "item_id": fc, "output_index": index, "name": c.name, "arguments": c.arguments})
        if quirk != "item_never_done":
            add({"type": "response.output_item.done", "output_index": index, "item": _fc_item(c, True)})
    return events, [_fc_item(c, True) for c in reply.calls]


RESPONSES = ResponsesDialect()
