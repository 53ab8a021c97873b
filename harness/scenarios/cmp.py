"""cmp: OLD and NEW side by side, each in its own sandbox, rounds interleaved
(ABBA), on four dimensions:

1. batch tool calls  -- `!slowbatchN` tool-phase time (lower is better) and processed count
2. concurrency       -- per-round speedup serial/concurrent within each version (higher is better)
3. bombardment       -- C connections at once, one input each: pass rate (higher is better)
4. stability         -- consecutive rounds, error-free rate (higher is better)

Every round records its processed count and error frames. A dimension that
cannot be measured on a version says so and yields no number. better / worse
needs significance (Mann-Whitney U, alpha) and a minimum effect; NEW worse (or
NEW unmeasurable where OLD was measured) is a regression: exit code 1.
"""

from __future__ import annotations

import asyncio
import shlex
import statistics
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from mock.markers import DEFAULT_TOOL_MS, N_MAX

from ..wire.client import ConnError
from ..errors import UsageError
from ..sandbox.launcher import LaunchSettings
from .options import arg, check_timeouts, connect_opt, contract_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, fmt_ms, fmt_num, header, md_code, md_text
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario, settings_json
from ..results.comparison import CompareSpec, holm, verdict_row
from ..results.stats import ALPHA, MIN_EFFECT
from ..sandbox.sut import Access, Target
from ..judge.verdict import is_timing_sample
from ..sandbox.target import TargetSpec, load_target, spec_from_command
from .abtest import BASELINES, resolve_baseline
from .seq import Sequential

MIN_SAMPLES = 3


def target_from_arg(arg: str) -> TargetSpec:
    """An executable path, a quoted command line, or a target TOML file."""
    if arg.endswith(".toml"):
        return load_target(arg)
    return spec_from_command(arg)


@dataclass(frozen=True)
class CmpSettings:
    old: str = arg(str, "OLD: an executable, a quoted command line or a target TOML.")
    new: str = arg(str, "NEW: the same forms as OLD.")
    n: int = opt(4, "--n", int, "Batch size of dimensions 1 and 2.")
    rounds: int = opt(8, "--rounds", int, "Rounds of dimensions 1 and 2.")
    bombard_conns: int = opt(32, "--bombard-conns", int, "Bombardment: connections opened at once, one input each.")
    bombard_rounds: int = opt(3, "--bombard-rounds", int, "Bombardment rounds per version.")
    bombard_marker: str = "!batch4"
    stability_rounds: int = opt(20, "--stability-rounds", int, "Stability: consecutive rounds per version.")
    stability_marker: str = "!mixed3"
    tool_ms: int = opt(DEFAULT_TOOL_MS, "--tool-ms", int, "Mock: base sleep of the timed tools, in both sandboxes.")
    alpha: float = opt(ALPHA, "--alpha", float, "Significance level of the Mann-Whitney U test.")
    min_effect: float = opt(MIN_EFFECT, "--min-effect", float, "Smallest change called better or worse (a fraction; percentage points for rates).")
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    mechanism: str = opt("auto", "--mechanism", str, "Sandbox mechanism.", choices=("auto", "netns", "userns"))
    contract: tuple[str, ...] = contract_opt()  # both versions
    llm_api: str | None = opt(None, "--llm-api", str, "The LLM API both versions speak (default: each one's target file, else chat).", choices=("chat", "responses", "anthropic"))
    baseline: str = opt("auto", "--baseline", str, "The serial time of the concurrency dimension: kernel | control | sum | auto (as abtest's).", choices=BASELINES)
    control_args: str | None = opt(None, "--control-args", str, "With --baseline control: the ARGS that make each version sequential.")
    listen: str | None = opt(None, "--listen", str, "How both kernels listen inside their sandboxes (default: each target's, else unix).", choices=("unix", "tcp", "ws"))
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        if not 2 <= self.n <= N_MAX:
            raise UsageError(f"--n {self.n} is invalid: the batch size for dimensions 1 and 2 is 2 to {N_MAX}")
        for name in ("rounds", "bombard_rounds", "stability_rounds"):
            v = getattr(self, name)
            if not 1 <= v <= 1000:
                raise UsageError(f"--{name.replace('_', '-')} {v} is invalid: use 1 to 1000")
        if not 1 <= self.bombard_conns <= 10_000:
            raise UsageError(f"--bombard-conns {self.bombard_conns} is invalid: use 1 to 10000")
        if not 0 < self.alpha < 0.5:
            raise UsageError(f"--alpha {self.alpha} is invalid: use 0 < alpha < 0.5 (e.g. 0.05)")
        if not 0 <= self.min_effect < 1:
            raise UsageError(f"--min-effect {self.min_effect} is invalid: a fraction, e.g. 0.05 for 5%")
        if (self.baseline == "control") != (self.control_args is not None):
            raise UsageError("--baseline control and --control-args go together: each version's control is the same binary launched with those ARGS")


