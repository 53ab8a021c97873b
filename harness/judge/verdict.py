"""TurnVerdict: did the work of one input really happen?

A turn passes only when its terminal frame arrived in time, no error frame came
(unless the marker asked for one), and the mock's verdict line says got =
expected with ids, args and order ok and the expected number of tool errors.
Anything else is a *named* failure (docs/results.md lists them all).
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any, NamedTuple

from mock.markers import Plan, VerdictLine, parse_text_line, parse_timestamps, parse_verdict, peak_overlap, tag_ok

from ..wire.client import Turn
from .contract import REFKERNEL, Contract


class TurnVerdict(NamedTuple):
    """Immutable, and a NamedTuple rather than a frozen dataclass: one is made
    per turn, and a frozen dataclass's __init__ costs twice as much."""

    input_id: str
    nonce: str
    marker: str | None
    plan: str
    passed: bool
    failures: tuple[str, ...]
    outcome: str
    latency_s: float | None
    first_frame_s: float | None
    expected: int | None = None
    got: int | None = None
    errors: int | None = None
    tool_ms: int | None = None
    overlap: int | None = None
    tool_span_ms: float | None = None
    error_code: str | None = None
    interrupt: bool = False
    scheduled_s: float | None = None  # latency from the scheduled send time (open model)
    tool_sum_ms: float | None = None  # the timed tools' own durations, summed
    concurrency: float | None = None  # tool_sum_ms / tool_span_ms: effective concurrency
    stagger_ms: float | None = None  # last start - first start
    verdict_source: str | None = None  # reply | mock | both: where the verdict was read
    steps: int | None = None  # a tool loop's: steps the kernel completed correctly
    steps_total: int | None = None
    anatomy: dict[str, Any] | None = None  # where the turn's time went (harness/judge/verdict.py: turn_anatomy)
    cancel_sent: bool | None = None  # kstress cancelled the turn (an interrupt over an agent protocol)
    cancel_answer: str | None = None  # a cancelled turn's: what the agent answered the cancel request (A2A), else None

    @property
    def failure(self) -> str | None:
        return self.failures[0] if self.failures else None

    @property
    def reason(self) -> str:
        """The failure's category, without its detail: `count 1/4` -> `count`."""
        return self.failure.split(" ", 1)[0].split(":", 1)[0] if self.failure else "ok"

    @property
    def tools_ran(self) -> bool:
        """Tool work observably happened: a verdict line with every planned result."""
        return self.expected is not None and self.got == self.expected and self.expected > 0

    def to_json(self) -> dict[str, Any]:
        d = dict(zip(self._fields, self))
        d["failures"] = list(self.failures)
        return d


def failure_name(row: dict[str, Any]) -> str | None:
    """A failed row's name: the first word of its first failure, numbers and
    detail dropped (`count 1/4` -> `count`, `error_frame:busy` stays whole):
    the key of every failures table and of ``errors[NAME]`` thresholds."""
    fs = row.get("failures")
    if row.get("passed") or not fs:
        return None
    return fs[0].split(" ", 1)[0]


# what the schedule check names: a turn failing only by these still ran every
# tool -- its tool time is a sample of how the kernel schedules (abtest, cmp)
SCHEDULE_FAILURES = ("overlap", "barrier", "no_overlap")



def failure_counts(rows: list[dict[str, Any]]) -> tuple[dict[str, int], dict[str, str]]:
    """Failed rows by the name of their first failure, without its numbers
    (`count 1/4` and `count 3/4` are one `count` row), and the first full
    reason of each as an example."""
    failures: Counter[str] = Counter()
    examples: dict[str, str] = {}
    for r in rows:
        name = failure_name(r)
        if name is not None:
            failures[name] += 1
            examples.setdefault(name, r["failures"][0])
    return dict(sorted(failures.items())), dict(sorted(examples.items()))

def is_timing_sample(row: dict[str, Any]) -> bool:
    """A turn row whose tool time measures the kernel: every tool ran and
    answered correctly; only its schedule may have broken the contract."""
    return row.get("tool_ms") is not None and all(f.split(" ", 1)[0] in SCHEDULE_FAILURES for f in row.get("failures") or ())


