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
import functools
import json
import time
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import re

from .catalog import Catalog
from .errors import MarkerError
from .markers import Call, Plan, TIMESTAMP_RE, VerdictLine, build_plan, nonce_for, parse_call_id, parse_session_nonce, sign

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


@functools.lru_cache(maxsize=8192)
def _planned_arguments(arguments: str) -> Any:
    """A planned call's arguments parsed, memoised: a tool loop's request
    carries every earlier step again, and the plan's strings are the same
    each time. Only ever compared, never changed."""
    return json.loads(arguments)


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
        stamp = call.stamp
        edges = {
            m.group("edge")
            for m in TIMESTAMP_RE.finditer(content)
            if m.group("nonce") == nonce and int(m.group("i")) == stamp
        }
        return edges == {"S", "E"}
    return True


def chat_history(messages: Sequence[dict[str, Any]], user_at: int) -> tuple[list[SentCall], list[ToolResult]]:
    """The neutral history of a chat-completions request."""
    sent_calls, results = tool_exchange(messages, user_at)
    sent = [_chat_sent(c) for c in sent_calls]
    return sent, [ToolResult(r.get("tool_call_id"), message_text(r.get("content"))) for r in results]


def _chat_sent(c: dict[str, Any]) -> SentCall:
    fn = c.get("function") if isinstance(c.get("function"), dict) else {}
    return SentCall(c.get("id"), fn.get("name"), json_arguments(fn.get("arguments")))


def chat_exchanges(messages: Sequence[Any], user_at: int) -> tuple[list["Exchange"], bool]:
    """Every tool step after the user message (an assistant message with
    tool_calls and the tool messages after it), and whether an assistant text
    answer follows the last of them."""
    out: list[Exchange] = []
    answered = False
    for m in messages[user_at + 1 :]:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "assistant":
            calls = m.get("tool_calls")
            if isinstance(calls, list) and calls:
                out.append(Exchange([_chat_sent(c) for c in calls if isinstance(c, dict)], []))
                answered = False
            else:
                answered = True
        elif role == "tool":
            if not out:
                out.append(Exchange([], []))
            out[-1].results.append(ToolResult(m.get("tool_call_id"), message_text(m.get("content"))))
            answered = False
    return out, answered


def chat_earlier(messages: Sequence[Any], user_at: int) -> list["Said"]:
    """The messages before the user message, for the session check."""
    out = []
    for m in messages[:user_at]:
        if not isinstance(m, dict):
            continue
        role = m.get("role")
        if role == "user":
            out.append(Said(True, message_text(m.get("content"))))
        elif role == "assistant":
            calls = m.get("tool_calls")
            ids = tuple(c.get("id") for c in calls if isinstance(c, dict)) if isinstance(calls, list) else ()
            out.append(Said(False, message_text(m.get("content")), ids))
        elif role == "tool":
            out.append(Said(False, "", (m.get("tool_call_id"),), results=True))
    return out


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
    history: str | None = None,
) -> tuple[VerdictLine, list[tuple[str, str]]]:
    """The verdict on a neutral history. ``wire_ids`` maps the ids the dialect
    put on the wire to the plan's calls (default: the plan's own ids);
    ``item_ids`` maps them to the Responses item id a sent call must carry
    when it carries one; ``history`` is a session turn's history token."""
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
        history=history,
    )
    return line, echoes


# --- tool loops: every step's exchange, checked at every step ----------------------


@dataclass
class Exchange:
    """One tool step as a request carries it: the calls the kernel says the
    model asked for, and the results it handed back after them."""

    sent: list[SentCall]
    results: list[ToolResult]
    tag: Any = None  # a dialect's grouping key while reading (Responses: the ids' step)


@dataclass(frozen=True)
class LoopCheck:
    """What the mock makes of a tool loop's request.

    ``step``: the step whose results the request carries (0: none, the first
    request). ``next_step``: the step to ask for now, or None: answer with the
    verdict. ``problem``/``bad_step``: the first step that went wrong and how
    (markers.LOOP_PROBLEMS), or "past" when the kernel asks again after a
    final answer, or None. ``done``: the steps the kernel completed."""

    step: int
    next_step: int | None
    problem: str | None
    bad_step: int | None
    done: int
    answered: bool
    got: int
    errors: int
    echoes: list[tuple[str, str]]

    @property
    def token(self) -> str:
        if self.problem is None:
            return "ok"
        if self.problem == "past":
            return "past"
        return f"s{self.bad_step}:{self.problem}"

    def line(self, plan: Plan, tool_ms: int | None, history: str | None = None) -> VerdictLine:
        p = self.problem
        return VerdictLine(
            nonce=plan.nonce,
            plan=plan.kind,
            expected=len(plan.calls),
            got=self.got,
            ids=p not in ("ids", "ids_reused", "calls_missing"),
            args=p != "args",
            order=p not in ("results_order", "steps_order"),
            errors=self.errors,
            tool_ms=tool_ms,
            steps=self.done,
            steps_total=plan.steps,
            loop=self.token,
            history=history,
        )


