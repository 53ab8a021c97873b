"""The marker grammar: the one piece of code the mock and the harness share.

The mock parses markers from the latest user message to decide what to reply;
the harness composes inputs with the same grammar and derives from the same
:class:`Plan` what a correct turn must show. Nothing here does I/O.

Grammar (docs/markers.md is the user-facing version)::

    marker := "!" NAME [COUNT] (":" ARG)*      a whitespace-delimited token
    nonce  := "#" [A-Za-z0-9_-]+               the last such token of the message

At most one marker per message. A message without a marker gets a text reply.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import hmac
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .catalog import DEFAULT_CATALOG, Catalog
from .errors import MarkerError

N_MIN, N_MAX = 1, 64
MS_MAX = 600_000
DEFAULT_TOOL_MS = 200
DEFAULT_MIXED_MS = 50
DEFAULT_QUIRK_N = 3
DEFAULT_LOOP_N = 1
DEFAULT_LOOP_MS = 20

ERR_KINDS = ("500", "429", "503", "midstream", "disconnect", "malformed")

# Fault schedules (issue 24): a fault marker rides beside at most one plan
# marker and acts per attempt of its nonce (the mock counts them), so a kernel
# that retries gets the plan's normal reply once the schedule has run out.
FAULT_MARKERS = ("flaky", "stall", "truncate")
FLAKY_KINDS = ("429", "500", "503", "529", "reset")
FLAKY_HTTP = ("429", "500", "503", "529")
RETRY_AFTER_DEFAULT_S = 1  # what !flaky:429xN sends unless ra=S says otherwise
RETRY_AFTER_MAX_S = 600
_FLAKY_RE = re.compile(r"(?P<kind>[0-9a-z]+?)(?:x(?P<n>\d*))?")

# The LLM APIs the mock speaks. One plan model for all: the same calls, names and
# arguments; only the wire encoding and the id prefixes differ (wire_id below).
DIALECTS = ("chat", "anthropic", "responses")

CHAT_QUIRKS = (
    "noindex",
    "noindex_whole",
    "index1_first",
    "index0_all",
    "onechunk",
    "cont_first",
    "repeat_name",
    "empty_id_name",
    "nullargs",
    "placeholder_args",
    "args_object",
    "finish_stop",
    "midstream_error",
    "azure_prefilter",
    "per_chunk_id",
    "event_line",
    "nodone",
)
ANTHROPIC_QUIRKS = (
    "delta_before_start",
    "overlap_blocks",
    "no_content",
    "empty_json_delta",
    "drop_json_delta",
    "no_event_line",
)
RESPONSES_QUIRKS = (
    "delta_before_added",
    "dup_output_index",
    "item_never_done",
    "no_completed",
    "changed_response_id",
)
# Every quirk name, chat's first and in their old order (callers iterate this
# tuple against a chat kernel: a quirk of another dialect streams the batch
# without deviation there, see QUIRK_DIALECTS).
QUIRKS = CHAT_QUIRKS + ANTHROPIC_QUIRKS + RESPONSES_QUIRKS
# quirk -> the dialects it deviates on. index1_first means the same on all
# three: the first call/block/item numbered 1 instead of 0.
QUIRK_DIALECTS: dict[str, frozenset[str]] = {
    **{q: frozenset({"chat"}) for q in CHAT_QUIRKS},
    "index1_first": frozenset(DIALECTS),
    **{q: frozenset({"anthropic"}) for q in ANTHROPIC_QUIRKS},
    **{q: frozenset({"responses"}) for q in RESPONSES_QUIRKS},
}


def quirks_for(dialect: str) -> tuple[str, ...]:
    """The quirks that deviate on ``dialect``, in QUIRKS order."""
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; dialects: {', '.join(DIALECTS)}")
    return tuple(q for q in QUIRKS if dialect in QUIRK_DIALECTS[q])


# Tool-call ids on each dialect's wire. Plans carry the chat form
# call_<nonce>_<i>; the others follow their API's convention (Anthropic tool_use
# ids toolu_..., Responses function_call items fc_... with call_id call_...).
# The nonce and the index stay readable from every form (parse_call_id).
#
# A tool loop's calls carry their step: call_<nonce>_s<step>c<i>. The suffix
# after the nonce holds no "_", so the nonce is everything up to the last "_"
# of any mock-made id, whatever "_" the nonce itself holds.
ID_PREFIXES = {"chat": "call_", "anthropic": "toolu_", "responses": "call_"}
ITEM_PREFIX = "fc_"
_CALL_ID_RE = re.compile(r"^(?:call|toolu|fc)_(?P<nonce>[A-Za-z0-9_-]+)_(?:s(?P<step>\d+)c)?(?P<i>\d+)$")


def wire_id(call_id: str, dialect: str) -> str:
    """The id a plan's call (``Call.id``, ``call_...``) has on ``dialect``'s wire."""
    if dialect == "anthropic" and call_id.startswith("call_"):
        return "toolu_" + call_id[5:]
    return call_id


def item_id(call_id: str) -> str:
    """The Responses ``function_call`` item id that goes with a plan's call id."""
    return ITEM_PREFIX + call_id[5:] if call_id.startswith("call_") else ITEM_PREFIX + call_id


