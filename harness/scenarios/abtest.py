"""abtest: the concurrency A/B. For each N, `!slowbatchN` (A: may run
concurrently) against `!serialbatchN` (B: the same sleeps plus one
non-parallel-safe call, so it must run serially), in interleaved rounds
(ABBA: A B, B A, A B, ... cancels drift).

The measured time is the kernel's tool phase (`tool_ms` of the mock's verdict
line: end of the tool-call stream to the arrival of the results). A round
whose verdict failed is invalid -- reported, never a sample. When the serial
control did not run serially (observed overlap > 1) the speedup is refused.
speedup = median(serial) / median(concurrent), bounded by N (exactly: by the
plan's sum/max of sleeps, reported as `ideal`; abtest uses equal sleeps,
STEP 0, so the bound is N).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from mock.markers import MS_MAX, build_plan

from ..errors import UsageError
from ..results import Check, RunDir, read_jsonl
from ..stats import bootstrap_median, bootstrap_ratio, stability_warnings
from .common import Access, Outcome, Progress, RunResult, Target, Watch, check_batch_sizes, run_scenario
from .seq import Sequential

MIN_VALID = 3


@dataclass(frozen=True)
class AbtestSettings:
    ns: tuple[int, ...] = (2, 4, 8, 12)
    rounds: int = 6
    tool_ms: int | None = None  # None: the mock's --tool-ms
    expect_concurrency: bool = True
    timeout_s: float = 120.0
    out: Path = Path("runs")
    quiet: bool = False

    def __post_init__(self) -> None:
        check_batch_sizes(self.ns, "2,4,8,12")
        if not MIN_VALID <= self.rounds <= 1000:
            raise UsageError(f"--rounds {self.rounds} is invalid: use {MIN_VALID} to 1000 (a median with a confidence interval needs at least {MIN_VALID} valid rounds per arm)")
        if self.tool_ms is not None and not 1 <= self.tool_ms <= MS_MAX:
            raise UsageError(f"--tool-ms {self.tool_ms} is invalid: use 1 to {MS_MAX}")


def markers_for(n: int, tool_ms: int) -> tuple[str, str]:
    """Equal sleeps (STEP 0): the speedup's bound is then exactly N."""
    return f"!slowbatch{n}:{tool_ms}:0", f"!serialbatch{n}:{tool_ms}:0"


def summarize_abtest(rows: list[dict[str, Any]], ns: tuple[int, ...], rounds: int, tool_ms: int) -> dict[str, Any]:
    table = []
    for n in ns:
        rs = [r for r in rows if r.get("kind") == "abtest" and r.get("n") == n]
        arms = {a: [r for r in rs if r.get("arm") == a] for a in ("concurrent", "serial")}
        valid = {a: [r for r in arms[a] if r.get("passed") and r.get("tool_ms") is not None] for a in arms}
        samples = {a: [r["tool_ms"] / 1000 for r in valid[a]] for a in arms}
        conc_ov = [r["overlap"] for r in valid["concurrent"] if r.get("overlap") is not None]
        serial_ov_all = [r["overlap"] for r in arms["serial"] if r.get("overlap") is not None]
        overlap_serial = max(serial_ov_all) if serial_ov_all else None
        invalid = Counter(f"{r['arm']}: {r['failures'][0]}" for r in rs if not r.get("passed") and r.get("failures"))
        reasons = []
        if overlap_serial is not None and overlap_serial > 1:
            reasons.append(f"serial control ran concurrently (observed overlap {overlap_serial}): speedup refused")
        for a in arms:
            if len(samples[a]) < MIN_VALID:
                reasons.append(f"only {len(samples[a])} valid {a} round(s) of {len(arms[a])}")
        ok = not reasons
        speedup, lo, hi = bootstrap_ratio(samples["serial"], samples["concurrent"]) if ok else (None, None, None)
        cm, sm = bootstrap_median(samples["concurrent"]), bootstrap_median(samples["serial"])
        plan = build_plan(f"{markers_for(n, tool_ms)[0]} #x")
        table.append(
            {
                "n": n,
                "concurrent_median_s": cm.median if ok else None,
                "serial_median_s": sm.median if ok else None,
                "concurrent_ci_s": [cm.low, cm.high] if ok else None,
                "serial_ci_s": [sm.low, sm.high] if ok else None,
                "speedup": speedup,
                "speedup_ci": [lo, hi] if speedup is not None else None,
                "ideal": round(plan.ideal_speedup, 3),
                "overlap_concurrent": statistics.median(conc_ov) if conc_ov else None,
                "overlap_serial": overlap_serial,
                "valid": ok,
                "valid_rounds": {a: len(samples[a]) for a in arms},
                "invalid_rounds": dict(invalid),
                "reasons": reasons,
                "warnings": [f"concurrent: {w}" for w in stability_warnings(samples["concurrent"])]
                + [f"serial: {w}" for w in stability_warnings(samples["serial"])],
            }
        )
    return {"rows": table, "tool_ms": tool_ms, "rounds": rounds, "measure": "tool phase (tool_ms of the verdict line)"}


def abtest_checks(summary: dict[str, Any], expect_concurrency: bool) -> list[Check]:
    checks = []
    for r in summary["rows"]:
        name = f"N={r['n']}: valid measurement"
        checks.append(Check(name, r["valid"], "; ".join(r["reasons"]) or f"speedup {r['speedup']:.2f}x (ideal {r['ideal']:.2f}x)"))
        if expect_concurrency and r["valid"] and r["n"] >= 2:
            ov = r["overlap_concurrent"]
            conc = ov is not None and ov >= 2
            checks.append(
                Check(
                    f"N={r['n']}: parallel-safe batch ran concurrently",
                    conc,
                    f"observed overlap {ov}, speedup {r['speedup']:.2f}x"
                    + ("" if conc else " — the kernel ran a parallel-safe batch serially"),
                )
            )
    return checks


async def run_abtest(settings: AbtestSettings, access: Access) -> RunResult:
    target = Target(access)

    async def body(rundir: RunDir, watch: Watch) -> Outcome:
        tool_ms = settings.tool_ms or target.tool_ms
        progress = Progress(len(settings.ns) * settings.rounds * 2, settings.quiet)
        seq = Sequential(target, rundir, watch, progress, settings.timeout_s)
        progress.start()
        try:
            for n in settings.ns:
                a, b = markers_for(n, tool_ms)
                for rnd in range(settings.rounds):
                    order = ((a, "concurrent"), (b, "serial"))
                    if rnd % 2:
                        order = order[::-1]  # ABBA
                    for marker, arm in order:
                        await seq.turn(marker, kind="abtest", n=n, round=rnd, arm=arm)
        finally:
            await progress.stop()
            await seq.aclose()
        summary = summarize_abtest(read_jsonl(rundir.path / "turns.jsonl"), settings.ns, settings.rounds, tool_ms)
        extras = {"orphans": await target.stop_and_check_orphans()}
        return Outcome(summary, abtest_checks(summary, settings.expect_concurrency), _settings_json(settings, tool_ms), extras)

    from ..report import render_abtest

    return await run_scenario("abtest", settings.out, [target], body, render_abtest, _settings_json(settings, settings.tool_ms))


def _settings_json(s: AbtestSettings, tool_ms: int | None) -> dict[str, Any]:
    d = asdict(s)
    d["out"] = str(s.out)
    d["tool_ms_effective"] = tool_ms
    return d
