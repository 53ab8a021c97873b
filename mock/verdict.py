"""Check what a kernel sent back against what the mock asked for.

When a request's history ends with tool results, the mock recomputes its plan
from the original user message (plans are deterministic) and compares:

* ``got``    -- the number of tool results after the assistant's tool-call message;
* ``ids``    -- every call id the assistant message carries is a planned id, once,
               and every result answers one of those ids, once;
* ``args``   -- every call the assistant message carries has its planned name and
               arguments (matched by id, else by position): catches spliced or
               swapped arguments and calls invented by the kernel;
* ``order``  -- results come in declared order (whatever order the tools finished);
* ``errors`` -- results that report failure (the catalog's error pattern) or lack
               what a successful result contains (slow tools: their own KST-S and
               KST-E lines with this nonce and index), or that the kernel itself
               marked as errors (Anthropic ``is_error``).

Each dialect reads its own request into the same neutral history -- the calls
the kernel says it made (:class:`SentCall`) and the results it handed back
(:class:`ToolResult`) -- and :func:`check_history` judges that, so the verdict
means the same on every wire. :func:`check` is the chat-completions reader.
"""

from __future__ import annotations

import collections
import json
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .catalog import Catalog
from .markers import Call, Plan, TIMESTAMP_RE, VerdictLine

ECHO_LIMIT = 8192


def message_text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


def latest_user_index(messages: Sequence[dict[str, Any]]) -> int | None:
    for k in range(len(messages) - 1, -1, -1):
        if isinstance(messages[k], dict) and messages[k].get("role") == "user":
            return k
    return None


def tool_exchange(messages: Sequence[dict[str, Any]], user_at: int) -> tuple[list[dict], list[dict]]:
    """The last assistant tool-call message after the user message, and the
    tool results that follow it."""
    assistant_at = None
    for k in range(len(messages) - 1, user_at, -1):
        m = messages[k]
        if isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls"):
            assistant_at = k
            break
    if assistant_at is None:
        calls: list[dict] = []
        start = user_at + 1
    else:
        calls = [c for c in messages[assistant_at]["tool_calls"] if isinstance(c, dict)]
        start = assistant_at + 1
    results = [m for m in messages[start:] if isinstance(m, dict) and m.get("role") == "tool"]
    return calls, results


BAD_ARGS: Any = type("BadArgs", (), {"__repr__": lambda self: "BAD_ARGS"})()
"""A SentCall's arguments when they are not in the dialect's form: not a JSON
string where the API carries one (chat, Responses), not an object where it
carries one (Anthropic ``input``), or invalid JSON."""


@dataclass(frozen=True)
class SentCall:
    """One call as the kernel's history says it was made."""

    id: Any  # the id the results must answer (chat/Anthropic id, Responses call_id)
    name: Any
    arguments: Any  # the parsed value, or BAD_ARGS
    item_id: Any = None  # Responses: the function_call item's own id, when sent


@dataclass(frozen=True)
class ToolResult:
    """One tool result as the kernel handed it back."""

    call_id: Any
    content: str
    is_error: bool = False  # the kernel marked it failed (Anthropic is_error)


def json_arguments(value: Any) -> Any:
    """A JSON-string arguments field (chat, Responses) parsed, or BAD_ARGS."""
    if not isinstance(value, str):
        return BAD_ARGS  # the API carries arguments as a JSON string
    try:
        return json.loads(value)
    except ValueError:
        return BAD_ARGS


def _result_ok(call: Call, content: str, catalog: Catalog, nonce: str) -> bool:
    if catalog.is_error(content):
        return False
    if any(s not in content for s in call.expect):
        return False
    if call.role == "slow":
        edges = {
            m.group("edge")
            for m in TIMESTAMP_RE.finditer(content)
            if m.group("nonce") == nonce and int(m.group("i")) == call.index
        }
        return edges == {"S", "E"}
    return True


def chat_history(messages: Sequence[dict[str, Any]], user_at: int) -> tuple[list[SentCall], list[ToolResult]]:
    """The neutral history of a chat-completions request."""
    sent_calls, results = tool_exchange(messages, user_at)
    sent = []
    for c in sent_calls:
        fn = c.get("function") if isinstance(c.get("function"), dict) else {}
        sent.append(SentCall(c.get("id"), fn.get("name"), json_arguments(fn.get("arguments"))))
    return sent, [ToolResult(r.get("tool_call_id"), message_text(r.get("content"))) for r in results]


