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
               KST-E lines with this nonce and index).
"""

from __future__ import annotations

import collections
import json
import time
from typing import Any, Sequence

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


def _same_arguments(sent: Any, planned: str) -> bool:
    if not isinstance(sent, str):
        return False  # the OpenAI API carries arguments as a JSON string
    try:
        return json.loads(sent) == json.loads(planned)
    except ValueError:
        return False


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


def check(plan: Plan, messages: Sequence[dict[str, Any]], user_at: int, catalog: Catalog, tool_ms: int | None) -> tuple[VerdictLine, list[tuple[str, str]]]:
    """The verdict for a follow-up request, and the results as received
    (tool_call_id, content) for the echo."""
    sent_calls, results = tool_exchange(messages, user_at)
    planned = {c.id: c for c in plan.calls}

    sent_ids = [c.get("id") for c in sent_calls]
    result_ids = [r.get("tool_call_id") for r in results]
    ids_ok = (
        all(isinstance(i, str) and i in planned for i in sent_ids)
        and len(set(sent_ids)) == len(sent_ids)
        and all(i in sent_ids for i in result_ids)
        and len(set(result_ids)) == len(result_ids)
    )

    args_ok = True
    for pos, sent in enumerate(sent_calls):
        want = planned.get(sent.get("id")) or (plan.calls[pos] if pos < len(plan.calls) else None)
        fn = sent.get("function") if isinstance(sent.get("function"), dict) else {}
        if want is None or fn.get("name") != want.name or not _same_arguments(fn.get("arguments"), want.arguments):
            args_ok = False
            break

    positions = [planned[i].index for i in result_ids if i in planned]
    order_ok = all(a < b for a, b in zip(positions, positions[1:]))

    errors = 0
    echoes = []
    for r in results:
        content = message_text(r.get("content"))
        call = planned.get(r.get("tool_call_id"))
        if call is None:
            if catalog.is_error(content):
                errors += 1
        elif not _result_ok(call, content, catalog, plan.nonce):
            errors += 1
        echoes.append((str(r.get("tool_call_id")), content))

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
