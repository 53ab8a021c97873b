"""A kernel's side of tool loops and sessions, for the mock's tests: the official
SDKs send each request and parse each reply; the history a request carries is
built here from neutral steps, the way a kernel keeps it, so that each known
bug (dropped results, reused ids, a loop run past its answer, a foreign or
missing session turn) can be switched on by name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import anthropic
import openai

from mock.markers import Plan, item_id, wire_id
from mockhelpers import good_result

DIALECTS = ("chat", "anthropic", "responses")


@dataclass
class ToolStep:
    """One step as a kernel keeps it: the calls the model asked for (id,
    name, arguments as a JSON string, Responses item id) and their results."""

    calls: list[tuple[str, str, str, str | None]]
    results: list[tuple[str, str]]


@dataclass
class TurnRecord:
    """A completed turn of a session: its user text, its steps, its answer."""

    text: str
    steps: list[ToolStep] = field(default_factory=list)
    answer: str = ""


@dataclass
class Reply:
    text: str | None
    calls: list[tuple[str, str, str, str | None]]  # empty: a text answer


class SDKKernel:
    """Sends a request of one dialect through its official SDK (streamed or not)."""

    def __init__(self, dialect: str, oai: openai.OpenAI, ant: anthropic.Anthropic, stream: bool = True) -> None:
        self.dialect = dialect
        self.oai = oai
        self.ant = ant
        self.stream = stream

    # --- rendering the history -------------------------------------------------

    def step_messages(self, step: ToolStep) -> list[dict[str, Any]]:
        if self.dialect == "chat":
            out: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a, _ in step.calls
            ]}]  # fmt: skip
            out += [{"role": "tool", "tool_call_id": i, "content": r} for i, r in step.results]
            return out
        if self.dialect == "anthropic":
            out = [{"role": "assistant", "content": [{"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a, _ in step.calls]}]
            if step.results:
                out.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": i, "content": r} for i, r in step.results]})
            return out
        items: list[dict[str, Any]] = []
        for i, n, a, fc in step.calls:
            item = {"type": "function_call", "call_id": i, "name": n, "arguments": a}
            if fc is not None:
                item["id"] = fc
            items.append(item)
        items += [{"type": "function_call_output", "call_id": i, "output": r} for i, r in step.results]
        return items

    def user(self, text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def answer(self, text: str) -> dict[str, Any]:
        if self.dialect == "responses":
            return {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        return {"role": "assistant", "content": text}

    def turn_messages(self, t: TurnRecord) -> list[dict[str, Any]]:
        out = [self.user(t.text)]
        for s in t.steps:
            out += self.step_messages(s)
        if t.answer:
            out.append(self.answer(t.answer))
        return out

    # --- one request -------------------------------------------------------------

    def ask(self, messages: list[dict[str, Any]]) -> Reply:
        if self.dialect == "chat":
            if self.stream:
                with self.oai.chat.completions.stream(model="kst-test", messages=messages) as s:
                    msg = s.get_final_completion().choices[0].message
            else:
                msg = self.oai.chat.completions.create(model="kst-test", messages=messages).choices[0].message
            calls = [(c.id, c.function.name, c.function.arguments, None) for c in msg.tool_calls or []]
            return Reply(msg.content, calls)
        if self.dialect == "anthropic":
            if self.stream:
                with self.ant.messages.stream(model="kst-test", max_tokens=1024, messages=messages) as s:
                    final = s.get_final_message()
            else:
                final = self.ant.messages.create(model="kst-test", max_tokens=1024, messages=messages)
            calls = [(b.id, b.name, json.dumps(b.input), None) for b in final.content if b.type == "tool_use"]
            text = "".join(b.text for b in final.content if b.type == "text")
            return Reply(text or None, calls)
        if self.stream:
            with self.oai.responses.stream(model="kst-test", input=messages) as s:
                final = s.get_final_response()
        else:
            final = self.oai.responses.create(model="kst-test", input=messages)
        calls = [(o.call_id, o.name, o.arguments, o.id) for o in final.output if o.type == "function_call"]
        return Reply(final.output_text or None, calls)


def run_results(plan: Plan, dialect: str, calls: list[tuple[str, str, str, str | None]]) -> list[tuple[str, str]]:
    """What a kernel that really ran every call hands back, in declared order."""
    by_id = {wire_id(c.id, dialect): c for c in plan.calls}
    return [(i, good_result(plan, by_id[i])) for i, _, _, _ in calls]


# --- a tool loop, with the known bugs ----------------------------------------------

LOOP_BUGS = ("drop_results_s1", "drop_step_s1", "own_ids", "reuse_s1_ids", "past", "stop_after_2")


def run_loop(
    k: SDKKernel,
    plan: Plan,
    text: str,
    bug: str | None = None,
    prefix: list[dict[str, Any]] | None = None,
    max_requests: int = 100,
) -> tuple[str | None, list[ToolStep], int]:
    """A kernel's tool loop: ask, run the calls, send every step back, until a
    text answer. Returns the final text (None: the kernel gave up without
    one), the steps, and the number of requests made."""
    steps: list[ToolStep] = []
    requests = 0
    answer: str | None = None
    while requests < max_requests:
        shown = [ToolStep(list(s.calls), list(s.results)) for s in steps]
        if bug == "drop_results_s1" and len(shown) >= 2:
            shown[0].results = []  # at step 3: step 1's results are gone, its calls kept
        if bug == "drop_step_s1" and len(shown) >= 2:
            shown = shown[1:]  # at step 3: step 1's whole exchange is gone
        if bug == "own_ids":
            # the kernel's own numbering, restarting at every step
            shown = [ToolStep([(f"call_{j}", n, a, None) for j, (_, n, a, _) in enumerate(s.calls)],
                              [(f"call_{j}", r) for j, (_, r) in enumerate(s.results)]) for s in shown]  # fmt: skip
        if bug == "reuse_s1_ids" and len(shown) >= 2:
            first = [c[0] for c in shown[0].calls]
            s = shown[1]
            shown[1] = ToolStep([(first[j], n, a, None) for j, (_, n, a, _) in enumerate(s.calls)], [(first[j], r) for j, (_, r) in enumerate(s.results)])
        messages = list(prefix or []) + [k.user(text)] + [m for s in shown for m in k.step_messages(s)]
        if answer is not None:
            messages.append(k.answer(answer))  # past the final answer: ask again anyway
        reply = k.ask(messages)
        requests += 1
        if not reply.calls:
            if bug == "past" and answer is None:
                answer = reply.text or ""
                continue
            return reply.text, steps, requests
        if bug == "stop_after_2" and len(steps) == 2:
            return None, steps, requests  # the kernel stops here: no results, no verdict
        steps.append(ToolStep(reply.calls, run_results(plan, k.dialect, reply.calls)))
    raise AssertionError(f"the loop did not end within {max_requests} requests")


# --- sessions ------------------------------------------------------------------------


def session_request(k: SDKKernel, turns: list[TurnRecord], text: str) -> list[dict[str, Any]]:
    return [m for t in turns for m in k.turn_messages(t)] + [k.user(text)]


def run_turn(k: SDKKernel, turns: list[TurnRecord], text: str, plan: Plan, mangle: Callable[[list[TurnRecord]], list[TurnRecord]] | None = None) -> TurnRecord:
    """One turn of a session: the earlier turns (through ``mangle``, a bug),
    this turn's input, its tool steps; the completed turn."""
    shown = mangle(list(turns)) if mangle else turns
    prefix = [m for t in shown for m in k.turn_messages(t)]
    final, steps, _ = run_loop(k, plan, text, prefix=prefix)
    assert final is not None
    return TurnRecord(text, steps, final)