def timed_intervals(stamps: dict[int, tuple[int | None, int | None]], plan: Plan) -> dict[int, tuple[int, int]]:
    """(start, end) ns of every timed call by its stamp (a batch's call index;
    a tool loop's number in the whole turn); {} when any is missing."""
    out = {}
    for c in plan.timed_calls:
        s, e = stamps.get(c.stamp, (None, None))
        if s is None or e is None or e < s:
            return {}
        out[c.stamp] = (s, e)
    return out


# Calls that sleep less than this may end before a sibling the kernel started
# with them has even started, on a loaded machine: a group of them that never
# all ran at once is judged against its own start stagger (_waited), and a
# loop's short steps together (schedule()). At and above it every group must
# overlap on its own.
OVERLAP_STRICT_MS = 100
# A gap between starts with an end in it is a wait when it is longer than
# this many times the longest gap with none (_waited).
WAIT_FACTOR = 2


def _at(iv: tuple[int, int], t0: int) -> str:
    return f"+{(iv[0] - t0) / 1e6:.1f}–{(iv[1] - t0) / 1e6:.1f} ms"


def schedule(plan: Plan, intervals: dict[int, tuple[int, int]], contract: Contract) -> tuple[dict[str, Any], list[str]]:
    """The observed schedule of a batch against the contract's rule, from the
    timestamps of its timed calls: the measurements, and each violation named
    with the two calls and their times (ms from the first start). A tool
    loop's steps are each a batch of their own."""
    if not intervals:
        return {"overlap": None, "tool_span_ms": None}, []
    starts = [s for s, _ in intervals.values()]
    ends = [e for _, e in intervals.values()]
    t0 = min(starts)
    span = max(ends) - t0
    busy = sum(e - s for s, e in intervals.values())
    failures: list[str] = []
    peaks, staggers, walls = [], [], []
    # a loop's short steps: (step, its no_overlap failures), judged together below
    short_misses: list[list[str]] = []
    short_steps = 0
    for step in range(1, max(plan.steps, 1) + 1):
        calls = plan.step_calls(step)
        iv = {c.index: intervals[c.stamp] for c in calls if c.stamp in intervals}
        if not iv:
            continue
        peaks.append(peak_overlap(iv.values()))
        staggers.append(max(a for a, _ in iv.values()) - min(a for a, _ in iv.values()))
        walls.append(max(b for _, b in iv.values()) - min(a for a, _ in iv.values()))
        found = _step_schedule(calls, iv, contract, t0, f"step {step}: " if plan.kind == "loop" else "")
        if plan.kind == "loop" and len(iv) > 1 and max(c.sleep_ms or 0 for c in calls) < OVERLAP_STRICT_MS:
            short_steps += 1
            missed = [f for f in found if f.startswith("no_overlap")]
            if missed:
                short_misses.append(missed)
            found = [f for f in found if not f.startswith("no_overlap")]
        failures += found
    # A tool shorter than the start stagger of a loaded kernel (tens of ms
    # with 32 connections on 2 cores) may end before its sibling starts even
    # when both were started at once: one such step proves nothing. A
    # concurrent kernel overlaps in most steps, a serial one in none, so the
    # short steps of a loop fail together, when not one of them overlapped.
    if short_steps and len(short_misses) == short_steps:
        failures += [f"{short_misses[0][0][:-1]}; no step of {short_steps} overlapped)"]
    fields = {
        "overlap": max(peaks),
        "tool_span_ms": span / 1e6,
        "tool_sum_ms": round(busy / 1e6, 3),
        # effective concurrency: the tools' own time over the wall time they took
        "concurrency": round(busy / span, 3) if span > 0 else None,
        "stagger_ms": round(max(staggers) / 1e6, 3),
        # the tools' wall time: each step's span, summed (a loop's steps run one after another)
        "tool_wall_ms": round(sum(walls) / 1e6, 3),
    }
    return fields, failures


