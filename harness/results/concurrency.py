"""Load truth: how many turns the agent actually worked on at once, against
how many the harness had in flight (issue 23, item 5).

An agent that queues turns behind one worker still accepts every connection:
the harness sees C turns in flight and a latency that grows with C, which reads
as "slow" rather than "serial". The mock sees the difference. A turn is *at the
agent* from its first LLM request's arrival to its last LLM response's last
byte (the turn anatomy, harness/judge/verdict.py: ``t_rel + pre_llm_s`` to
``t_rel + latency_s - post_llm_s``, one clock); it is *in flight* from send to
done. Over the measured window (first send to last end):

    mean  = the spans' summed length / the window (time-weighted turns at once)
    peak  = the most spans open at one instant (a sweep of the span ends)
    ratio = mean at the agent / mean in flight

The agent-side span is a lower bound of the agent's work: what it does before
its first request and after its last is not seen, so an agent whose turns are
mostly outside the LLM shows a low ratio however concurrent it is (the anatomy
table's "before the LLM" column tells the two apart: a serialising agent's
grows with the load, its queue; docs/metrics.md).
"""

from __future__ import annotations

import math
from typing import Any, Iterable

# both ratios under this -- the means' and the peaks' -- is the finding
# `turns_serialised`: one turn at a time under 2 connections is 0.5 on each,
# under 4 0.25. The mean alone is not enough: pydantic-ai on AG-UI overlaps all
# four turns of --conns 4 (peak 4 of 4) yet spends half of each outside its LLM
# call on a loaded host, a mean ratio of 0.52; its peak clears it.
SERIAL_RATIO = 0.6
# below this many turns in flight (mean) there is nothing to serialise
MIN_IN_FLIGHT = 1.5
FINDING = "turns_serialised"

Span = tuple[float, float]
_NUM = (int, float)  # exact classes: a bool is no number here (_num)
SWEEP_FLUSH = 8_192  # events buffered before a sweep moves its watermark


def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def client_span(row: dict[str, Any]) -> Span | None:
    """Send -> done on the run's clock; None for a turn with no end (a connection failure)."""
    t, lat = row.get("t_rel"), row.get("latency_s")
    if not (_num(t) and _num(lat)):
        return None
    return (float(t), float(t) + float(lat))


def agent_span(row: dict[str, Any]) -> Span | None:
    """First LLM request -> last LLM byte on the run's clock, from the turn's
    anatomy; None without one (no mock, or the mock saw no complete request)."""
    a = row.get("anatomy")
    c = client_span(row)
    if not isinstance(a, dict) or c is None or not (_num(a.get("pre_llm_s")) and _num(a.get("post_llm_s"))):
        return None
    start, end = c[0] + a["pre_llm_s"], c[1] - a["post_llm_s"]
    # the anatomy is rounded to the microsecond: a span cannot end before it starts
    return (start, max(start, end))


def overlap(spans: Iterable[Span], window: float) -> dict[str, Any]:
    """Time-weighted mean and peak of the spans open at once over ``window`` seconds."""
    sw = Sweep()
    for a, b in spans:
        sw.add(a, b)
    return sw.result(window)