def parse_call_id(wire: str) -> tuple[str, int] | None:
    """(nonce, index) of a mock-made id in any dialect's form, or None. For a
    tool loop's id the index is the call's place within its step."""
    m = _CALL_ID_RE.match(wire) if isinstance(wire, str) else None
    return (m.group("nonce"), int(m.group("i"))) if m else None


def parse_call_step(wire: str) -> tuple[str, int, int] | None:
    """(nonce, step, index) of a mock-made id, or None: step 1..K for a tool
    loop's call (``call_<nonce>_s<step>c<i>``), 0 for any other plan's."""
    m = _CALL_ID_RE.match(wire) if isinstance(wire, str) else None
    if not m:
        return None
    step = m.group("step")
    return m.group("nonce"), int(step) if step else 0, int(m.group("i"))


def loop_call_id(nonce: str, step: int, i: int) -> str:
    """The plan's id (chat form) of call ``i`` of step ``step`` of a tool loop."""
    return f"call_{nonce}_s{step}c{i}"


# --- sessions: the nonce of a session's turn ------------------------------------------

SESSION_PART = re.compile(r"[A-Za-z0-9]+")
SESSION_TURN_MAX = 999_999_999
_SESSION_NONCE_RE = re.compile(r"([A-Za-z0-9]+)_s([A-Za-z0-9]+)_t([1-9][0-9]{0,8})")


def session_nonce(run: str, session: str, turn: int) -> str:
    """The nonce of turn ``turn`` (from 1) of session ``session`` of run ``run``:
    ``<run>_s<session>_t<turn>``. The mock reads it back (parse_session_nonce)
    and checks that the request carries exactly turns 1..turn-1 of that session."""
    for name, part in (("run", run), ("session", session)):
        if not isinstance(part, str) or not SESSION_PART.fullmatch(part):
            raise ValueError(f"session nonce: {name} {part!r} must match [A-Za-z0-9]+ (no '_' or '-')")
    if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= SESSION_TURN_MAX:
        raise ValueError(f"session nonce: turn {turn!r} must be a whole number from 1 to {SESSION_TURN_MAX}")
    return f"{run}_s{session}_t{turn}"


def parse_session_nonce(nonce: str) -> tuple[str, str, int] | None:
    """(run, session, turn) of a nonce made by session_nonce, or None."""
    m = _SESSION_NONCE_RE.fullmatch(nonce) if isinstance(nonce, str) else None
    return (m.group(1), m.group(2), int(m.group(3))) if m else None


# name -> (takes a count, max number of ":" arguments)
MARKERS: dict[str, tuple[bool, int]] = {
    "batch": (True, 0),
    "mixed": (True, 1),
    "slowbatch": (True, 2),
    "serialbatch": (True, 2),
    "img": (False, 0),
    "ocr": (False, 0),
    "resident": (False, 0),
    "notify": (False, 0),
    "err": (False, 1),
    "hang": (False, 1),
    "quirk": (False, 2),
    "loop": (True, 2),
    # fault markers (FAULT_MARKERS): one may join a plan marker
    "flaky": (False, 2),
    "stall": (False, 1),
    "truncate": (False, 0),
}

_MARKER_RE = re.compile(r"(?<!\S)!([A-Za-z]+)(\d*)((?::[^\s:]*)*)(?=\s|$)")
_NONCE_RE = re.compile(r"(?<!\S)#([A-Za-z0-9_-]+)(?=\s|$)")
NONCE_CHARS = re.compile(r"[A-Za-z0-9_-]+")

# Tool loops (steps, loop) and session turns (history) add fields at the end,
# in this order; a line without them is the line of before.
VERDICT_RE = re.compile(
    r"^KST nonce=(?P<nonce>\S+) plan=(?P<plan>\S+) expected=(?P<expected>\d+) got=(?P<got>\d+) "
    r"ids=(?P<ids>ok|bad) args=(?P<args>ok|bad) order=(?P<order>ok|bad) errors=(?P<errors>\d+) "
    r"tool_ms=(?P<tool_ms>-?\d+|na)"
    r"(?: steps=(?P<steps>\d+)/(?P<steps_total>\d+))?(?: loop=(?P<loop>\S+))?(?: history=(?P<history>\S+?))?"
    r"(?: tag=(?P<tag>[0-9a-f]{16}))?$",
    re.M,
)
# a text reply that passed: no session, or a session turn whose history is ok
TEXT_VERDICT_RE = re.compile(r"^KST nonce=(?P<nonce>\S+) plan=text ok(?: history=ok)?(?: tag=(?P<tag>[0-9a-f]{16}))?$", re.M)
# every text verdict line: ok, or bad with the history problem that failed it
TEXT_LINE_RE = re.compile(
    r"^KST nonce=(?P<nonce>\S+) plan=text (?P<ok>ok|bad)(?: history=(?P<history>\S+?))?(?: tag=(?P<tag>[0-9a-f]{16}))?$", re.M
)
HISTORY_RE = re.compile(r"^KST nonce=\S+ plan=\S+ .*?\bhistory=(?P<history>\S+?)(?: tag=[0-9a-f]{16})?$", re.M)
TIMESTAMP_RE = re.compile(r"^KST-(?P<edge>[SE]) (?P<nonce>[A-Za-z0-9_-]+) (?P<i>\d+) (?P<ns>\d+)\s*$", re.M)