def _step_schedule(calls: tuple, intervals: dict[int, tuple[int, int]], contract: Contract, t0: int, where: str) -> list[str]:
    rule = contract.batch
    safe = tuple(c.parallel_safe for c in calls)
    sleeps = {c.index: c.sleep_ms or 0 for c in calls}
    failures: list[str] = []

    def all_overlap(idx: list[int], why: str) -> None:
        if len(idx) < 2:
            return
        late = max(idx, key=lambda i: intervals[i][0])
        early_end = min(idx, key=lambda i: intervals[i][1])
        if intervals[late][0] >= intervals[early_end][1]:
            waited = ""
            if max(sleeps[i] for i in idx) < OVERLAP_STRICT_MS:
                wait = _waited([intervals[i] for i in idx], t0)
                if wait is None:
                    return
                waited = f"; {wait}"
            failures.append(
                f"no_overlap ({where}calls {early_end} and {late} never ran at once: {early_end} {_at(intervals[early_end], t0)}, "
                f"{late} {_at(intervals[late], t0)}; contract batch={rule} {why}{waited})"
            )

    if contract.runs_serially(safe):
        peak = peak_overlap(intervals.values())
        if peak > 1:
            i, j = next((i, j) for i in intervals for j in intervals if i < j and intervals[i][0] < intervals[j][1] and intervals[j][0] < intervals[i][1])
            failures.append(
                f"overlap {peak}>1 ({where}calls {i} and {j} ran at once: {i} {_at(intervals[i], t0)}, {j} {_at(intervals[j], t0)}; "
                f"contract batch={rule} runs this batch serially)"
            )
    elif rule == "barrier" and not all(safe):
        barriers = [c.index for c in calls if not c.parallel_safe]
        for u in barriers:
            before = [i for i in intervals if i < u]
            after = [i for i in intervals if i > u]
            if before and after:
                last = max(before, key=lambda i: intervals[i][1])
                first = min(after, key=lambda i: intervals[i][0])
                if intervals[last][1] > intervals[first][0]:
                    failures.append(
                        f"barrier ({where}call {last} ended at +{(intervals[last][1] - t0) / 1e6:.1f} ms, after call {first} started at "
                        f"+{(intervals[first][0] - t0) / 1e6:.1f} ms: the unsafe call {u} must separate them)"
                    )
        edges = [-1, *barriers, len(calls)]
        for lo, hi in zip(edges, edges[1:]):
            all_overlap([i for i in intervals if lo < i < hi], "runs the calls between barriers concurrently")
    else:
        all_overlap(list(intervals), "runs this batch concurrently")
    return failures


def _waited(intervals: list[tuple[int, int]], t0: int) -> str | None:
    """Where short calls that never all ran at once show a start that waited
    for an end, or None when their start stagger alone explains it.

    A kernel that starts every call at once still gets them running one
    process at a time: on a loaded 2-core machine seven starts spread over
    70 ms, past the end of a 50 ms call. Those starts keep coming at the
    spawn pace whether or not a call has ended. A serial or throttled kernel
    starts a call only when one has ended, so its starts pause until an end:
    a gap between two starts with an end in it, longer than WAIT_FACTOR times
    the longest gap with no end in it (the stagger of starts that waited for
    nothing, measured on this very group). A group where every gap held an
    end -- no two calls ever ran at once -- waited throughout."""
    starts = sorted(s for s, _ in intervals)
    ends = [e for _, e in intervals]
    # an end at t closes before a start at t opens (peak_overlap)
    gaps = [(b - a, b, any(a < e <= b for e in ends)) for a, b in zip(starts, starts[1:])]
    free = max((g for g, _, held in gaps if not held), default=0)
    for g, b, held in gaps:
        if held and g > WAIT_FACTOR * free:
            return (
                f"the start at +{(b - t0) / 1e6:.1f} ms waited for an end: {g / 1e6:.1f} ms after the start before it, "
                f"over {WAIT_FACTOR}x the {free / 1e6:.1f} ms longest gap between starts with no end between"
            )
    return None


