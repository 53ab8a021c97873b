"""What the dialect tests share: the markers every dialect is driven with, the
result a correct kernel hands back for a call, and history mutations."""

from __future__ import annotations

import json
import time
from typing import Any

from mock.markers import Call, Plan

# the markers the brief names, each a different batch shape (64: the largest)
SDK_MARKERS = ["!batch1", "!batch16", "!slowbatch4:40", "!mixed3:20", "!serialbatch2:20", "!batch64"]
MARKER_IDS = [m.lstrip("!").replace(":", "-") for m in SDK_MARKERS]


def good_result(plan: Plan, call: Call) -> str:
    """What a kernel that really ran ``call`` hands back: the slow tools'
    own timestamp lines, the others' expected substrings."""
    if call.role == "slow":
        ns = time.time_ns()
        return f"KST-S {plan.nonce} {call.stamp} {ns}\nKST-E {plan.nonce} {call.stamp} {ns + (call.sleep_ms or 0) * 1_000_000}\n"
    return " ".join(call.expect) + " done"


def mutate(results: list[Any], how: str) -> list[Any]:
    """The results in order (``ok``), two swapped, or the last one missing."""
    out = list(results)
    if how == "swapped":
        out[0], out[1] = out[1], out[0]
    elif how == "missing":
        out.pop()
    return out


def want_verdict(plan: Plan, how: str) -> dict[str, Any]:
    n = len(plan.calls)
    return {
        "nonce": plan.nonce,
        "plan": plan.kind,
        "expected": n,
        "got": n - 1 if how == "missing" else n,
        "ids": True,
        "args": True,
        "order": how != "swapped",
        "errors": 0,
    }


# --- a follow-up request written straight from the plan, per dialect -----------------

PATHS = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}


def followup_body(dialect: str, plan: Plan, text: str, stream: bool) -> dict[str, Any]:
    """What a correct kernel sends back after running every call of ``plan``."""
    results = [(c, good_result(plan, c)) for c in plan.calls]
    if dialect == "chat":
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": text},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls
            ]},
            *({"role": "tool", "tool_call_id": c.id, "content": r} for c, r in results),
        ]  # fmt: skip
        return {"model": "kst-test", "messages": messages, "stream": stream}
    if dialect == "anthropic":
        tid = lambda c: "toolu_" + c.id[5:]  # noqa: E731
        messages = [
            {"role": "user", "content": text},
            {"role": "assistant", "content": [{"type": "tool_use", "id": tid(c), "name": c.name, "input": json.loads(c.arguments)} for c in plan.calls]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tid(c), "content": r} for c, r in results]},
        ]
        return {"model": "kst-test", "max_tokens": 1024, "messages": messages, "stream": stream}
    items: list[dict[str, Any]] = [{"role": "user", "content": text}]
    items += [{"type": "function_call", "id": "fc_" + c.id[5:], "call_id": c.id, "name": c.name, "arguments": c.arguments} for c in plan.calls]
    items += [{"type": "function_call_output", "call_id": c.id, "output": r} for c, r in results]
    return {"model": "kst-test", "input": items, "stream": stream}


def first_body(dialect: str, text: str, stream: bool) -> dict[str, Any]:
    if dialect == "responses":
        return {"model": "kst-test", "input": text, "stream": stream}
    extra = {"max_tokens": 1024} if dialect == "anthropic" else {}
    return {"model": "kst-test", "messages": [{"role": "user", "content": text}], "stream": stream, **extra}