def achieved(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """``{agent, in_flight, ratio, turns, seen, window_s}`` over the rows' own
    window; ``agent`` and ``ratio`` are None when no row carries an anatomy
    (``why`` says so). None when no row has a send and an end. Each side is
    the time-weighted mean of its spans open at once over the window, and
    the most open at one instant (harness/results/aggregate.py: Sweep)."""
    c = Concurrency()
    for r in rows:
        c.add(r)
    return c.achieved()


def serialised(c: dict[str, Any] | None) -> bool:
    """The finding: well under the turns in flight ran at the agent at once,
    on average and at the busiest instant."""
    if not c or c.get("ratio") is None:
        return False
    fl, at = c["in_flight"], c["agent"]
    return (fl.get("mean") or 0) >= MIN_IN_FLIGHT and c["ratio"] < SERIAL_RATIO and at["peak"] < SERIAL_RATIO * fl["peak"]


def summary(rows: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """``achieved`` with the finding's name set when the agent ran well under
    what was in flight (stress's summary, each findmax stage)."""
    c = achieved(rows)
    if c is not None:
        c["finding"] = FINDING if serialised(c) else None
    return c


def line(c: dict[str, Any] | None) -> str:
    """``concurrency achieved: 1.0 at the agent of 4.0 in flight (25%); peak 1 of 4``."""
    if not c:
        return "concurrency achieved: not measured (no turn ended)"
    fl = c["in_flight"]
    if c.get("agent") is None:
        return f"concurrency achieved: not measured at the agent ({c.get('why')}); {fl['mean']:.1f} in flight"
    at = c["agent"]
    seen = "" if c["seen"] == c["turns"] else f"; {c['seen']} of {c['turns']} turns seen by the mock"
    ratio = f" ({c['ratio']:.0%})" if c.get("ratio") is not None else ""
    return f"concurrency achieved: {at['mean']:.1f} at the agent of {fl['mean']:.1f} in flight{ratio}; peak {at['peak']} of {fl['peak']}{seen}"


def finding_text(c: dict[str, Any]) -> str:
    return (f"{FINDING}: the agent worked on {c['agent']['mean']:.1f} turns at once while {c['in_flight']['mean']:.1f} were in flight "
            f"({c['ratio']:.0%}), and on {c['agent']['peak']} at most while {c['in_flight']['peak']} were (both under {SERIAL_RATIO:.0%}): "
            "it queues turns (a worker that runs one task at a time, or a few), which shows as 'before the LLM' growing with the load")


# --- streaming: a run's concurrency without its rows (issue 25, item 6) --------------


class Sweep:
    """The most spans open at one instant, and their summed length."""

    __slots__ = ("n", "total", "peak", "late", "_buf", "_cur", "_wm", "_max_end", "_max_len", "_kept")

    def __init__(self) -> None:
        self.n = 0
        self.total = 0.0
        self.peak = 0
        self.late = 0
        self._buf: list[tuple[float, int]] = []
        self._cur = 0
        self._wm = -math.inf
        self._max_end = -math.inf
        self._max_len = 0.0
        self._kept = 0

    def add(self, a: float, b: float) -> None:
        self.n += 1
        if not b > a:  # a zero-length span holds nothing open (concurrency.overlap)
            return
        self.total += b - a
        if a < self._wm:
            self.late += 1
            if b <= self._wm:
                return
            a = self._wm
        self._buf += ((a, 1), (b, -1))
        if b > self._max_end:
            self._max_end = b
        if b - a > self._max_len:
            self._max_len = b - a
        if len(self._buf) > self._kept + SWEEP_FLUSH:
            # a span arrives when it ends: one that starts before the newest
            # end minus twice the longest span seen has (nearly) never come yet
            self._flush(self._max_end - max(1.0, 2 * self._max_len))

    def _flush(self, wm: float) -> None:
        self._buf.sort()  # at one instant an end (-1) sorts before a start: touching spans do not overlap
        i, cur, peak = 0, self._cur, self.peak
        for t, d in self._buf:
            if t >= wm:
                break
            cur += d
            if cur > peak:
                peak = cur
            i += 1
        del self._buf[:i]
        self._cur, self.peak, self._kept = cur, peak, len(self._buf)
        self._wm = max(self._wm, wm)

    def result(self, window: float) -> dict[str, Any]:
        """concurrency.overlap's answer over ``window`` seconds."""
        self._flush(math.inf)
        out: dict[str, Any] = {"mean": round(self.total / window, 3) if window > 0 else None, "peak": self.peak}
        if self.late:
            out["late"] = self.late
        return out


class Concurrency:
    """concurrency.achieved over rows fed one at a time."""

    __slots__ = ("client", "agent", "lo", "hi", "turn_s")

    def __init__(self) -> None:
        self.client = Sweep()
        self.agent = Sweep()
        self.lo = math.inf
        self.hi = -math.inf
        self.turn_s = 0.0

    def add(self, row: dict[str, Any]) -> None:
        # client_span and agent_span inlined: this runs once per turn of a run
        t, lat = row.get("t_rel"), row.get("latency_s")
        if t.__class__ not in _NUM or lat.__class__ not in _NUM:
            return
        a, b = float(t), float(t) + float(lat)
        self.client.add(a, b)
        if a < self.lo:
            self.lo = a
        if b > self.hi:
            self.hi = b
        an = row.get("anatomy")
        if an.__class__ is dict:
            pre, post = an.get("pre_llm_s"), an.get("post_llm_s")
            if pre.__class__ in _NUM and post.__class__ in _NUM:
                start = a + pre
                end = max(start, b - post)
                self.agent.add(start, end)
                self.turn_s += end - start

    def achieved(self) -> dict[str, Any] | None:
        if not self.client.n:
            return None
        window = self.hi - self.lo
        fl = self.client.result(window)
        out: dict[str, Any] = {"in_flight": fl, "agent": None, "ratio": None, "turns": self.client.n, "seen": self.agent.n, "window_s": round(window, 3)}
        if not self.agent.n:
            out["why"] = "no turn carries the mock's anatomy (a run without --mock, or the mock saw no complete LLM request)"
            return out
        at = self.agent.result(window)
        at["turn_s"] = round(self.turn_s / self.agent.n, 6)
        out["agent"] = at
        if at["mean"] is not None and fl["mean"]:
            out["ratio"] = round(at["mean"] / fl["mean"], 3)
        return out

    def summary(self) -> dict[str, Any] | None:
        c = self.achieved()
        if c is not None:
            c["finding"] = FINDING if serialised(c) else None
        return c