def check(plan: Plan, messages: Sequence[dict[str, Any]], user_at: int, catalog: Catalog, tool_ms: int | None) -> tuple[VerdictLine, list[tuple[str, str]]]:
    """The verdict for a chat follow-up request, and the results as received
    (tool_call_id, content) for the echo."""
    sent, results = chat_history(messages, user_at)
    return check_history(plan, sent, results, catalog, tool_ms)


def check_history(
    plan: Plan,
    sent: Sequence[SentCall],
    results: Sequence[ToolResult],
    catalog: Catalog,
    tool_ms: int | None,
    wire_ids: Mapping[str, Call] | None = None,
    item_ids: Mapping[str, str] | None = None,
) -> tuple[VerdictLine, list[tuple[str, str]]]:
    """The verdict on a neutral history. ``wire_ids`` maps the ids the dialect
    put on the wire to the plan's calls (default: the plan's own ids);
    ``item_ids`` maps them to the Responses item id a sent call must carry
    when it carries one."""
    planned = wire_ids if wire_ids is not None else {c.id: c for c in plan.calls}

    sent_ids = [c.id for c in sent]
    result_ids = [r.call_id for r in results]
    ids_ok = (
        all(isinstance(i, str) and i in planned for i in sent_ids)
        and len(set(map(repr, sent_ids))) == len(sent_ids)
        and all(i in sent_ids for i in result_ids)
        and len(set(map(repr, result_ids))) == len(result_ids)
    )
    if ids_ok and item_ids is not None:
        ids_ok = all(c.item_id is None or c.item_id == item_ids.get(c.id) for c in sent)

    args_ok = True
    for pos, c in enumerate(sent):
        want = (planned.get(c.id) if isinstance(c.id, str) else None) or (plan.calls[pos] if pos < len(plan.calls) else None)
        if want is None or c.name != want.name or c.arguments is BAD_ARGS or c.arguments != json.loads(want.arguments):
            args_ok = False
            break

    positions = [planned[i].index for i in result_ids if isinstance(i, str) and i in planned]
    order_ok = all(a < b for a, b in zip(positions, positions[1:]))

    errors = 0
    echoes = []
    for r in results:
        call = planned.get(r.call_id) if isinstance(r.call_id, str) else None
        if r.is_error:
            errors += 1
        elif call is None:
            if catalog.is_error(r.content):
                errors += 1
        elif not _result_ok(call, r.content, catalog, plan.nonce):
            errors += 1
        echoes.append((str(r.call_id), r.content))

    line = VerdictLine(
        nonce=plan.nonce,
        plan=plan.kind,
        expected=len(plan.calls),
        got=len(results),
        ids=ids_ok,
        args=args_ok,
        order=order_ok,
        errors=errors,
        tool_ms=tool_ms,
    )
    return line, echoes


def verdict_text(line: VerdictLine, echoes: Sequence[tuple[str, str]]) -> str:
    parts = [line.format()]
    for call_id, content in echoes:
        if len(content) > ECHO_LIMIT:
            content = content[:ECHO_LIMIT] + f"\n[... {len(content) - ECHO_LIMIT} more characters not echoed]"
        parts.append(f"--- {call_id}\n{content}")
    return "\n".join(parts) + "\n"


class StreamClock:
    """When each nonce's tool-call stream ended, for ``tool_ms``; a bounded
    table, oldest entries dropped first."""

    def __init__(self, capacity: int = 65536) -> None:
        self._ends: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._capacity = capacity

    def mark(self, nonce: str) -> None:
        self._ends[nonce] = time.monotonic()
        self._ends.move_to_end(nonce)
        while len(self._ends) > self._capacity:
            self._ends.popitem(last=False)

    def elapsed_ms(self, nonce: str) -> int | None:
        t = self._ends.get(nonce)
        return None if t is None else int((time.monotonic() - t) * 1000)

    def clear(self) -> None:
        self._ends.clear()

    def __len__(self) -> int:
        return len(self._ends)
