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

import shlex
import statistics
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from mock.markers import MS_MAX, build_plan

from ..judge.contract import Contract
from ..errors import UsageError
from .options import check_timeouts, connect_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, fmt_ms, fmt_num, header, md_text
from ..results.comparison import SHAPE, CompareSpec, RunPair, sample_row
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario, settings_json
from ..results.stats import bootstrap_median, bootstrap_ratio, stability_warnings
from ..sandbox.sut import Access, Target
from ..judge.verdict import is_timing_sample
from .common import check_batch_sizes, ints
from .seq import Sequential

MIN_VALID = 3
BASELINES = ("auto", "kernel", "control", "sum")


def resolve_baseline(baseline: str, contract: Contract) -> str:
    """The baseline a run uses; one that does not fit the contract is refused
    with the reason, never silently swapped."""
    if baseline == "auto":
        return "kernel" if contract.serial_control else "sum"
    if baseline == "kernel" and not contract.serial_control:
        raise UsageError(
            f"--baseline kernel: the kernel's own serial control (!serialbatchN: N sleeps and one not-parallel-safe call) is serial only "
            f"where the contract runs such a batch serially (batch=whole-batch or serial); this kernel declares batch={contract.batch}. "
            "Use --baseline sum, or --baseline control --control-args ARGS (its own sequential switch)"
        )
    return baseline


# a round whose tools all ran is a sample, even when their schedule broke the
# contract (the turn fails by that name, and the speedup shows it)
_sample = is_timing_sample