def check_loop(
    plan: Plan,
    exchanges: Sequence[Exchange],
    answered: bool,
    catalog: Catalog,
    wire_ids: Mapping[str, Call] | None = None,
    item_ids: Mapping[str, str] | None = None,
) -> LoopCheck:
    """Judge a tool loop's request from its history alone (the mock keeps no
    state for it). The step being answered is the latest one whose ids the
    history carries (or the number of exchanges, if larger); every step from 1
    to it must be there, in its place, intact: its planned ids, names and
    arguments, one result per call in declared order, each a real result.
    ``answered``: an assistant text answer follows the last exchange (the
    kernel asks again after a final answer)."""
    planned = wire_ids if wire_ids is not None else {c.id: c for c in plan.calls}
    k_total = plan.steps
    by_step: dict[int, dict[str, Call]] = {}
    for wid, c in planned.items():
        by_step.setdefault(c.step, {})[wid] = c

    def step_of(x: Exchange) -> int | None:
        for i in [c.id for c in x.sent] + [r.call_id for r in x.results]:
            if isinstance(i, str) and i in planned:
                return planned[i].step
        return None

    tags = [step_of(x) for x in exchanges]
    step = max([t for t in tags if t is not None] + [len(exchanges)])

    # every result judged once: the tally of the line, and a step's results_bad
    got = 0
    errors = 0
    bad: list[int] = []
    echoes = []
    for x in exchanges:
        n_bad = 0
        for r in x.results:
            got += 1
            call = planned.get(r.call_id) if isinstance(r.call_id, str) else None
            if r.is_error or (catalog.is_error(r.content) if call is None else not _result_ok(call, r.content, catalog, plan.nonce)):
                n_bad += 1
            echoes.append((str(r.call_id), r.content))
        errors += n_bad
        bad.append(n_bad)

    problem: str | None = None
    bad_step: int | None = None
    earlier: set[str] = set()
    for k in range(1, min(step, k_total) + 1):
        x = exchanges[k - 1] if k <= len(exchanges) else None
        tag = tags[k - 1] if x is not None else None
        if x is None or (tag is not None and tag != k):
            if k in tags:
                problem = "steps_order"
            elif x is None or tag is None or tag > k:
                problem = "missing"
            else:
                problem = "ids_reused"  # it carries an earlier step's ids
        else:
            problem = _step_problem(k, x, planned, by_step.get(k, {}), item_ids, earlier, bad[k - 1])
        if problem is not None:
            bad_step = k
            break
        earlier.update(c.id for c in x.sent if isinstance(c.id, str))
    if problem is None and answered and step == 0:
        problem, bad_step = "missing", 1  # a final answer came, yet no step is left
    next_step = None
    if problem is None:
        if answered or step > k_total:
            problem = "past"
        elif step < k_total:
            next_step = step + 1

    if problem is None:
        done = k_total if next_step is None else step
    elif problem == "past":
        done = min(step, k_total)
    else:
        done = max(0, min(step, k_total) - 1)
    return LoopCheck(step, next_step, problem, bad_step, done, answered, got, errors, echoes)


def _step_problem(
    k: int,
    x: Exchange,
    planned: Mapping[str, Call],
    want: Mapping[str, Call],
    item_ids: Mapping[str, str] | None,
    earlier: set[str],
    n_bad: int,
) -> str | None:
    """The first thing wrong with step ``k``'s exchange (``want``: its
    planned calls by wire id; ``n_bad``: its results that failed), or None."""
    n = len(want)
    if not x.sent:
        return "calls_missing"
    sent_ids = [c.id for c in x.sent]
    keys = [i if isinstance(i, str) else repr(i) for i in sent_ids]
    if any(i in earlier or (i in planned and planned[i].step < k) for i in keys):
        return "ids_reused"
    if any(i not in want for i in keys) or len(set(keys)) != len(keys):
        return "ids"
    if item_ids is not None and any(c.item_id is not None and c.item_id != item_ids.get(c.id) for c in x.sent):
        return "ids"
    if len(x.sent) < n:
        return "calls_missing"
    for c in x.sent:
        w = want[c.id]
        if c.name != w.name or c.arguments is BAD_ARGS or c.arguments != _planned_arguments(w.arguments):
            return "args"
    result_keys = [r.call_id if isinstance(r.call_id, str) else repr(r.call_id) for r in x.results]
    sent_set = set(keys)
    for i in result_keys:
        if i not in sent_set:
            return "ids_reused" if i in earlier or (i in planned and planned[i].step < k) else "ids"
    if len(x.results) < n and len(set(result_keys)) == len(result_keys):
        return "results_missing"
    if len(x.results) > n or len(set(result_keys)) != len(result_keys):
        return "results_extra"
    positions = [want[i].index for i in result_keys]
    if any(a >= b for a, b in zip(positions, positions[1:])):
        return "results_order"
    if n_bad:
        return "results_bad"
    return None


