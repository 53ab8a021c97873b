"""batch: `!batchN`, `!mixedN`, `!slowbatchN` for N in a list, every turn
fully verified; mixed batches must show observed overlap 1 (they hold a
non-parallel-safe call); slow batches' overlap is reported."""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..results import Check, RunDir, read_jsonl
from .common import Access, Outcome, Progress, RunResult, Target, Watch, check_batch_sizes, run_scenario
from .seq import Sequential

KINDS = ("batch", "mixed", "slowbatch")


@dataclass(frozen=True)
class BatchSettings:
    ns: tuple[int, ...] = (2, 4, 8)
    kinds: tuple[str, ...] = KINDS
    rounds: int = 3
    timeout_s: float = 60.0
    out: Path = Path("runs")
    quiet: bool = False

    def __post_init__(self) -> None:
        check_batch_sizes(self.ns, "2,4,8")
        for n in self.ns:
            if n < 2 and "mixed" in self.kinds:
                raise UsageError(f"--n {n}: a mixed batch needs N >= 2 (drop mixed from --kinds or use N >= 2)")
        for k in self.kinds:
            if k not in KINDS:
                raise UsageError(f"--kinds {k!r} is unknown: use {', '.join(KINDS)}")
        if not 1 <= self.rounds <= 1000:
            raise UsageError(f"--rounds {self.rounds} is invalid: use 1 to 1000")


def summarize_batch(rows: list[dict[str, Any]]) -> dict[str, Any]:
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
            }
        )
    attempted = sum(r["turns"] for r in table)
    passed = sum(r["passed"] for r in table)
    return {"attempted": attempted, "passed": passed, "pass_rate": passed / attempted if attempted else None, "rows": table}


def batch_checks(summary: dict[str, Any]) -> list[Check]:
    checks = [Check("every batch turn passed its verdict", summary["attempted"] > 0 and summary["passed"] == summary["attempted"], f"{summary['passed']}/{summary['attempted']} passed")]
    mixed = [r for r in summary["rows"] if r["kind"] == "mixed"]
    if mixed:
        bad = [r for r in mixed if r["overlap_max"] is not None and r["overlap_max"] > 1]
        unseen = [r for r in mixed if r["overlap_max"] is None]
        checks.append(
            Check(
                "mixed batches ran serially (observed overlap 1)",
                not bad and not unseen,
                "; ".join(f"{r['marker']}: overlap {r['overlap_max']}" for r in bad)
                or ("; ".join(f"{r['marker']}: no timestamps (tools did not run)" for r in unseen) if unseen else "overlap 1 everywhere"),
            )
        )
    return checks


async def run_batch(settings: BatchSettings, access: Access) -> RunResult:
    target = Target(access)

    async def body(rundir: RunDir, watch: Watch) -> Outcome:
        total = len(settings.ns) * len(settings.kinds) * settings.rounds
        progress = Progress(total, settings.quiet)
        seq = Sequential(target, rundir, watch, progress, settings.timeout_s)
        progress.start()
        try:
            for rnd in range(settings.rounds):
                for n in settings.ns:
                    for kind in settings.kinds:
                        await seq.turn(f"!{kind}{n}", kind="batch", batch_kind=kind, n=n, round=rnd)
        finally:
            await progress.stop()
            await seq.aclose()
        summary = summarize_batch(read_jsonl(rundir.path / "turns.jsonl"))
        extras: dict[str, Any] = {"orphans": await target.stop_and_check_orphans()}
        checks = batch_checks(summary)
        if extras["orphans"]:
            checks.append(Check("no orphans after the target exited", False, "; ".join(f"pid {o['pid']}: {o['cmdline']}" for o in extras["orphans"])))
        return Outcome(summary, checks, _settings_json(settings), extras)

    from ..report import render_batch

    return await run_scenario("batch", settings.out, [target], body, render_batch, _settings_json(settings))


def _settings_json(s: BatchSettings) -> dict[str, Any]:
    d = asdict(s)
    d["out"] = str(s.out)
    return d
