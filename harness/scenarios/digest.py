"""A load run's turns, aggregated as they end (issue 25, item 6).

A scenario with a digest (stress) keeps no row in memory: the runner feeds
each row to the digest (harness/scenarios/runner.py: RowSink) and takes the
summary, the thresholds and the charts' rows from it at the end. `kstress
report` feeds the rows it re-reads from turns.jsonl to a new digest, so the
run and the report compute through the same code and always agree.

Memory is bounded per series, not per turn (harness/results/aggregate.py):
exact percentiles up to 20,000 samples per series and 1% relative error past
them, counters, the first example of each failure, a uniform sample of rows
for the charts.
"""

from __future__ import annotations

import bisect
from typing import Any, Iterable

from ..load.shapes import parse_stages
from ..results.aggregate import Ends, Level, Quantiles, Sample
from ..results.thresholds import add_end, evaluate_levels, parse_thresholds
from .common import level_of

LOAD_KINDS = ("load", "interrupt")
_NUM = (int, float)  # exact classes, checked once a turn per anatomy part
ANATOMY_PARTS = ("pre_llm_s", "llm_s", "tool_s", "between_s", "post_llm_s", "overhead_s")
# what a chart draws of a row: the sample keeps these fields only
CHART_FIELDS = ("t_rel", "latency_s", "passed", "marker", "kind", "warmup")


class LoadDigest:
    """The aggregates of stress's summary (and of its thresholds and charts),
    over the rows of ``KINDS``."""

    KINDS = LOAD_KINDS

    def __init__(self, settings: dict[str, Any], extras: dict[str, Any]) -> None:
        self.settings = settings or {}
        self.extras = extras if extras is not None else {}  # the run's own dict: load_t0_rel is set once the load starts
        self.rows = 0
        self.inputs = Level(concurrency=True)
        self.first = Quantiles()
        self.sched = Quantiles()
        self.by_marker: dict[str, Quantiles] = {}
        self.ends = Ends()
        self.warm = Level()
        self.interrupts = Level()
        self.cancels = {"sent": 0, "honoured": 0, "ignored": 0, "answers": {}}
        self.anatomy: dict[str, dict[str, Any]] = {}
        self.kernels: dict[str, Level] = {}
        texts = self.settings.get("stages") or ()
        self.stages = parse_stages(texts, integer=self.settings.get("rate") is None) if texts else ()
        bounds, at = [], 0.0
        for st in self.stages:
            at += st.duration_s
            bounds.append(at)
        self.stage_ends = bounds[:-1]  # the last stage takes every later turn
        self.stage_levels = [Level() for _ in self.stages]
        self.limits = parse_thresholds(self.settings.get("thresholds") or ())
        self.limit_levels = [t.level() for t in self.limits]
        self.sample = Sample()

    def feed(self, rows: Iterable[dict[str, Any]]) -> "LoadDigest":
        for r in rows:
            self.add(r)
        return self

    def add(self, r: dict[str, Any]) -> None:
        self.rows += 1
        kind = r.get("kind")
        if kind != "probe":
            self.sample.add({k: r[k] for k in CHART_FIELDS if k in r})
        if kind not in self.KINDS:
            return
        if r.get("warmup"):
            self.warm.add(r)
            self._stage(r)
            return
        passed = r.get("passed")
        self.inputs.add(r)
        for t, lvl in zip(self.limits, self.limit_levels):
            if t.selects(r):
                lvl.add(r)
        if passed and isinstance(r.get("latency_s"), (int, float)):
            # the run's own series is inputs.lat: only the marker's is added here
            m = r.get("marker") or "text"
            q = self.by_marker.get(m)
            if q is None:
                q = self.by_marker[m] = Quantiles()
            q.add(r["latency_s"])
        add_end(self.ends, r)
        if passed:
            if r.get("first_frame_s") is not None:
                self.first.add(r["first_frame_s"])
            if r.get("scheduled_s") is not None:
                self.sched.add(r["scheduled_s"])
            a = r.get("anatomy")
            if isinstance(a, dict):
                g = self.anatomy.get(r.get("marker") or "text")
                if g is None:
                    g = self.anatomy[r.get("marker") or "text"] = {"n": 0, **{k: Quantiles() for k in ANATOMY_PARTS}}
                g["n"] += 1
                for k in ANATOMY_PARTS:
                    v = a.get(k)
                    if v.__class__ in _NUM:
                        g[k].add(v)
        if kind == "interrupt":
            self.interrupts.add(r)
            if r.get("cancel_sent"):
                c = self.cancels
                c["sent"] += 1
                c["honoured"] += bool(passed)
                fs = r.get("failures")
                c["ignored"] += bool(not passed and fs and fs[0].split(" ", 1)[0] == "cancel_ignored")
                if r.get("cancel_answer") is not None:
                    ans = str(r["cancel_answer"])
                    c["answers"][ans] = c["answers"].get(ans, 0) + 1
        k = r.get("kernel")
        if k is not None:
            lvl = self.kernels.get(k)
            if lvl is None:
                lvl = self.kernels[k] = Level(concurrency=True)
            lvl.add(r)
        self._stage(r)

    def _stage(self, r: dict[str, Any]) -> None:
        if not self.stages or r.get("warmup") or not isinstance(r.get("t_rel"), (int, float)):
            return
        at = r["t_rel"] - (self.extras.get("load_t0_rel") or 0.0)
        if at < 0:
            return
        self.stage_levels[bisect.bisect_right(self.stage_ends, at)].add(r)

    def stage_table(self) -> list[dict[str, Any]] | None:
        """One row per --stage: the turns sent while it ran (warm-up ones
        excluded), with the level it ramped to. None without stages."""
        if not self.stages:
            return None
        out, start = [], 0.0
        for i, (st, lvl) in enumerate(zip(self.stages, self.stage_levels)):
            end = start + st.duration_s
            out.append({"stage": i + 1, "spec": self.settings["stages"][i], "from_s": round(start, 3), "to_s": round(end, 3), "target": st.target,
                        **level_of(lvl)})
            start = end
        return out

    def thresholds(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in evaluate_levels(self.limits, self.limit_levels)]

    def anatomy_table(self) -> dict[str, Any]:
        out = {}
        for marker, g in sorted(self.anatomy.items()):
            out[marker] = {"n": g["n"]}
            for k in ANATOMY_PARTS:
                q = g[k]
                out[marker][k] = {"p50": q.percentile(50), "p95": q.percentile(95)}
        return out

    def cancel_summary(self) -> dict[str, Any]:
        c = self.cancels
        if not c["sent"]:
            return {}
        return {"cancels": {**c, "answers": dict(c["answers"])}}

    def chart(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        """The rows the charts draw and what they need to know of them: every
        row of a short run; a uniform sample of a long one."""
        s = self.sample
        return s.rows, ({} if s.complete else {"sampled": {"rows": len(s.rows), "of": s.seen}})