@dataclass(frozen=True)
class Marker:
    name: str
    count: int | None
    args: tuple[str, ...]
    token: str


@dataclass(frozen=True)
class Fault:
    """A fault schedule (!flaky, !stall, !truncate): what attempt ``n`` of the
    nonce gets. Attempts count every request of the nonce, follow-ups too."""

    kind: str  # flaky | stall | truncate
    token: str
    status: str | None = None  # !flaky's: 429 | 500 | 503 | 529 | reset
    count: int = 1  # attempts that get the fault (!flaky, !stall); !truncate: every one
    retry_after_s: int | None = None  # the Retry-After of !flaky's HTTP answers, None: no header
    stall_ms: int = 0

    def applies(self, attempt: int) -> bool:
        """Attempt ``attempt`` (from 1) of the nonce gets the fault."""
        return self.kind == "truncate" or attempt <= self.count

    @property
    def label(self) -> str:
        """What a faulted attempt's record says it got: 429 .. reset, stall, truncate."""
        return self.status if self.kind == "flaky" else self.kind  # type: ignore[return-value]


@dataclass(frozen=True)
class Call:
    """One tool call the mock will ask for, exactly as it goes on the wire."""

    index: int
    id: str
    name: str
    arguments: str
    role: str
    parallel_safe: bool
    sleep_ms: int | None = None
    expect: tuple[str, ...] = ()
    expect_error: bool = False
    # the tool step of the turn the call belongs to: 1 for every call of a
    # one-batch plan, 1..K for a tool loop's (!loopK)
    step: int = 1
    # a tool loop's call: its number in the whole turn, (step-1)*N + index.
    # What its {i} placeholder and its KST-S/KST-E lines carry (see stamp).
    seq: int | None = None

    @property
    def stamp(self) -> int:
        """The index the call's KST-S/KST-E lines (and its ``{i}`` placeholder)
        carry: ``index`` for a batch's call, ``seq`` for a tool loop's, so that
        the lines of every step of a loop stay apart (parse_timestamps)."""
        return self.index if self.seq is None else self.seq


@dataclass(frozen=True)
class Plan:
    """What the mock replies to one user message, and what a correct turn shows."""

    kind: str  # text | batch | mixed | slowbatch | serialbatch | img | ocr | resident | notify | err | hang | quirk | loop
    nonce: str
    calls: tuple[Call, ...] = ()
    err: str | None = None
    hang_ms: int | None = None  # None with kind == "hang": until the client goes away
    quirk: str | None = None
    marker: str | None = None
    # a fault schedule riding on the plan (!flaky, !stall, !truncate): the
    # plan above is what an attempt past the schedule gets
    fault: Fault | None = None

    @property
    def has_tools(self) -> bool:
        return bool(self.calls)

    @property
    def steps(self) -> int:
        """Tool steps a correct turn goes through: 0 without tools, 1 for a
        batch, K for a tool loop (!loopK: K requests that end with tool
        results, the last one answered with the verdict)."""
        if not self.calls:
            return 0
        return self.calls[-1].step if self.kind == "loop" else 1

    @property
    def calls_per_step(self) -> int:
        """Calls of each step: N for !loopK:N, every call for a batch."""
        if self.kind != "loop":
            return len(self.calls)
        return len(self.calls) // self.calls[-1].step if self.calls else 0

    def step_calls(self, step: int) -> tuple[Call, ...]:
        """The calls the mock asks for at ``step`` (from 1), in declared order;
        step 1 of a batch is all its calls; () outside 1..steps."""
        if self.kind != "loop":
            return self.calls if step == 1 else ()
        n = self.calls_per_step
        if not 1 <= step <= self.steps:
            return ()
        return self.calls[(step - 1) * n : step * n]

    @property
    def serial_required(self) -> bool:
        """The tool batch rule, per step: one call, or any non-parallel-safe call -> serial."""
        return self.calls_per_step == 1 or any(not c.parallel_safe for c in self.calls)

    @property
    def expected_errors(self) -> int:
        return sum(1 for c in self.calls if c.expect_error)

    @property
    def timed_calls(self) -> tuple[Call, ...]:
        return tuple(c for c in self.calls if c.sleep_ms is not None)

    @property
    def serial_ms(self) -> int:
        """Sum of the sleeps: the tool phase's duration when run one after another."""
        return sum(c.sleep_ms or 0 for c in self.calls)

    @property
    def concurrent_ms(self) -> int:
        """Longest sleep: the tool phase's duration when all run at once (a
        tool loop: the longest of each step, summed, as steps run one after another)."""
        if self.kind == "loop":
            return sum(max((c.sleep_ms or 0 for c in self.step_calls(s)), default=0) for s in range(1, self.steps + 1))
        return max((c.sleep_ms or 0 for c in self.calls), default=0)

    @property
    def ideal_speedup(self) -> float:
        return self.serial_ms / self.concurrent_ms if self.concurrent_ms else 1.0

    @property
    def expects_error_frame(self) -> bool:
        return self.kind == "err"


