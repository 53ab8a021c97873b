"""TurnVerdict: did the work of one input really happen?

A turn passes only when its terminal frame arrived in time, no error frame came
(unless the marker asked for one), and the mock's verdict line says got =
expected with ids, args and order ok and the expected number of tool errors.
Anything else is a *named* failure (docs/results.md lists them all).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from mock.markers import Plan, parse_text_verdict, parse_timestamps, parse_verdict, peak_overlap

from .client import Turn


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


def observed_overlap(reply: str, plan: Plan) -> tuple[int | None, float | None]:
    """Peak number of timed tools running at once, and the span from the first
    start to the last end in ms, from the KST-S/KST-E lines echoed in the reply.
    None when any timed call's pair is missing (the tools did not all run)."""
    timed = plan.timed_calls
    if not timed:
        return None, None
    stamps = parse_timestamps(reply, plan.nonce)
    intervals = []
    for c in timed:
        s, e = stamps.get(c.index, (None, None))
        if s is None or e is None or e < s:
            return None, None
        intervals.append((s, e))
    span = (max(e for _, e in intervals) - min(s for s, _ in intervals)) / 1e6
    return peak_overlap(intervals), span


def judge(turn: Turn, plan: Plan, *, expect_duplicate: bool = False) -> TurnVerdict:
    failures: list[str] = []
    fields: dict[str, Any] = {}
    reply = turn.reply

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
    elif not plan.has_tools:
        nonce = parse_text_verdict(reply)
        if nonce is None:
            failures.append("missing_verdict")
        elif nonce != plan.nonce:
            failures.append(f"wrong_nonce ({nonce} != {plan.nonce})")
    else:
        line = parse_verdict(reply)
        if line is None:
            failures.append("missing_verdict")
        else:
            fields.update(expected=line.expected, got=line.got, errors=line.errors, tool_ms=line.tool_ms)
            if line.nonce != plan.nonce:
                failures.append(f"wrong_nonce ({line.nonce} != {plan.nonce})")
            if line.got != line.expected:
                failures.append(f"count {line.got}/{line.expected}")
            if not line.ids:
                failures.append("ids")
            if not line.args:
                failures.append("args")
            if not line.order:
                failures.append("order")
            if line.errors != plan.expected_errors:
                failures.append(f"errors {line.errors}/{plan.expected_errors}")
            overlap, span = observed_overlap(reply, plan)
            fields.update(overlap=overlap, tool_span_ms=span)
            if overlap is not None and plan.serial_required and overlap > 1:
                failures.append(f"overlap {overlap}>1 (a batch that must run serially ran concurrently)")

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
