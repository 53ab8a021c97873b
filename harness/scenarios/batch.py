"""batch: `!batchN`, `!mixedN`, `!slowbatchN` for N in a list, every turn
fully verified; mixed batches must show observed overlap 1 (they hold a
non-parallel-safe call); slow batches' overlap is reported."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .options import check_timeouts, connect_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, fmt_ms, fmt_pct, header, md_text
from ..results.comparison import SHAPE, CompareSpec, RunPair, by_marker, passed_latency, sample_row
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario
from ..sandbox.sut import Access, Target
from ..judge.verdict import SCHEDULE_FAILURES
from .common import check_batch_sizes, ints
from .seq import Sequential

KINDS = ("batch", "mixed", "slowbatch")


def _kinds(value: str) -> tuple[str, ...]:
    kinds = tuple(k.strip() for k in value.split(","))
    if any(not k for k in kinds):
        raise UsageError(f"--kinds {value!r} has an empty item: give one or more of {', '.join(KINDS)}, comma-separated")
    return kinds


@dataclass(frozen=True)
class BatchSettings:
    ns: tuple[int, ...] = opt((2, 4, 8), "--n", str, "Batch sizes.", parse=ints, shown="2,4,8")
    kinds: tuple[str, ...] = opt(KINDS, "--kinds", str, "Which batch markers.", parse=_kinds, shown="batch,mixed,slowbatch")
    rounds: int = opt(3, "--rounds", int, "Turns per marker.")
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        check_batch_sizes(self.ns, "2,4,8")
        if not self.kinds:
            raise UsageError(f"--kinds is empty: give one or more of {', '.join(KINDS)}")
        for n in self.ns:
            if n < 2 and "mixed" in self.kinds:
                raise UsageError(f"--n {n}: a mixed batch needs N >= 2 (drop mixed from --kinds or use N >= 2)")
        for k in self.kinds:
            if k not in KINDS:
                raise UsageError(f"--kinds {k!r} is unknown: use {', '.join(KINDS)}")
        if not 1 <= self.rounds <= 1000:
            raise UsageError(f"--rounds {self.rounds} is invalid: use 1 to 1000")


def summarize_batch(rows: list[dict[str, Any]], settings: dict[str, Any] | None = None, extras: dict[str, Any] | None = None) -> dict[str, Any]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("kind") == "batch":
            groups.setdefault((r["batch_kind"], r["n"]), []).append(r)
    table = []
    for (kind, n), rs in sorted(groups.items(), key=lambda kv: (KINDS.index(kv[0][0]) if kv[0][0] in KINDS else 9, kv[0][1])):
        ok = [r for r in rs if r.get("passed")]
        overlaps = [r["overlap"] for r in rs if r.get("overlap") is not None]
        tool = [r["tool_ms"] / 1000 for r in ok if r.get("tool_ms") is not None]
        lat = [r["latency_s"] for r in ok if r.get("latency_s") is not None]
        table.append(
            {
                "kind": kind,
                "n": n,
                "marker": rs[0].get("marker"),
                "turns": len(rs),
                "passed": len(ok),
                "failures": dict(Counter(r["failures"][0] for r in rs if r.get("failures"))),
                "overlap_min": min(overlaps) if overlaps else None,
                "overlap_max": max(overlaps) if overlaps else None,
                "tool_median_s": statistics.median(tool) if tool else None,
                "latency_median_s": statistics.median(lat) if lat else None,
                # the schedule the contract promises, and how it was kept
                "schedule_failures": sum(1 for r in rs if any(f.split(" ", 1)[0] in SCHEDULE_FAILURES for f in r.get("failures") or ())),
                "schedule_example": next((f for r in rs for f in r.get("failures") or () if f.split(" ", 1)[0] in SCHEDULE_FAILURES), None),
                "concurrency_median": statistics.median(cc) if (cc := [r["concurrency"] for r in rs if r.get("concurrency") is not None]) else None,
                "stagger_max_ms": max((r["stagger_ms"] for r in rs if r.get("stagger_ms") is not None), default=None),
            }
        )
    attempted = sum(r["turns"] for r in table)
    passed = sum(r["passed"] for r in table)
    return {"attempted": attempted, "passed": passed, "pass_rate": passed / attempted if attempted else None, "rows": table,
            "contract": (extras or {}).get("contract")}


def batch_checks(summary: dict[str, Any], settings: dict[str, Any] | None = None) -> list[Check]:
    checks = [Check("every batch turn passed its verdict", summary["attempted"] > 0 and summary["passed"] == summary["attempted"], f"{summary['passed']}/{summary['attempted']} passed")]
    mixed = [r for r in summary["rows"] if r["kind"] == "mixed"]
    if mixed:
        rule = (summary.get("contract") or {}).get("batch", "whole-batch")
        bad = [r for r in mixed if r.get("schedule_failures")]
        unseen = [r for r in mixed if r["overlap_max"] is None]
        if rule in ("whole-batch", "serial"):
            name = "mixed batches ran serially (observed overlap 1)"
        elif rule == "barrier":
            name = "mixed batches ran as barriers (the unsafe call alone, between the others)"
        else:
            name = "mixed batches ran concurrently (contract batch=parallel)"
        checks.append(
            Check(
                name,
                not bad and not unseen,
                "; ".join(f"{r['marker']}: {r['schedule_example']}" for r in bad)
                or ("; ".join(f"{r['marker']}: no timestamps (tools did not run)" for r in unseen) if unseen else f"as contract batch={rule} says, everywhere"),
            )
        )
    return checks


async def run_batch(settings: BatchSettings, access: Access) -> RunResult:
    target = Target(access)

    async def body(run: Run) -> None:
        run.extras["contract"] = target.contract.to_json()
        seq = Sequential(run, target, settings.timeout_s, settings.connect_timeout_s)
        try:
            for rnd in range(settings.rounds):
                for n in settings.ns:
                    for kind in settings.kinds:
                        await seq.turn(f"!{kind}{n}", kind="batch", batch_kind=kind, n=n, round=rnd)
        finally:
            await seq.aclose()

    total = len(settings.ns) * len(settings.kinds) * settings.rounds
    return await run_scenario(SCENARIO, settings, [target], body, total=total)


def render_batch(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    out = header(doc, "batch")
    out += [
        f"kinds {', '.join(st.get('kinds', []))} for N in {', '.join(map(str, st.get('ns', [])))}, {st.get('rounds')} round(s) each, one turn at a time",
        "",
        f"{s.get('passed')}/{s.get('attempted')} turns passed ({fmt_pct(s.get('pass_rate'))})",
        "",
        "| marker | turns | passed | overlap (min..max) | tool phase (median) | turn (median) | failures |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in s.get("rows", []):
        ov = "-" if r["overlap_min"] is None else (f"{r['overlap_min']}" if r["overlap_min"] == r["overlap_max"] else f"{r['overlap_min']}..{r['overlap_max']}")
        fails = md_text(", ".join(f"{k} x{v}" for k, v in r["failures"].items()) or "-")
        out.append(f"| `{r['marker']}` | {r['turns']} | {r['passed']} | {ov} | {fmt_ms(r['tool_median_s'])} | {fmt_ms(r['latency_median_s'])} | {fails} |")
    out.append("")
    out.append("Overlap is the peak number of timed tools running at once, from the KST-S/KST-E timestamps the tools echoed; `!mixedN` must show 1.")
    out.append("")
    out += checks_section(doc)
    return "\n".join(out)


def compare_rows(pair: RunPair, s: dict[str, Any]) -> list[dict[str, Any]]:
    """`kstress compare` of two batch runs, after the pass rate: per marker,
    the tool phase and the latency of the passed turns."""
    rows = []
    bo, bn = by_marker(pair.old), by_marker(pair.new)
    for m in sorted(set(bo) | set(bn)):
        ro, rn = bo.get(m, []), bn.get(m, [])
        tool = {v: [r["tool_ms"] / 1000 for r in rs if r.get("passed") and r.get("tool_ms") is not None] for v, rs in (("old", ro), ("new", rn))}
        if tool["old"] or tool["new"]:
            rows.append(sample_row(f"tool phase {m}", "passed turns, lower is better", "s", tool, s, higher_is_better=False))
        rows.append(sample_row(f"latency {m}", "passed turns, lower is better", "s", {"old": passed_latency(ro), "new": passed_latency(rn)}, s,
                               higher_is_better=False))
    return rows


SCENARIO = Scenario(
    name="batch",
    help="!batchN, !mixedN, !slowbatchN with full verification.",
    settings=BatchSettings,
    run=run_batch,
    summarize=summarize_batch,
    checks=batch_checks,
    render=render_batch,
    compare=CompareSpec(
        kinds=("batch",),
        must_match={"ns": "the batch sizes are the marker set", "kinds": "the batch kinds are the marker set",
                    "timeout_s": SHAPE["timeout_s"], "connect_timeout_s": SHAPE["connect_timeout_s"]},
        rows=compare_rows,
        contract_keys=("batch", "order"),
    ),
)