# a text plan's fields but its nonce, in their order (_text_plan)
_TEXT_PLAN = dict(vars(Plan(kind="text", nonce="")))


def find_nonce(text: str) -> str | None:
    found = _NONCE_RE.findall(text)
    return found[-1] if found else None


def nonce_for(text: str) -> str:
    """The input's nonce; a message without one gets a stable hash of its text."""
    return find_nonce(text) or "h" + hashlib.sha1(text.encode()).hexdigest()[:12]


def parse_marker(text: str) -> Marker | None:
    """The message's plan marker (a fault marker beside it: parse_markers)."""
    return parse_markers(text)[0]


def parse_markers(text: str) -> tuple[Marker | None, Marker | None]:
    """(plan marker, fault marker) of a message: at most one of each."""
    found = _MARKER_RE.findall(text)
    if not found:
        return None, None
    if len(found) == 1:
        name, count, args = found[0]
        m = _marker(f"!{name}{count}{args}", name, count, args)
        return (None, m) if name in FAULT_MARKERS else (m, None)
    faults = [f for f in found if f[0] in FAULT_MARKERS]
    plans = [f for f in found if f[0] not in FAULT_MARKERS]
    if len(found) > 2 or len(faults) != 1:
        tokens = ", ".join(f"!{name}{count}{args}" for name, count, args in found)
        raise MarkerError(
            f"the message holds {len(found)} markers ({tokens}); use at most one marker per message, "
            f"plus at most one fault marker ({', '.join('!' + k for k in FAULT_MARKERS)}) beside it"
        )
    (pn, pc, pa), (fn, fc, fa) = plans[0], faults[0]
    return _marker(f"!{pn}{pc}{pa}", pn, pc, pa), _marker(f"!{fn}{fc}{fa}", fn, fc, fa)


# A pure function of the token, memoised: the mock parses the same few tokens
# (!batch4, !slowbatch8:200, ...) for every input. Bad tokens raise and are not kept.
@functools.lru_cache(maxsize=4096)
def _marker(token: str, name: str, raw_count: str, raw_args: str) -> Marker:
    if name not in MARKERS:
        raise MarkerError(f"unknown marker {token!r}; known markers: {', '.join('!' + k for k in MARKERS)}")
    takes_count, max_args = MARKERS[name]
    count: int | None = int(raw_count) if raw_count else None
    args = tuple(raw_args.split(":")[1:])
    letter = "K" if name == "loop" else "N"
    if takes_count and count is None:
        raise MarkerError(f"marker {token!r} needs a count: !{name}{letter} with {letter} from {N_MIN} to {N_MAX}, e.g. !{name}4")
    if not takes_count and count is not None:
        raise MarkerError(f"marker {token!r} takes no count; write !{name}")
    if len(args) > max_args:
        head = f"!{name}{raw_count}"
        if not max_args:
            raise MarkerError(f"marker {token!r}: {head} takes no ':' arguments; write {head}")
        raise MarkerError(f"marker {token!r}: {head} takes at most {max_args} ':' argument(s); docs/markers.md gives its form")
    if any(a == "" for a in args):
        raise MarkerError(f"marker {token!r} has an empty ':' argument")
    if count is not None and not N_MIN <= count <= N_MAX:
        raise MarkerError(f"marker {token!r}: count {count} is out of range; {letter} must be from {N_MIN} to {N_MAX}")
    return Marker(name=name, count=count, args=args, token=token)


def _ms_arg(marker: Marker, default: int) -> int:
    if not marker.args:
        return default
    raw = marker.args[0]
    if not raw.isdigit() or not 1 <= int(raw) <= MS_MAX:
        raise MarkerError(
            f"marker {marker.token!r}: duration {raw!r} must be whole milliseconds from 1 to {MS_MAX}"
        )
    return int(raw)