@dataclass(frozen=True)
class AbtestSettings:
    ns: tuple[int, ...] = opt((2, 4, 8, 12), "--n", str, "Batch sizes.", parse=ints, shown="2,4,8,12")
    rounds: int = opt(6, "--rounds", int, "Interleaved rounds per N.")
    tool_ms: int | None = opt(None, "--ab-tool-ms", int, "Sleep of each tool in the markers (default: the mock's --tool-ms).")
    expect_concurrency: bool = opt(True, "--no-expect-concurrency", bool, "Do not fail when a parallel-safe batch ran serially.")
    baseline: str = opt("auto", "--baseline", str, "The serial time to compare with: kernel (its !serialbatchN control, where the contract makes it serial), "
                        "control (the same binary launched again with --control-args), sum (the per-call durations of the same turn), "
                        "auto (kernel where the contract allows it, else sum).", choices=BASELINES)
    control_args: str | None = opt(None, "--control-args", str, "With --baseline control: the ARGS that make the binary sequential, e.g. '--sequential'.")
    timeout_s: float = opt(120.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        check_batch_sizes(self.ns, "2,4,8,12")
        if not MIN_VALID <= self.rounds <= 1000:
            raise UsageError(f"--rounds {self.rounds} is invalid: use {MIN_VALID} to 1000 (a median with a confidence interval needs at least {MIN_VALID} valid rounds per arm)")
        if self.tool_ms is not None and not 1 <= self.tool_ms <= MS_MAX:
            raise UsageError(f"--ab-tool-ms {self.tool_ms} is invalid: use 1 to {MS_MAX}")
        if self.baseline not in BASELINES:
            raise UsageError(f"--baseline {self.baseline!r} is unknown: use {', '.join(BASELINES)}")
        if (self.baseline == "control") != (self.control_args is not None):
            raise UsageError("--baseline control and --control-args go together: the control is the same binary launched with those ARGS (e.g. --control-args '--sequential')")
        if self.control_args is not None:
            try:
                shlex.split(self.control_args)
            except ValueError as exc:
                raise UsageError(f"--control-args {self.control_args!r}: {exc}; close the quote") from None

    def effective_tool_ms(self, targets: Sequence[Target]) -> int:
        return self.tool_ms or targets[0].tool_ms


def markers_for(n: int, tool_ms: int) -> tuple[str, str]:
    """Equal sleeps (STEP 0): the speedup's bound is then exactly N."""
    return f"!slowbatch{n}:{tool_ms}:0", f"!serialbatch{n}:{tool_ms}:0"


def summarize_run(rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    return summarize_abtest(rows, tuple(settings["ns"]), settings["rounds"], settings["tool_ms_effective"], settings.get("baseline_used") or "kernel")


def summarize_abtest(rows: list[dict[str, Any]], ns: tuple[int, ...], rounds: int, tool_ms: int, baseline: str = "kernel") -> dict[str, Any]:
    table = []
    for n in ns:
        rs = [r for r in rows if r.get("kind") == "abtest" and r.get("n") == n]
        arms = {a: [r for r in rs if r.get("arm") == a] for a in ("concurrent", "serial")}
        valid = {a: [r for r in arms[a] if _sample(r)] for a in arms}
        if baseline == "sum":
            # no control run: the serial time is what the same turn's calls took one after another
            # both from the tools' own timestamps: their summed durations over
            # the span they took together (the effective concurrency; it
            # leaves out the kernel's per-call overhead, which the kernel and
            # control baselines include)
            valid["serial"] = [r for r in valid["concurrent"] if r.get("tool_sum_ms") is not None and r.get("tool_span_ms")]
            samples = {"concurrent": [r["tool_span_ms"] / 1000 for r in valid["serial"]], "serial": [r["tool_sum_ms"] / 1000 for r in valid["serial"]]}
            arms["serial"] = arms["concurrent"]
        else:
            samples = {a: [r["tool_ms"] / 1000 for r in valid[a]] for a in arms}
        conc_ov = [r["overlap"] for r in valid["concurrent"] if r.get("overlap") is not None]
        serial_ov_all = [r["overlap"] for r in arms["serial"] if r.get("overlap") is not None] if baseline != "sum" else []
        overlap_serial = max(serial_ov_all) if serial_ov_all else None
        invalid = Counter(f"{r['arm']}: {r['failures'][0]}" for r in rs if not _sample(r) and r.get("failures"))
        reasons = []
        if overlap_serial is not None and overlap_serial > 1:
            what = "the control run" if baseline == "control" else "serial control"
            reasons.append(f"{what} ran concurrently (observed overlap {overlap_serial}): speedup refused")
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
    return {"rows": table, "tool_ms": tool_ms, "rounds": rounds, "measure": "tool phase (tool_ms of the verdict line)", "baseline": baseline,
            "serial_from": BASELINE_TEXT[baseline]}


BASELINE_TEXT = {
    "kernel": "the kernel's own serial control, !serialbatchN (the same sleeps plus one not-parallel-safe call)",
    "control": "the same binary launched a second time with --control-args, running !slowbatchN",
    "sum": "the sum of the per-call durations measured in the same concurrent turn, over the span of those calls (no control run)",
}


def abtest_checks(summary: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    # a kernel declaring batch=serial runs every batch one call at a time: ~1x is its promise
    expect_concurrency = settings.get("expect_concurrency", True) and settings.get("contract_batch") != "serial"
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
    target.prepare()
    baseline = resolve_baseline(settings.baseline, target.contract)
    targets = [target]
    control: Target | None = None
    if baseline == "control":
        if access.launch is None:
            raise UsageError("--baseline control launches the binary a second time: it needs --launch (and the target options)")
        ls = access.launch
        spec = replace(ls.target, extra_args=ls.target.extra_args + tuple(shlex.split(settings.control_args or "")), name=f"{ls.target.name} (control)")
        # the control promises one call at a time: it is judged by that
        control = Target(Access(launch=replace(ls, target=spec, contract_pairs=ls.contract_pairs + ("batch=serial",))), label="control")
        targets.append(control)

    async def body(run: Run) -> None:
        tool_ms = settings.effective_tool_ms([target])
        seq = Sequential(run, target, settings.timeout_s, settings.connect_timeout_s)
        ctl = Sequential(run, control, settings.timeout_s, settings.connect_timeout_s) if control is not None else None
        try:
            for n in settings.ns:
                a, b = markers_for(n, tool_ms)
                for rnd in range(settings.rounds):
                    if baseline == "sum":
                        await seq.turn(a, kind="abtest", n=n, round=rnd, arm="concurrent")
                        continue
                    # ABBA: A B, B A, ... between the arms (for control: between the sandboxes)
                    order = ((seq, a, "concurrent"), (ctl, a, "serial") if ctl is not None else (seq, b, "serial"))
                    if rnd % 2:
                        order = order[::-1]
                    for driver, marker, arm in order:
                        await driver.turn(marker, kind="abtest", n=n, round=rnd, arm=arm)
        finally:
            await seq.aclose()
            if ctl is not None:
                await ctl.aclose()

    per_n = settings.rounds * (1 if baseline == "sum" else 2)
    return await run_scenario(SCENARIO, settings, targets, body, total=len(settings.ns) * per_n)


def _settings_json(s: AbtestSettings, targets: Sequence[Target]) -> dict[str, Any]:
    d = settings_json(s)
    d["tool_ms_effective"] = s.effective_tool_ms(targets)
    contract = targets[0].contract if targets else None
    d["baseline_used"] = resolve_baseline(s.baseline, contract) if contract is not None else None
    d["contract_batch"] = contract.batch if contract is not None else None
    return d


def render_abtest(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    out = header(doc, "abtest")
    out += [
        f"`!slowbatchN` (concurrent) against {s.get('serial_from') or BASELINE_TEXT['kernel']} (baseline `{s.get('baseline', 'kernel')}`), "
        f"{st.get('rounds')} rounds" + (" interleaved (ABBA)" if s.get("baseline") != "sum" else "") + f", tools of {st.get('tool_ms_effective')} ms; "
        "time = the kernel's tool phase (tool_ms of the verdict line); medians with 95% bootstrap intervals.",
        "",
        "| N | concurrent | serial | speedup [95% CI] | ideal | overlap conc. | overlap serial | valid |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in s.get("rows", []):
        ci = r.get("speedup_ci")
        sp = "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and ci[0] is not None else "")
        valid = "yes" if r["valid"] else "NO: " + md_text("; ".join(r["reasons"]))
        out.append(
            f"| {r['n']} | {fmt_ms(r['concurrent_median_s'])} | {fmt_ms(r['serial_median_s'])} | {sp} | {r['ideal']:.2f}x | "
            f"{fmt_num(r['overlap_concurrent'], '{:g}')} | {fmt_num(r['overlap_serial'], '{:g}')} | {valid} |"
        )
    out.append("")
    warn = [f"N={r['n']}: {w}" for r in s.get("rows", []) for w in r.get("warnings", [])]
    inval = [f"N={r['n']}: {k} x{v}" for r in s.get("rows", []) for k, v in r.get("invalid_rounds", {}).items()]
    if inval:
        out += ["Invalid rounds (reported, never samples):", ""] + [f"- {md_text(x)}" for x in inval] + [""]
    if warn:
        out += ["Stability warnings:", ""] + [f"- {md_text(w)}" for w in warn] + [""]
    out += checks_section(doc)
    return "\n".join(out)


def speedup_rows(old: list[dict[str, Any]], new: list[dict[str, Any]], ns: list[int], baseline: str, s: dict[str, Any]) -> list[dict[str, Any]]:
    """Per N: the speedup, one sample per round (a round whose serial control
    overlapped is refused), and the concurrent arm's tool phase."""
    out = []
    for n in ns:
        samples, notes = {}, {}
        tool = {}
        for v, rows in (("old", old), ("new", new)):
            rs = [r for r in rows if r.get("kind") == "abtest" and r.get("n") == n]
            sp, bad = round_speedups(rs, baseline)
            samples[v] = sp
            if bad:
                notes[v] = f"unmeasurable: the serial control ran concurrently in {bad} round(s)"
            tool[v] = [r["tool_ms"] / 1000 for r in rs if r.get("arm") == "concurrent" and is_timing_sample(r)]
        row = sample_row(f"speedup N={n}", f"serial/concurrent tool phase per round (baseline {baseline}), higher is better", "x", samples, s, higher_is_better=True)
        for v, note in notes.items():
            if row.get(v) is not None:
                row[v], row[f"{v}_note"] = None, note
                row.update(verdict="worse" if v == "new" and "old" not in notes else "unmeasurable", p=None, change=None, reason=f"{v.upper()}: {note}")
        out.append(row)
        out.append(sample_row(f"tool phase N={n}", f"!slowbatch{n} tool phase, concurrent arm, lower is better", "s", tool, s, higher_is_better=False))
    return out


def round_speedups(rs: list[dict[str, Any]], baseline: str) -> tuple[list[float], int]:
    """One speedup per round (as cmp's concurrency dimension): serial over
    concurrent tool time of the same round, or, with baseline sum, a turn's
    summed call durations over their span. And the rounds whose serial
    control overlapped (its speedup is refused)."""
    if baseline == "sum":
        ok = [r for r in rs if r.get("arm") == "concurrent" and is_timing_sample(r) and r.get("tool_sum_ms") and r.get("tool_span_ms")]
        return [r["tool_sum_ms"] / r["tool_span_ms"] for r in ok], 0
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rs:
        if isinstance(r.get("round"), int):
            by_round.setdefault(r["round"], {})[r.get("arm", "")] = r
    out, bad = [], 0
    for arms in by_round.values():
        c, sr = arms.get("concurrent"), arms.get("serial")
        if sr is not None and sr.get("overlap") is not None and sr["overlap"] > 1:
            bad += 1
        if c and sr and is_timing_sample(c) and is_timing_sample(sr) and c["tool_ms"]:
            out.append(sr["tool_ms"] / c["tool_ms"])
    return out, bad


def compare_rows(pair: RunPair, s: dict[str, Any]) -> list[dict[str, Any]]:
    """`kstress compare` of two abtest runs, after the pass rate: per N, the
    speedup (one sample per round) and the concurrent arm's tool phase."""
    st = pair.old_run.doc.get("settings") or {}
    return speedup_rows(pair.old, pair.new, list(st.get("ns") or ()), st.get("baseline_used") or "kernel", s)


SCENARIO = Scenario(
    name="abtest",
    help="Concurrency speedup: !slowbatchN vs !serialbatchN, interleaved.",
    settings=AbtestSettings,
    run=run_abtest,
    summarize=summarize_run,
    checks=abtest_checks,
    render=render_abtest,
    to_json=_settings_json,
    compare=CompareSpec(
        kinds=("abtest",),
        must_match={"ns": "the batch sizes are the rows", "tool_ms_effective": "the tools' sleep sets the times and the speedup's bound",
                    "baseline_used": "the serial time is measured another way (kernel control, control launch, or sum)",
                    "timeout_s": SHAPE["timeout_s"], "connect_timeout_s": SHAPE["connect_timeout_s"]},
        rows=compare_rows,
        contract_keys=("batch", "order"),  # batch also chose the serial baseline (baseline_used must match)
    ),
)