def _values(rows: list[dict[str, Any]], dim: str, version: str) -> list[dict[str, Any]]:
    return [r for r in rows if r.get("kind") == "cmp" and r.get("dim") == dim and r.get("version") == version]


def _dim_batch(rows: list[dict[str, Any]], s: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": "batch", "metric": f"!slowbatch{s['n']} tool phase (s), lower is better"}
    samples, notes = {}, {}
    for v in ("old", "new"):
        rs = _values(rows, "batch", v)
        ok = [r["tool_ms"] / 1000 for r in rs if is_timing_sample(r)]
        processed = [r.get("got") or 0 for r in rs]
        samples[v] = ok
        out[f"{v}_processed"] = f"{sum(processed)}/{sum(r.get('expected') or s['n'] for r in rs)}"
        out[f"{v}_errors"] = sum(1 for r in rs if r.get("outcome") == "error")
        if len(ok) < MIN_SAMPLES:
            notes[v] = f"unmeasurable: only {len(ok)} of {len(rs)} rounds ran every tool with a passing verdict"
    return verdict_row(out, samples, notes, s, higher_is_better=False)


def _dim_concurrency(rows: list[dict[str, Any]], s: dict[str, Any]) -> dict[str, Any]:
    baseline = s.get("baseline_used") or "kernel"
    out: dict[str, Any] = {"name": "concurrency", "metric": f"speedup serial/concurrent at N={s['n']} (baseline {baseline}), higher is better", "baseline": baseline}
    samples, notes = {}, {}
    for v in ("old", "new"):
        rs = _values(rows, "concurrency", v) + [r for r in rows if r.get("kind") == "cmp" and r.get("dim") == "concurrency" and r.get("version") == f"{v}-control"]
        if baseline == "sum":
            # one arm: the same turn's calls summed, over the span they took
            ok = [r for r in rs if is_timing_sample(r) and r.get("tool_sum_ms") and r.get("tool_span_ms")]
            samples[v] = [r["tool_sum_ms"] / r["tool_span_ms"] for r in ok]
            out[f"{v}_errors"] = sum(1 for r in rs if r.get("outcome") == "error")
            if len(ok) < MIN_SAMPLES:
                notes[v] = f"unmeasurable: only {len(ok)} rounds ran every tool with their timestamps"
            continue
        by_round: dict[int, dict[str, dict[str, Any]]] = {}
        for r in rs:
            by_round.setdefault(r["round"], {})[r["arm"]] = r
        speedups, serial_bad = [], 0
        for arms in by_round.values():
            c, sr = arms.get("concurrent"), arms.get("serial")
            if sr is not None and sr.get("overlap") is not None and sr["overlap"] > 1:
                serial_bad += 1
            if c and sr and is_timing_sample(c) and is_timing_sample(sr) and c["tool_ms"]:
                speedups.append(sr["tool_ms"] / c["tool_ms"])
        samples[v] = speedups
        out[f"{v}_errors"] = sum(1 for r in rs if r.get("outcome") == "error")
        if serial_bad:
            notes[v] = f"unmeasurable: the serial control ran concurrently in {serial_bad} round(s)"
        elif len(speedups) < MIN_SAMPLES:
            notes[v] = f"unmeasurable: only {len(speedups)} rounds where both arms ran every tool"
    return verdict_row(out, samples, notes, s, higher_is_better=True)


def _dim_rate(rows: list[dict[str, Any]], s: dict[str, Any], dim: str, metric: str) -> dict[str, Any]:
    out: dict[str, Any] = {"name": dim, "metric": metric}
    samples, notes = {}, {}
    for v in ("old", "new"):
        rs = _values(rows, dim, v)
        samples[v] = [1.0 if r.get("passed") else 0.0 for r in rs]
        out[f"{v}_errors"] = sum(1 for r in rs if r.get("outcome") == "error")
        if not rs:
            notes[v] = "unmeasurable: no inputs recorded"
    return verdict_row(out, samples, notes, s, higher_is_better=True, rate=True)


def summarize_cmp(rows: list[dict[str, Any]], s: dict[str, Any], extras: dict[str, Any] | None = None) -> dict[str, Any]:
    dims = [
        _dim_batch(rows, s),
        _dim_concurrency(rows, s),
        _dim_rate(rows, s, "bombardment", f"pass rate of {s['bombard_conns']} connections at once, higher is better"),
        _dim_rate(rows, s, "stability", f"error-free rate over {s['stability_rounds']} consecutive rounds, higher is better"),
    ]
    # four tests at alpha each: an identical pair would come out better or
    # worse somewhere about four times as often as alpha says (issue 22)
    holm(dims, s["alpha"])
    return {"dimensions": dims, "regressed": [d["name"] for d in dims if d["verdict"] == "worse"],
            # one launch each: shown side by side, not a significance test
            "startup": (extras or {}).get("startup")}


def cmp_checks(summary: dict[str, Any], settings: dict[str, Any] | None = None) -> list[Check]:
    out = []
    for d in summary["dimensions"]:
        out.append(Check(f"{d['name']}: NEW does not regress", d["verdict"] != "worse", f"{d['verdict']}: {d.get('reason', '')}"))
    return out


async def _bombard(run: Run, target: Target, rnd: int, s: CmpSettings) -> None:
    """C connections opened at once, one input each."""

    async def one(k: int) -> None:
        labels = dict(kind="cmp", dim="bombardment", round=rnd, conn=k)
        try:
            async with target.client(connect_timeout_s=s.connect_timeout_s) as c:
                turn = await c.turn(s.bombard_marker, s.timeout_s)
        except ConnError as exc:
            await run.record_failure(s.bombard_marker, exc, target, **labels)
            return
        await run.record(turn, target, **labels)

    async with asyncio.TaskGroup() as tg:
        for k in range(s.bombard_conns):
            tg.create_task(one(k))


async def run_cmp(settings: CmpSettings) -> RunResult:
    old_spec, new_spec = target_from_arg(settings.old), target_from_arg(settings.new)
    if settings.listen:
        old_spec, new_spec = replace(old_spec, listen=settings.listen), replace(new_spec, listen=settings.listen)
    targets = {}
    for label, spec in (("old", old_spec), ("new", new_spec)):
        if settings.llm_api is not None:
            spec = replace(spec, llm_api=settings.llm_api)
        ls = LaunchSettings(target=spec, mechanism=settings.mechanism, tool_ms=settings.tool_ms, contract_pairs=settings.contract)
        targets[label] = Target(Access(launch=ls), label=label)
    contracts = {v: t.access.launch.contract for v, t in targets.items()}
    baseline = resolve_baseline(settings.baseline, contracts["old"])
    resolve_baseline(settings.baseline, contracts["new"])  # the same rule must fit NEW too
    if baseline == "control":
        for label in ("old", "new"):
            ls = targets[label].access.launch
            spec = replace(ls.target, extra_args=ls.target.extra_args + tuple(shlex.split(settings.control_args or "")), name=f"{ls.target.name} (control)")
            targets[f"{label}-control"] = Target(Access(launch=replace(ls, target=spec, contract_pairs=ls.contract_pairs + ("batch=serial",))), label=f"{label}-control")

    async def body(run: Run) -> None:
        s = settings
        run.extras["startup"] = {v: {"startup_s": t.launch.startup_s, "ready_rss_mb": t.launch.ready_rss_mb} for v, t in targets.items() if t.launch is not None and v in ("old", "new")}
        seqs = {v: Sequential(run, t, s.timeout_s, s.connect_timeout_s) for v, t in targets.items()}
        # the concurrency dimension's serial arm: the kernel's own control, or a control launch
        serial_of = {v: (seqs[f"{v}-control"] if baseline == "control" else seqs[v]) for v in ("old", "new")}

        def order(rnd: int) -> tuple[str, str]:
            return ("old", "new") if rnd % 2 == 0 else ("new", "old")  # ABBA

        try:
            for rnd in range(s.rounds):
                for v in order(rnd):
                    await seqs[v].turn(f"!slowbatch{s.n}", kind="cmp", dim="batch", round=rnd)
            conc = f"!slowbatch{s.n}:{s.tool_ms}:0"
            for rnd in range(s.rounds):
                for v in order(rnd):
                    if baseline == "sum":
                        await seqs[v].turn(conc, kind="cmp", dim="concurrency", round=rnd, arm="concurrent")
                        continue
                    serial_marker = conc if baseline == "control" else f"!serialbatch{s.n}:{s.tool_ms}:0"
                    arms = ((seqs[v], "concurrent", conc), (serial_of[v], "serial", serial_marker))
                    for driver, arm, marker in arms if rnd % 2 == 0 else arms[::-1]:
                        await driver.turn(marker, kind="cmp", dim="concurrency", round=rnd, arm=arm)
            for rnd in range(s.bombard_rounds):
                for v in order(rnd):
                    run.check_alive()
                    await _bombard(run, targets[v], rnd, s)
            for rnd in range(s.stability_rounds):
                for v in order(rnd):
                    await seqs[v].turn(s.stability_marker, kind="cmp", dim="stability", round=rnd)
        finally:
            for q in seqs.values():
                await q.aclose()

    s = settings
    total = 2 * (s.rounds + (1 if baseline == "sum" else 2) * s.rounds + s.bombard_rounds * s.bombard_conns + s.stability_rounds)
    return await run_scenario(SCENARIO, settings, list(targets.values()), body, total=total)


def _settings_json(s: CmpSettings, targets: Sequence[Target]) -> dict[str, Any]:
    d = settings_json(s)
    d["baseline_used"] = resolve_baseline(s.baseline, targets[0].contract) if targets else None
    return d


def render_cmp(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    out = header(doc, "cmp")
    out += [
        f"OLD {md_code(st.get('old'))} vs NEW {md_code(st.get('new'))}, interleaved rounds (ABBA); better/worse needs p < {st.get('alpha')} "
        f"(Mann-Whitney U) and a change of at least {st.get('min_effect', 0):.0%}.",
        "",
        "| dimension | metric | OLD | NEW | change | p | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]

    def val(d: dict[str, Any], v: str) -> str:
        if d.get(v) is None:
            return md_text(d.get(f"{v}_note", "unmeasurable"))
        x = d[v]
        return f"{x:.1%}" if d["name"] in ("bombardment", "stability") else (f"{x:.2f}x" if d["name"] == "concurrency" else fmt_ms(x))

    for d in s.get("dimensions", []):
        change = "-" if d.get("change") is None else (f"{d['change']:+.1%}" if d["name"] not in ("bombardment", "stability") else f"{d['change'] * 100:+.1f} pts")
        out.append(f"| {d['name']} | {d['metric']} | {val(d, 'old')} | {val(d, 'new')} | {change} | {fmt_num(d.get('p'), '{:.3g}')} | **{d['verdict']}** |")
    out.append("")
    st_up = s.get("startup") or {}
    if st_up.get("old") and st_up.get("new"):
        o, n = st_up["old"], st_up["new"]
        out.append(f"- start-up (spawn to ready, one launch each): OLD {fmt_ms(o.get('startup_s'))}, NEW {fmt_ms(n.get('startup_s'))}; "
                   f"RSS at ready OLD {fmt_num(o.get('ready_rss_mb'), '{:.1f} MB')}, NEW {fmt_num(n.get('ready_rss_mb'), '{:.1f} MB')}")
    for d in s.get("dimensions", []):
        if d["name"] == "batch":
            out.append(f"- batch: tools processed OLD {d.get('old_processed')}, NEW {d.get('new_processed')}; error frames OLD {d.get('old_errors')}, NEW {d.get('new_errors')}")
        for w in d.get("warnings", []):
            out.append(f"- {d['name']}: {md_text(w)}")
    out.append("")
    out += checks_section(doc)
    return "\n".join(out)


SCENARIO = Scenario(
    name="cmp",
    help="OLD vs NEW side by side (each a path, a quoted command line or a target TOML); exit 1 when NEW regresses.",
    settings=CmpSettings,
    run=run_cmp,
    summarize=summarize_cmp,
    checks=cmp_checks,
    render=render_cmp,
    to_json=_settings_json,
    access=False,
    compare=CompareSpec(refused="a cmp run is already OLD against NEW, interleaved; compare two stress, sessions, batch or abtest runs instead"),
)