def default_step(ms: int) -> int:
    """MS/8, at least 25 ms (25 ms at 200 ms): a kernel starts the tools of a
    batch one after another, a few ms apart (the reference kernel: median 4 ms,
    max 12 ms under load), so the step must be well above that for concurrent
    completion order to really come out reversed. Never more than MS."""
    return min(ms, max(25, ms // 8))


def slow_durations(n: int, ms: int, step: int | None = None) -> list[int]:
    """Sleep of each slow call: MS + (N-1-i)*STEP, decreasing with the index,
    so that concurrent completion order is the reverse of declared order.
    STEP 0 gives equal sleeps: the ideal speedup is then exactly N (abtest)."""
    step = default_step(ms) if step is None else step
    return [ms + (n - 1 - i) * step for i in range(n)]


def build_plan(
    text: str,
    catalog: Catalog = DEFAULT_CATALOG,
    tool_ms: int = DEFAULT_TOOL_MS,
    mixed_ms: int = DEFAULT_MIXED_MS,
) -> Plan:
    """Derive the reply plan from a user message. Deterministic: the mock calls
    it again on the follow-up request to know what it sent."""
    nonce = nonce_for(text)
    if "!" not in text:  # no marker can be in it (each starts with one): most inputs of a load
        return _text_plan(nonce)
    marker, fault_marker = parse_markers(text)
    if fault_marker is not None:
        if marker is not None and marker.name in ("err", "hang"):
            raise MarkerError(
                f"marker {fault_marker.token!r} cannot join {marker.token!r}: a fault schedule needs a normal reply "
                f"to give once it has run out; pair it with a tool marker (e.g. !batch2) or none"
            )
        plan = _plan_of(marker, nonce, catalog, tool_ms, mixed_ms)
        return dataclasses.replace(plan, fault=_fault(fault_marker))
    return _plan_of(marker, nonce, catalog, tool_ms, mixed_ms)


def _text_plan(nonce: str) -> Plan:
    """``Plan(kind="text", nonce=nonce)``, equal in every way, made without
    the frozen dataclass's __init__ (a setattr per field): 1.5 against 4.3 us
    here, and the harness builds one plan per turn to judge it (issue 25)."""
    plan = object.__new__(Plan)
    fields = _TEXT_PLAN.copy()
    fields["nonce"] = nonce
    object.__setattr__(plan, "__dict__", fields)
    return plan


def _plan_of(marker: Marker | None, nonce: str, catalog: Catalog, tool_ms: int, mixed_ms: int) -> Plan:
    if marker is None:
        return _text_plan(nonce)
    name = marker.name
    call = _call_maker(catalog, nonce)
    calls: list[Call] = []
    plan_kw: dict = {}
    if name == "batch":
        calls = [call(i, "fast") for i in range(marker.count or 0)]
    elif name == "mixed":
        calls = _mixed_calls(marker, call, mixed_ms)
    elif name in ("slowbatch", "serialbatch"):
        calls = _slow_calls(marker, call, tool_ms)
    elif name in ("img", "ocr", "resident", "notify"):
        calls = [call(0, name)]
    elif name == "err":
        kind = plan_kw["err"] = _err_kind(marker)
        if kind in ("midstream", "disconnect"):
            # the partial tool call they cut off mid-arguments
            calls = [call(0, "fast")]
    elif name == "hang":
        plan_kw["hang_ms"] = _ms_arg(marker, 0) if marker.args else None
    elif name == "quirk":
        quirk, n = _quirk_args(marker)
        plan_kw["quirk"] = quirk
        calls = [call(i, "fast") for i in range(n)]
    elif name == "loop":
        calls = _loop_calls(marker, nonce, catalog.roles["slow"])
    return Plan(kind=name, nonce=nonce, calls=tuple(calls), marker=marker.token, **plan_kw)


def _call_maker(catalog: Catalog, nonce: str) -> Callable[..., Call]:
    """``call(i, role, sleep_ms=None)``: call ``i`` of a message with this nonce, made by the catalog's tool for ``role``."""
    roles = catalog.roles

    def call(i: int, role: str, sleep_ms: int | None = None) -> Call:
        r = roles[role]
        # positional: this runs once per call on the mock's hot path
        return Call(
            i,  # index
            f"call_{nonce}_{i}",  # id
            r.name,
            r.render_safe(nonce, i, sleep_ms or 0),  # arguments (nonce_for's nonces are JSON-safe)
            role,
            r.parallel_safe,
            sleep_ms,
            r.expected_substrings(nonce, i),  # expect
            r.expect_error,
        )

    return call


def _mixed_calls(marker: Marker, call: Callable[..., Call], mixed_ms: int) -> list[Call]:
    """!mixedN[:MS]: N-1 slow calls sleeping MS and one write in the middle."""
    n = marker.count or 0
    if n < 2:
        raise MarkerError(f"marker {marker.token!r}: a mixed batch needs N >= 2 (N-1 sleeps and one write)")
    ms = _ms_arg(marker, mixed_ms)
    writer_at = n // 2
    return [call(i, "writer") if i == writer_at else call(i, "slow", ms) for i in range(n)]


def _slow_calls(marker: Marker, call: Callable[..., Call], tool_ms: int) -> list[Call]:
    """!slowbatchN[:MS[:STEP]], and !serialbatch the same with a write at the end."""
    n = marker.count or 0
    ms = _ms_arg(marker, tool_ms)
    step = None
    if len(marker.args) > 1:
        raw = marker.args[1]
        if not raw.isdigit() or int(raw) > ms:
            raise MarkerError(f"marker {marker.token!r}: step {raw!r} must be whole milliseconds from 0 to MS ({ms})")
        step = int(raw)
    calls = [call(i, "slow", d) for i, d in enumerate(slow_durations(n, ms, step))]
    if marker.name == "serialbatch":
        calls.append(call(n, "writer"))
    return calls


def _err_kind(marker: Marker) -> str:
    """!err[:KIND], 500 when not named."""
    kind = marker.args[0] if marker.args else "500"
    if kind not in ERR_KINDS:
        raise MarkerError(f"marker {marker.token!r}: unknown fault {kind!r}; kinds: {', '.join(ERR_KINDS)}")
    return kind


def _fault(marker: Marker) -> Fault:
    """!flaky:KIND[xN][:ra=S], !stall:MS[xN], !truncate."""
    token = marker.token
    if marker.name == "truncate":
        return Fault(kind="truncate", token=token)
    if marker.name == "stall":
        form = "write !stall:MS[xN], MS the pause in whole ms from 1 to %d, N the attempts it hits (default 1), e.g. !stall:2000" % MS_MAX
        if not marker.args:
            raise MarkerError(f"marker {token!r} needs a duration; {form}")
        raw, _, n_raw = marker.args[0].partition("x")
        if not raw.isdigit() or not 1 <= int(raw) <= MS_MAX:
            raise MarkerError(f"marker {token!r}: duration {raw!r} is not whole milliseconds from 1 to {MS_MAX}; {form}")
        return Fault(kind="stall", token=token, count=_fault_count(token, n_raw, "x" in marker.args[0], form), stall_ms=int(raw))
    form = (
        f"write !flaky:KINDxN[:ra=S] with KIND one of {', '.join(FLAKY_KINDS)}, N the attempts that fail "
        f"({N_MIN} to {N_MAX}; !flaky:reset alone means x1) and S the Retry-After seconds (0 to {RETRY_AFTER_MAX_S}), e.g. !flaky:429x2"
    )
    if not marker.args:
        raise MarkerError(f"marker {token!r} needs a fault; {form}")
    m = _FLAKY_RE.fullmatch(marker.args[0])
    kind = m.group("kind") if m else marker.args[0]
    if m is None or kind not in FLAKY_KINDS:
        raise MarkerError(f"marker {token!r}: unknown fault {kind!r}; {form}")
    has_x = m.group("n") is not None
    if not has_x and kind != "reset":
        raise MarkerError(f"marker {token!r}: {kind!r} needs its number of attempts; {form}")
    count = _fault_count(token, m.group("n") or "", has_x, form)
    retry_after: int | None = RETRY_AFTER_DEFAULT_S if kind == "429" else None
    if len(marker.args) > 1:
        arg = marker.args[1]
        value = arg[3:] if arg.startswith("ra=") else None
        if kind == "reset":
            raise MarkerError(f"marker {token!r}: a reset sends no response, so no Retry-After ({arg!r}); write !flaky:reset[xN]")
        if value is None or not value.isdigit() or int(value) > RETRY_AFTER_MAX_S:
            raise MarkerError(f"marker {token!r}: {arg!r} is not ra=S with S whole seconds from 0 to {RETRY_AFTER_MAX_S}; {form}")
        retry_after = int(value)
    return Fault(kind="flaky", token=token, status=kind, count=count, retry_after_s=retry_after)


def _fault_count(token: str, raw: str, has_x: bool, form: str) -> int:
    if not has_x:
        return 1
    if not raw.isdigit() or not N_MIN <= int(raw) <= N_MAX:
        raise MarkerError(f"marker {token!r}: attempts {raw!r} after 'x' must be a whole number from {N_MIN} to {N_MAX}; {form}")
    return int(raw)


def _quirk_args(marker: Marker) -> tuple[str, int]:
    """!quirk:NAME[:N]: the quirk and the size of its batch."""
    if not marker.args:
        raise MarkerError(f"marker {marker.token!r} needs a quirk name: !quirk:NAME[:N]; quirks: {', '.join(QUIRKS)}")
    quirk = marker.args[0]
    if quirk not in QUIRKS:
        raise MarkerError(f"marker {marker.token!r}: unknown quirk {quirk!r}; quirks: {', '.join(QUIRKS)}")
    n = DEFAULT_QUIRK_N
    if len(marker.args) > 1:
        raw = marker.args[1]
        if not raw.isdigit() or not N_MIN <= int(raw) <= N_MAX:
            raise MarkerError(f"marker {marker.token!r}: count {raw!r} must be from {N_MIN} to {N_MAX}")
        n = int(raw)
    return quirk, n


def _loop_calls(marker: Marker, nonce: str, role) -> list[Call]:
    """!loopK[:N[:MS]]: K steps of N slow calls sleeping MS each."""
    k = marker.count or 0
    n, ms = DEFAULT_LOOP_N, DEFAULT_LOOP_MS
    if marker.args:
        raw = marker.args[0]
        if not raw.isdigit() or not N_MIN <= int(raw) <= N_MAX:
            raise MarkerError(
                f"marker {marker.token!r}: calls per step {raw!r} must be a whole number from {N_MIN} to {N_MAX}; "
                f"write !loopK[:N[:MS]], e.g. !loop{k}:2"
            )
        n = int(raw)
    if len(marker.args) > 1:
        raw = marker.args[1]
        if not raw.isdigit() or not 1 <= int(raw) <= MS_MAX:
            raise MarkerError(
                f"marker {marker.token!r}: duration {raw!r} must be whole milliseconds from 1 to {MS_MAX}; "
                f"write !loopK[:N[:MS]], e.g. !loop{k}:{n}:20"
            )
        ms = int(raw)
    calls = []
    for step in range(1, k + 1):
        for i in range(n):
            seq = (step - 1) * n + i
            calls.append(
                Call(
                    i,
                    loop_call_id(nonce, step, i),
                    role.name,
                    role.render_safe(nonce, seq, ms),
                    "slow",
                    role.parallel_safe,
                    ms,
                    role.expected_substrings(nonce, seq),
                    role.expect_error,
                    step,
                    seq,
                )
            )
    return calls


def compose(marker: str | None, nonce: str, prefix: str = "kstress") -> str:
    """The text of one input: an optional marker and the unique nonce suffix that
    defeats kernels' replay guards (identical text would be dropped)."""
    if not NONCE_CHARS.fullmatch(nonce):
        raise ValueError(f"nonce {nonce!r} must match [A-Za-z0-9_-]+")
    body = f"{prefix} {marker}" if marker else prefix
    return f"{body} #{nonce}"


# --- the verdict line --------------------------------------------------------

# A verdict line ends with a keyed tag when the mock has a verdict key
# (KSTRESS_VERDICT_KEY, set by the harness for the mock alone): a kernel that
# never called the LLM cannot write a line that authenticates, because it
# never sees the key. Keyed BLAKE2s is a MAC by design (no HMAC wrapper
# needed) and costs about a microsecond a line; 64 bits make a guess hopeless
# within any run.
TAG_BYTES = 8
VERDICT_KEY_ENV = "KSTRESS_VERDICT_KEY"


def verdict_key(value: str | None) -> bytes | None:
    """The key from its environment form (hex, or any text), None when unset or empty."""
    if not value:
        return None
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raw = value.encode()
    return raw[:32] if raw else None  # BLAKE2s takes keys of at most 32 bytes


def verdict_tag(body: str, key: bytes) -> str:
    """The tag of one verdict line's body (the line without its ` tag=`)."""
    return hashlib.blake2s(body.encode(), key=key, digest_size=TAG_BYTES).hexdigest()


def sign(body: str, key: bytes | None) -> str:
    """The line as the mock writes it: tagged when it has a key."""
    return body if key is None else f"{body} tag={verdict_tag(body, key)}"


def tag_ok(body: str, tag: str | None, key: bytes) -> bool:
    return tag is not None and hmac.compare_digest(tag, verdict_tag(body, key))



@dataclass(frozen=True)
class VerdictLine:
    nonce: str
    plan: str
    expected: int
    got: int
    ids: bool
    args: bool
    order: bool
    errors: int
    tool_ms: int | None
    # a tool loop's: steps the kernel completed / steps planned, and the loop token
    steps: int | None = None
    steps_total: int | None = None
    loop: str | None = None
    # a session turn's: the history token (history_ok, parse_history_token)
    history: str | None = None
    # the keyed tag the line carried, when read from text (never part of
    # format(): two readings of one verdict compare equal whether tagged or not)
    tag: str | None = field(default=None, compare=False)

    def format(self) -> str:
        tool_ms = "na" if self.tool_ms is None else str(self.tool_ms)
        line = (
            f"KST nonce={self.nonce} plan={self.plan} expected={self.expected} got={self.got} "
            f"ids={_ok(self.ids)} args={_ok(self.args)} order={_ok(self.order)} errors={self.errors} "
            f"tool_ms={tool_ms}"
        )
        if self.steps is not None:
            line += f" steps={self.steps}/{self.steps_total}"
        if self.loop is not None:
            line += f" loop={self.loop}"
        if self.history is not None:
            line += f" history={self.history}"
        return line

    @property
    def all_ok(self) -> bool:
        """Every call ran as planned: got = expected, ids, args, order ok, and
        a tool loop's token ok. ``errors`` and ``history`` are apart: some plans
        expect errors, and a kernel without sessions shows missing:t1 by design."""
        return self.got == self.expected and self.ids and self.args and self.order and self.loop in (None, "ok")

    @property
    def history_ok(self) -> bool:
        """No history problem: not a session turn, or history=ok."""
        return self.history in (None, "ok")


def _ok(flag: bool) -> str:
    return "ok" if flag else "bad"


def text_verdict(nonce: str, history: str | None = None) -> str:
    """The last line of a text reply. A session turn's carries its history
    token, and says ``bad`` when the history is not ok."""
    if history is None:
        return f"KST nonce={nonce} plan=text ok"
    return f"KST nonce={nonce} plan=text {'ok' if history == 'ok' else 'bad'} history={history}"


def parse_verdict(text: str) -> VerdictLine | None:
    """The first tool verdict line in a reply, or None."""
    m = VERDICT_RE.search(text)
    if not m:
        return None
    g = m.groupdict()
    return VerdictLine(
        nonce=g["nonce"],
        plan=g["plan"],
        expected=int(g["expected"]),
        got=int(g["got"]),
        ids=g["ids"] == "ok",
        args=g["args"] == "ok",
        order=g["order"] == "ok",
        errors=int(g["errors"]),
        tool_ms=None if g["tool_ms"] == "na" else int(g["tool_ms"]),
        steps=None if g["steps"] is None else int(g["steps"]),
        steps_total=None if g["steps_total"] is None else int(g["steps_total"]),
        loop=g["loop"],
        history=g["history"],
        tag=g["tag"],
    )


def parse_text_verdict(text: str) -> str | None:
    """The nonce of a text verdict line that passed (`plan=text ok`, with
    `history=ok` on a session turn), or None: a session turn whose history is
    not ok has no passing line (parse_text_line reads it)."""
    m = TEXT_VERDICT_RE.search(text)
    return m.group("nonce") if m else None


@dataclass(frozen=True)
class TextVerdict:
    nonce: str
    ok: bool
    history: str | None  # None: not a session turn
    tag: str | None = field(default=None, compare=False)  # as on VerdictLine

    def format(self) -> str:
        return text_verdict(self.nonce, self.history)


def parse_text_line(text: str) -> TextVerdict | None:
    """The first text verdict line of a reply, passed or not, or None."""
    m = TEXT_LINE_RE.search(text)
    return TextVerdict(m.group("nonce"), m.group("ok") == "ok", m.group("history"), m.group("tag")) if m else None


def parse_history(text: str) -> str | None:
    """The history token of the first KST verdict line (tool or text) that
    has one, or None: no session turn's verdict in the text."""
    m = HISTORY_RE.search(text)
    return m.group("history") if m else None


# --- the tokens of tool loops and session turns ----------------------------------

# loop=ok | loop=past | loop=s<k>:<problem>
LOOP_PROBLEMS = (
    "missing",  # step k's exchange is not in the history
    "steps_order",  # step k's exchange is in the history, not in its place
    "calls_missing",  # the assistant message of step k's calls is absent, or lists fewer calls
    "ids",  # step k's calls or results carry ids the mock did not give step k
    "ids_reused",  # step k carries the ids of an earlier step
    "args",  # a call of step k has another name or other arguments
    "results_missing",  # fewer results than calls in step k
    "results_extra",  # more results than calls (a call answered twice)
    "results_order",  # step k's results not in declared order
    "results_bad",  # a result of step k reports failure or lacks its own KST-S/KST-E lines
)
_LOOP_TOKEN_RE = re.compile(r"ok|past|s([1-9][0-9]*):(" + "|".join(LOOP_PROBLEMS) + ")")


def loop_token(step: int | None, problem: str | None) -> str:
    """``ok``, or ``s<step>:<problem>`` for the first step that went wrong."""
    if problem is None:
        return "ok"
    if problem == "past":
        return "past"
    if problem not in LOOP_PROBLEMS:
        raise ValueError(f"unknown loop problem {problem!r}; problems: {', '.join(LOOP_PROBLEMS)}")
    return f"s{step}:{problem}"


def parse_loop_token(token: str) -> tuple[int | None, str] | None:
    """(step, problem) of a loop token: (None, "ok"), (None, "past"), (2,
    "results_missing"); None when it is not one."""
    m = _LOOP_TOKEN_RE.fullmatch(token) if isinstance(token, str) else None
    if not m:
        return None
    if m.group(1) is None:
        return None, token
    return int(m.group(1)), m.group(2)


# history=ok | foreign:<nonce> | extra:t<k> | unresolved:<what> | missing:t<k>[.exchange|.answer]
#         | order | exchange:t<k> | altered:t<k>
HISTORY_PROBLEMS = ("foreign", "extra", "unresolved", "missing", "order", "exchange", "altered")
# the parts of an earlier turn a history can lack besides its input
HISTORY_PARTS = ("exchange", "answer")
UNRESOLVED = ("item_reference", "previous_response_id")
_HISTORY_TOKEN_RE = re.compile(
    rf"ok|order|foreign:([A-Za-z0-9_-]+)|unresolved:({'|'.join(UNRESOLVED)})"
    rf"|(extra|missing|exchange|altered):t([1-9][0-9]*)|missing:t([1-9][0-9]*)\.({'|'.join(HISTORY_PARTS)})"
)


def parse_history_token(token: str) -> tuple[str, str | int | tuple[int, str] | None] | None:
    """(problem, detail) of a history token: ("ok", None), ("order", None),
    ("foreign", "<nonce>"), ("unresolved", "item_reference"), ("missing", 2)
    for a missing input, ("missing", (2, "answer")) for a missing part of a
    turn that is there ...; None when it is not one."""
    m = _HISTORY_TOKEN_RE.fullmatch(token) if isinstance(token, str) else None
    if not m:
        return None
    if m.group(1) is not None:
        return "foreign", m.group(1)
    if m.group(2) is not None:
        return "unresolved", m.group(2)
    if m.group(3) is not None:
        return m.group(3), int(m.group(4))
    if m.group(5) is not None:
        return "missing", (int(m.group(5)), m.group(6))
    return token, None


def parse_timestamps(text: str, nonce: str) -> dict[int, tuple[int | None, int | None]]:
    """KST-S / KST-E nanosecond timestamps per call index, for one nonce."""
    out: dict[int, list[int | None]] = {}
    for m in TIMESTAMP_RE.finditer(text):
        if m.group("nonce") != nonce:
            continue
        slot = out.setdefault(int(m.group("i")), [None, None])
        slot[0 if m.group("edge") == "S" else 1] = int(m.group("ns"))
    return {i: (s, e) for i, (s, e) in out.items()}


def peak_overlap(intervals: Iterable[tuple[int, int]]) -> int:
    """Largest number of intervals open at one instant (an end at t closes
    before a start at t opens)."""
    events: list[tuple[int, int]] = []
    for start, end in intervals:
        events.append((start, 1))
        events.append((end, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    peak = cur = 0
    for _, delta in events:
        cur += delta
        peak = max(peak, cur)
    return peak