# --- sessions: the earlier turns a session turn's request carries ----------------------


@dataclass(frozen=True)
class Said:
    """One message before the latest user input, as the session check reads it:
    a user input (``user``) with its text, or an assistant message / tool
    results (``results``) with the text and the call ids they carry, or an
    item the mock cannot see into (``unresolved``: what it is, e.g.
    ``item_reference``)."""

    user: bool
    text: str = ""
    ids: tuple[Any, ...] = ()
    results: bool = False
    unresolved: str | None = None


_KST_NONCE_RE = re.compile(r"^KST nonce=([A-Za-z0-9_-]+) ", re.M)


@functools.lru_cache(maxsize=4096)
def _planned_ids(text: str) -> frozenset[str]:
    """The calls turn ``text`` was asked to make, each as its id without the
    dialect's prefix (``<nonce>_<i>``): what its tool exchange must hold.
    Cached: every request of a session reads every earlier turn again."""
    try:
        plan = build_plan(text)
    except MarkerError:
        return frozenset()
    return frozenset(c.id.partition("_")[2] for c in plan.calls)


def _bare_id(wire: Any) -> str | None:
    return wire.partition("_")[2] if parse_call_id(wire) is not None else None


@dataclass
class _Earlier:
    """What a session request carries of one earlier turn."""

    turn: int
    nonce: str
    text: str
    calls: set[str]
    results: set[str]
    answered: bool = False


def check_session(
    parts: tuple[str, str, int],
    said: Sequence[Said],
    original: Any = None,
) -> str:
    """The history token of a session turn (markers.HISTORY_PROBLEMS): the
    earlier user inputs must be exactly turns 1..t-1 of that run and session,
    in order, each with its original text (``original(nonce)``: the text the
    mock first saw for that nonce, or None when it does not know it), each
    followed by its whole tool exchange (every planned call and its result)
    when it had one and by its answer (the text carrying that turn's ``KST
    nonce=`` line); nothing after a turn may carry another turn's nonce. The
    first problem in this order: foreign, extra, unresolved, a missing input
    (``missing:t<k>``), order, exchange, a missing exchange or answer
    (``missing:t<k>.exchange`` / ``.answer``), altered; within a kind the
    first by position (missing: the lowest turn)."""
    run, session, turn = parts
    foreign: str | None = None
    extra: int | None = None
    exchange: int | None = None
    unresolved: str | None = None
    seen: set[int] = set()
    order: list[int] = []
    earlier: list[_Earlier] = []
    current: _Earlier | None = None  # the latest earlier input of this session
    for s in said:
        if s.user:
            nonce = nonce_for(s.text)
            p = parse_session_nonce(nonce)
            if p is None or p[0] != run or p[1] != session:
                if foreign is None:
                    foreign = nonce
                current = None
                continue
            k = p[2]
            if extra is None and (k >= turn or k in seen):
                extra = k
            seen.add(k)
            order.append(k)
            current = _Earlier(k, nonce, s.text, set(), set())
            earlier.append(current)
            continue
        if s.unresolved is not None:
            unresolved = unresolved or s.unresolved
            continue
        # an answer or tool exchange: the nonces it carries must be its turn's
        carried = [m.group(1) for m in _KST_NONCE_RE.finditer(s.text)] if "KST nonce=" in s.text else []
        if current is not None and current.nonce in carried:
            current.answered = True
        for i in s.ids:
            ref = parse_call_id(i)
            if ref is not None:
                carried.append(ref[0])
                if current is not None and ref[0] == current.nonce:
                    (current.results if s.results else current.calls).add(_bare_id(i))
        for nonce in carried:
            if current is not None and nonce == current.nonce:
                continue
            p = parse_session_nonce(nonce)
            if p is None or p[0] != run or p[1] != session:
                if foreign is None:
                    foreign = nonce
            elif exchange is None and current is not None:
                exchange = current.turn
    if foreign is not None:
        return f"foreign:{foreign}"
    if extra is not None:
        return f"extra:t{extra}"
    if unresolved is not None:
        return f"unresolved:{unresolved}"
    for k in range(1, turn):
        if k not in seen:
            return f"missing:t{k}"
    if any(a >= b for a, b in zip(order, order[1:])):
        return "order"
    if exchange is not None:
        return f"exchange:t{exchange}"
    for e in earlier:
        planned = _planned_ids(e.text)
        if planned and not (planned <= e.calls and planned <= e.results):
            return f"missing:t{e.turn}.exchange"
        if not e.answered:
            return f"missing:t{e.turn}.answer"
    if original is not None:
        for e in earlier:
            first = original(e.nonce)
            if first is not None and first != e.text:
                return f"altered:t{e.turn}"
    return "ok"


def verdict_text(line: VerdictLine, echoes: Sequence[tuple[str, str]], key: bytes | None = None) -> str:
    parts = [sign(line.format(), key)]
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