def turn_anatomy(turn: Turn, mock: dict[str, Any], tool_s: float) -> dict[str, Any] | None:
    """Where one turn's time went, from both ends of the LLM link on one clock
    (CLOCK_MONOTONIC: the harness's send and terminal times, the mock's
    arrival / first byte / last byte of each of the turn's requests):

        pre_llm_s   send -> the first LLM request's arrival (the kernel before its first request)
        llm_s       every request of the turn, arrival -> last byte, summed
        between_s   the gaps between requests: the tools and the kernel around them
        tool_s      the tools' own wall time, where they are timed (KST stamps; 0 otherwise)
        post_llm_s  the last request's last byte -> the terminal frame
        overhead_s  latency - llm_s - tool_s: the kernel's own time

    pre + llm + between + post is the latency (to clock resolution). None when
    the mock has no complete record of the turn."""
    recs = [r for r in mock.get("records") or () if isinstance(r, dict)]
    if turn.t_done is None or not recs:
        return None
    recs = [r for r in recs if r.get("arrival") is not None and r["arrival"] >= turn.t_sent - 0.001]
    if not recs or any(r.get("last_byte") is None for r in recs):
        return None
    recs.sort(key=lambda r: r["arrival"])
    latency = turn.t_done - turn.t_sent
    llm = sum(r["last_byte"] - r["arrival"] for r in recs)
    between = sum(b["arrival"] - a["last_byte"] for a, b in zip(recs, recs[1:]))
    first = recs[0]
    r6 = lambda x: round(x, 6)  # noqa: E731
    return {
        "pre_llm_s": r6(first["arrival"] - turn.t_sent),
        "llm_s": r6(llm),
        "llm_first_byte_s": r6(first["first_byte"] - first["arrival"]) if first.get("first_byte") is not None else None,
        "between_s": r6(between),
        "tool_s": r6(tool_s),
        "post_llm_s": r6(turn.t_done - recs[-1]["last_byte"]),
        "overhead_s": r6(latency - llm - tool_s),
        "requests": len(recs),
    }


def _source(said: Any, recorded: Any) -> str | None:
    if said is not None and recorded is not None:
        return "both"
    return "reply" if said is not None else "mock" if recorded is not None else None


def _stamps_of(mock: dict[str, Any] | None) -> dict[int, tuple[int | None, int | None]]:
    raw = (mock or {}).get("stamps") or {}
    out = {}
    for k, v in raw.items():
        if str(k).isdigit() and isinstance(v, list) and len(v) == 2:
            out[int(k)] = (v[0], v[1])
    return out


def judge(
    turn: Turn,
    plan: Plan,
    *,
    expect_duplicate: bool = False,
    contract: Contract = REFKERNEL,
    mock: dict[str, Any] | None = None,
    joined: bool = False,
    key: bytes | None = None,
    authenticate: bool = True,
) -> TurnVerdict:
    """``mock`` is the mock's own record of this input (harness/judge/mockjoin.py),
    when one was asked for (``joined``): a kernel that rewords the model's
    answer is judged by it; a kernel that echoes the verdict line must agree
    with it. ``verdict_source`` says which was used. A line read from the
    reply alone must be authenticated (``_forged``): by the mock's record, or
    by its tag under ``key``, the run's verdict key. ``authenticate=False``
    reads the reply's line as given (`kstress send` with nothing to check it by)."""
    fields: dict[str, Any] = {}
    failures = _delivery_failures(turn, plan, expect_duplicate)
    if failures is None:
        if not plan.has_tools:
            failures = _text_failures(turn, plan, contract, mock, joined, fields, key, authenticate)
        else:
            failures = _tool_failures(turn, plan, contract, mock, joined, fields, key, authenticate)
    if turn.tools_shown is not None and turn.outcome == "response" and plan.calls:
        failures += shown_tool_failures(turn.tools_shown, plan)
    if mock is not None and "anatomy" not in fields and turn.outcome == "response":
        fields["anatomy"] = turn_anatomy(turn, mock, 0.0)
    return _verdict(turn, plan, failures, fields)


_ID_PREFIXES = ("call_", "toolu_", "fc_")


def _id_key(call_id: str) -> str:
    """A call id without its dialect's prefix: the mock's call_<nonce>_<i> is
    toolu_... on Anthropic's wire, and an agent shows the id its LLM gave."""
    for p in _ID_PREFIXES:
        if call_id.startswith(p):
            return call_id[len(p):]
    return call_id


def _same_args(shown: str, planned: str) -> bool:
    try:
        return json.loads(shown) == json.loads(planned)
    except ValueError:
        return shown == planned


