"""Judging a cancelled turn (issue 23 item 4): over an agent protocol an
interrupt is a cancel -- AG-UI closes the run's stream, A2A sends
tasks/cancel -- and whether the agent honoured it is read from the mock's
side, the only side that sees the agent's work:

- no LLM request of the turn may *arrive* later than ``bound_s`` after the
  cancel (an agent that ran on sent its tools' results and asked again);
- an LLM request in flight at the cancel must not be served to its end later
  than ``bound_s`` after it, nor still be open when the window closes (the
  agent kept reading the model's answer).

A tool is seen only through its result reaching the LLM: one that goes on
running but whose result is never sent is not visible to a black box
(docs/protocol.md, *Cancels*). The window is long enough to see a turn that
ran on: the bound plus the turn's tools run one after another.
"""

from __future__ import annotations

from typing import Any

from mock.markers import Plan

from ..wire.client import Turn
from .verdict import TurnVerdict, _verdict

# How long an agent has, after the cancel was sent, to stop asking the LLM and
# to drop the request it has open (docs/protocol.md, *Cancels*): generous for
# a framework that cancels a task (pydantic-ai stops within a few ms), far
# below the tool time of the default cancel marker (!slowbatch2:2000:0).
CANCEL_BOUND_S = 1.0
# the mock's record of a request whose client went away (mock/server.py)
CLIENT_GONE = 499


def cancel_window_s(plan: Plan, bound_s: float = CANCEL_BOUND_S) -> float:
    """Seconds after the cancel to watch for the turn's LLM requests: the
    bound, plus the tools of the turn run serially (an agent that ignored the
    cancel sends their results by then)."""
    return bound_s + plan.serial_ms / 1000.0 + 0.25


def ran_on(t_cancel: float, entry: dict[str, Any] | None, bound_s: float = CANCEL_BOUND_S) -> bool:
    """An LLM request of the turn arrived past the bound: the verdict can be
    given without watching the rest of the window."""
    return any((r.get("arrival") or 0) > t_cancel + bound_s for r in (entry or {}).get("records") or ())


def cancel_failures(t_cancel: float, entry: dict[str, Any] | None, bound_s: float, t_end: float) -> list[str]:
    """What the mock's record of the turn says against the cancel sent at
    ``t_cancel`` (monotonic seconds, the mock's clock too), watched until
    ``t_end``. Empty: the cancel was honoured."""
    if entry is None:
        return ["cancel_unverified (the mock's record of the turn could not be read)"]
    if entry.get("absent"):
        return ["cancel_unverified (the mock never saw the turn: no LLM request to cancel)"]
    late_by = t_cancel + bound_s
    for k, r in enumerate(entry.get("records") or ()):
        arrival, last, status = r.get("arrival"), r.get("last_byte"), r.get("status") or 0
        if arrival is None:
            continue
        if arrival > late_by:
            return [f"cancel_ignored (LLM request {k + 1} of the turn arrived {(arrival - t_cancel) * 1000:.0f} ms after the cancel, "
                    f"past the bound of {bound_s * 1000:.0f} ms: the agent ran on)"]
        if arrival > t_cancel:
            continue  # asked within the bound: what was already on its way
        if status == CLIENT_GONE or (last is not None and last <= t_cancel):
            continue  # aborted, or served before the cancel
        if last is not None and last > late_by and status != CLIENT_GONE:
            return [f"cancel_ignored (the LLM request in flight at the cancel was served to its end {(last - t_cancel) * 1000:.0f} ms after it: "
                    f"the agent did not abort it within {bound_s * 1000:.0f} ms)"]
        if last is None and status == 0:
            return [f"cancel_ignored (the LLM request in flight at the cancel was still open {(t_end - t_cancel) * 1000:.0f} ms after it)"]
    return []


def judge_cancel(turn: Turn, plan: Plan, entry: dict[str, Any] | None, *, bound_s: float = CANCEL_BOUND_S, t_end: float) -> TurnVerdict:
    """The verdict of a turn kstress cancelled (``turn.cancel["t"]``): passed
    when the mock saw the agent stop within the bound."""
    assert turn.cancel is not None and turn.cancel.get("t") is not None
    failures = cancel_failures(turn.cancel["t"], entry, bound_s, t_end)
    return _verdict(turn, plan, failures, {"cancel_sent": True, "cancel_answer": turn.cancel.get("answer")})