def shown_tool_failures(shown: dict[str, dict[str, Any]], plan: Plan) -> list[str]:
    """What an agent protocol that shows tool calls (AG-UI's TOOL_CALL_*)
    showed, held to the calls the mock asked for (the plan: the mock plans
    exactly so): each shown with the mock's call id and arguments, and given
    exactly one result. Beside the verdict line, which stays the ground truth:
    these fail a turn whose agent did the work but showed it wrong to its UI."""
    by_key = {_id_key(k): v for k, v in shown.items()}
    missing, args, no_result, repeated = [], [], [], []
    for call in plan.calls:
        c = by_key.get(_id_key(call.id))
        if c is None or not c.get("start"):
            missing.append(f"{call.id} {call.name}")
            continue
        if not _same_args(c.get("args") or "", call.arguments):
            args.append(f"{call.id}: shown {str(c.get('args'))[:80]!r}, asked {call.arguments[:80]!r}")
        n = c.get("results") or 0
        if n == 0:
            no_result.append(call.id)
        elif n > 1:
            repeated.append(f"{call.id} x{n}")
    out = []
    if missing:
        out.append(f"tool_call_missing ({len(missing)} of {len(plan.calls)} calls the mock asked for never shown: {', '.join(missing[:4])})")
    if args:
        out.append(f"tool_args_mismatch ({'; '.join(args[:2])})")
    if no_result:
        out.append(f"tool_result_missing (no result shown for {', '.join(no_result[:4])})")
    if repeated:
        out.append(f"tool_result_repeated ({', '.join(repeated[:4])})")
    return out


def _delivery_failures(turn: Turn, plan: Plan, expect_duplicate: bool) -> list[str] | None:
    """The failures of a turn settled by how it ended (no connection, no
    answer, a replay, an error frame) before any verdict line is read; None
    when it brought an answer that the verdict line must judge."""
    failures: list[str] = []
    if turn.outcome == "conn_error":
        # the reason travels with the name (turns.jsonl, the report's examples)
        failures.append(f"conn_error:{turn.conn_kind or 'unknown'}" + (f" ({turn.conn_error})" if turn.conn_error else ""))
    elif turn.outcome == "timeout":
        failures.append("timeout" + (f" ({turn.conn_error})" if turn.conn_error else ""))
    elif turn.outcome == "flood":
        failures.append(f"flood ({turn.conn_error})")
    elif turn.outcome == "closed":
        failures.append("closed")
    elif expect_duplicate:
        if not turn.duplicate:
            failures.append("dedup (identical input was executed again, not dropped as a replay)")
    elif turn.duplicate:
        failures.append("duplicate (the kernel dropped the input as a replay)")
    elif plan.expects_error_frame or (plan.kind == "hang" and plan.hang_ms is None):
        if turn.outcome != "error":
            failures.append(f"missing_verdict (expected an error frame for {plan.marker}, got a response)")
    elif turn.outcome == "error":
        failures.append(f"error_frame:{turn.error_code}")
    else:
        return None
    return failures


def _forged(said: Any, recorded: Any, mock: dict[str, Any] | None, joined: bool, key: bytes | None) -> str | None:
    """Why a verdict line read from the reply cannot be trusted, or None.

    A kernel that never called the LLM can still write a well-formed line.
    The mock's record of the input is the proof: where it has one, the reply
    must agree with it (verdict_mismatch). Where it provably has none -- it
    never saw the input, or saw it and wrote no verdict -- the line is forged.
    Where that cannot be known (the mock dropped entries, or could not be
    asked, or there is no mock to ask), the line's tag must verify under the
    run's verdict key, which the mock has and the kernel never sees."""
    if said is None or recorded is not None:
        return None
    if mock is not None:
        seen = "never saw this input" if mock.get("absent") else "saw this input but wrote no verdict for it"
        return f"forged_verdict (the reply carries a verdict line the mock never wrote: the mock {seen})"
    if key is not None:
        if said.tag is None:
            return "forged_verdict (the reply's verdict line has no tag: the mock tags every line it writes in this run)"
        if not tag_ok(said.format(), said.tag, key):
            return "forged_verdict (the reply's verdict line carries a tag that does not verify under this run's verdict key)"
        return None
    why = "the mock dropped or could not give its record of this input" if joined else "no mock to ask"
    return f"forged_verdict (cannot be authenticated: {why}, and no verdict key is known; see docs/results.md)"


def _text_failures(
    turn: Turn, plan: Plan, contract: Contract, mock: dict[str, Any] | None, joined: bool, fields: dict[str, Any], key: bytes | None, authenticate: bool
) -> list[str]:
    """A plain input's answer: its text verdict line, from the reply or the mock's record."""
    failures: list[str] = []
    said = parse_text_line(turn.reply)
    recorded_line = (mock or {}).get("text_verdict")
    recorded = parse_text_line(recorded_line) if recorded_line else None  # none to read without a mock: no regex per turn
    fields["verdict_source"] = _source(said, recorded)
    if said is not None and recorded is not None and said.format() != recorded.format() and said.nonce == plan.nonce:
        failures.append(f"verdict_mismatch (the reply says {said.format()!r}, the mock recorded {recorded.format()!r})")
    forged = _forged(said, recorded, mock, joined, key) if authenticate and said is not None and said.nonce == plan.nonce else None
    if forged is not None:
        return [forged]
    tv = said or recorded
    if tv is None:
        failures.append("missing_verdict" + (" (neither in the reply nor in the mock's record)" if joined else ""))
    elif tv.nonce != plan.nonce:
        failures.append(f"wrong_nonce ({tv.nonce} != {plan.nonce})")
    elif not tv.ok and not (tv.history and not contract.sessions):
        # a kernel declaring sessions=false keeps no history: nothing to hold it to
        failures.append(f"history {tv.history}" if tv.history else "missing_verdict")
    return failures


def _tool_failures(
    turn: Turn, plan: Plan, contract: Contract, mock: dict[str, Any] | None, joined: bool, fields: dict[str, Any], key: bytes | None, authenticate: bool
) -> list[str]:
    """A tool input's answer: its verdict line (from the reply or the mock's
    record), then how the tools were scheduled."""
    said_line = parse_verdict(turn.reply)
    v = (mock or {}).get("verdict") or {}
    recorded_line = parse_verdict(v.get("line") or "") if isinstance(v, dict) else None
    fields["verdict_source"] = _source(said_line, recorded_line)
    line = said_line or recorded_line
    if line is None:
        return ["missing_verdict" + (" (neither in the reply nor in the mock's record)" if joined else "")]
    if authenticate and said_line is not None and said_line.nonce == plan.nonce:
        forged = _forged(said_line, recorded_line, mock, joined, key)
        if forged is not None:
            return [forged]
    failures: list[str] = []
    if said_line is not None and recorded_line is not None and said_line.format() != recorded_line.format() and said_line.nonce == plan.nonce:
        failures.append(f"verdict_mismatch (the reply says {said_line.format()!r}, the mock recorded {recorded_line.format()!r})")
    fields.update(expected=line.expected, got=line.got, errors=line.errors, tool_ms=line.tool_ms)
    if line.steps_total is not None:
        fields.update(steps=line.steps, steps_total=line.steps_total)
    failures += _line_failures(line, plan, contract)
    stamps = parse_timestamps(turn.reply, plan.nonce) if said_line is not None else {}
    if not stamps:
        stamps = _stamps_of(mock)
    measured, broken = schedule(plan, timed_intervals(stamps, plan), contract)
    tool_wall = measured.pop("tool_wall_ms", None)
    fields.update(measured)
    failures += broken
    if mock is not None:
        fields["anatomy"] = turn_anatomy(turn, mock, (tool_wall or 0.0) / 1000)
    return failures


def _line_failures(line: VerdictLine, plan: Plan, contract: Contract) -> list[str]:
    """What a tool verdict line says went wrong, against the plan and the contract."""
    failures: list[str] = []
    if line.nonce != plan.nonce:
        failures.append(f"wrong_nonce ({line.nonce} != {plan.nonce})")
    if line.loop not in (None, "ok"):
        failures.append(f"loop {line.loop} (steps {line.steps}/{line.steps_total})")
    if line.history not in (None, "ok") and contract.sessions:
        failures.append(f"history {line.history}")
    if line.got != line.expected:
        failures.append(f"count {line.got}/{line.expected}")
    if not line.ids:
        failures.append("ids")
    if not line.args:
        failures.append("args")
    if not line.order and contract.order == "declared":
        failures.append("order")
    if line.errors != plan.expected_errors:
        failures.append(f"errors {line.errors}/{plan.expected_errors}")
    return failures


def _verdict(turn: Turn, plan: Plan, failures: list[str], fields: dict[str, Any]) -> TurnVerdict:
    return TurnVerdict(
        input_id=turn.input_id,
        nonce=turn.nonce,
        marker=plan.marker,
        plan=plan.kind,
        passed=not failures,
        failures=tuple(failures),
        outcome=turn.outcome,
        latency_s=turn.latency_s,
        first_frame_s=turn.first_frame_s,
        error_code=turn.error_code,
        interrupt=turn.interrupt,
        scheduled_s=(turn.t_done - turn.t_scheduled) if turn.t_done is not None and turn.t_scheduled is not None else None,
        **fields,
    )
