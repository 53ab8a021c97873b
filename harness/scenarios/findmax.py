"""findmax: step the load up — connections (closed model), or inputs/s with
--rate — by a factor per stage until a stage breaks a service level (--slo),
and report the maximum sustainable level: the last stage that held.

Every stage runs the stress load for --stage-duration at its level, every turn
verified; its rows carry `stage` and `level`, so `kstress report` recomputes
the stage table, the stop and the knee from turns.jsonl. A stage *holds* when
every --slo holds over its turns. The search ends at the first stage that
breaks one (`slo`), past --max (`max`), or — only when no --slo bounds latency
— at saturation: throughput flat while latency climbs for two steps in a row
(`saturation`); past it more load only queues. With a latency service level
the search goes on to the stage that breaks it: the break is observed, not
predicted. The knee is the lowest level whose throughput reaches 90% of the
best stage's (docs/load-shapes.md).

Load shedding at a stage that breaks (`busy`, timeouts, refused connections
for capacity) is what the search looks for; any other failure is a wrong
answer and fails the run (exit 1), as in stress.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ..wire.client import ConnError, KernelClient
from ..errors import UsageError
from .options import check_timeouts, connect_opt, fleet_opt, fleet_workers_opt, metrics_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, fmt_ms, fmt_num, fmt_pct, header, md_code, md_text
from ..results.comparison import CompareSpec
from ..results.concurrency import FINDING
from ..results.aggregate import Level, Sample
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario
from ..load.shapes import DURATION_HELP, duration_parser
from ..load.kernels import check_split
from ..sandbox.sut import Access, kernel_targets
from ..results.thresholds import check_mix_markers, evaluate_levels, parse_thresholds
from .common import kernel_entry, kernel_sections, level_of
from .digest import CHART_FIELDS
from .stress import ARRIVALS, DEFAULT_MIX, MIX_HELP, StressSettings, Load, parse_mix
from ..fleet import parse_fleet
from .fleetrun import fleet_load, open_fleet

# what a kernel at capacity answers: the search expects these at the stage that breaks
LOAD_SHEDDING = ("error_frame:busy", "timeout", "conn_error:capacity", "conn_error:timeout")
FLAT = 1.10  # throughput gained less than 10%: flat
CLIMB_SHARE = 0.5  # mean latency grew by half the level's growth or more: climbing
KNEE_SHARE = 0.90
MAX_STAGES = 64


@dataclass(frozen=True)
class FindmaxSettings:
    start: float = opt(4, "--start", float, "The first stage's level: connections (inputs/s with --rate).")
    factor: float = opt(2.0, "--factor", float, "Each stage's level is the previous one's times this (at least +1 connection).")
    max_level: float = opt(256, "--max", float, "The highest level tried; the last stage is exactly --max when the factor steps past it.")
    stage_duration_s: float = opt(15.0, "--stage-duration", str, f"How long each stage runs ({DURATION_HELP}).", parse=duration_parser("--stage-duration"), shown="15s")
    slos: tuple[str, ...] = threshold_opt("--slo", "(repeatable): a stage holds when every one holds over its turns; exit 99 when even the first stage broke one")
    rate: bool = opt(False, "--rate", bool, "Levels are inputs per second (the open model) instead of connections.")
    arrival: str = opt("constant", "--arrival", str, "With --rate: evenly spaced arrivals (constant) or a Poisson process (poisson).", choices=ARRIVALS)
    conns: int | None = opt(None, "--conns", int, "With --rate: the pool of connections the inputs go out on (default: the level in inputs/s, at least 32).", show_default=False)
    mix: str = opt(DEFAULT_MIX, "--mix", str, MIX_HELP, show_default=False)
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    seed: int = opt(1, "--seed", int, "Seed of the marker mix.")
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    metrics_port: int | None = metrics_opt()
    fleet: str | None = fleet_opt()
    fleet_workers: int | None = fleet_workers_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        if self.fleet is not None:
            parse_fleet(self.fleet, self.fleet_workers, allow_remote=None)  # the host is checked with the access's --allow-remote
        elif self.fleet_workers is not None:
            raise UsageError(f"--fleet-workers {self.fleet_workers} without --fleet: name the cluster, e.g. --fleet ray://127.0.0.1:10001")
        if not self.slos:
            raise UsageError("findmax needs a service level to search for: give --slo EXPR (repeatable), e.g. --slo 'p95<1s' --slo 'pass_rate>=0.99' (docs/thresholds.md)")
        parse_thresholds(self.slos, "--slo")
        top = 100_000 if self.rate else 20_000
        what = "inputs/s" if self.rate else "connections"
        for flag, v in (("--start", self.start), ("--max", self.max_level)):
            if not 0 < v <= top or (not self.rate and v != int(v)):
                raise UsageError(f"--{flag.lstrip('-')} {v:g} is invalid: use " + (f"a number of {what} up to {top}" if self.rate else f"a whole number of connections from 1 to {top}"))
        if self.max_level < self.start:
            raise UsageError(f"--max {self.max_level:g} is below --start {self.start:g}: the search steps up from --start to --max")
        if not 1.05 <= self.factor <= 100:
            raise UsageError(f"--factor {self.factor:g} is invalid: use 1.05 to 100 (each stage's level is the last one's times it)")
        if not 0.5 <= self.stage_duration_s <= 3600:
            raise UsageError(f"--stage-duration {self.stage_duration_s:g} s is invalid: use 500ms to 1h")
        if self.arrival != "constant" and not self.rate:
            raise UsageError(f"--arrival {self.arrival}: arrivals are the open model's; add --rate")
        if self.conns is not None and not self.rate:
            # the closed model's levels are the connections: a pool size there was dropped without a word
            raise UsageError(f"--conns {self.conns}: without --rate findmax's levels are the connections (--start {self.start:g} to --max {self.max_level:g}); "
                             "--conns is the open model's pool of connections: add --rate, or drop --conns and set --start/--max")
        if self.conns is not None and not 1 <= self.conns <= 20_000:
            raise UsageError(f"--conns {self.conns} is invalid: use 1 to 20000")
        if len(self.levels()) > MAX_STAGES:
            raise UsageError(f"--start {self.start:g} --factor {self.factor:g} --max {self.max_level:g} makes {len(self.levels())} stages, over {MAX_STAGES}: raise --factor")
        check_mix_markers(self.slos, [m for m, _ in parse_mix(self.mix)], "--slo")

    def levels(self) -> list[float]:
        """Every level the search may try, in order."""
        out, level = [], self.start
        while len(out) <= MAX_STAGES:
            out.append(level)
            if level >= self.max_level:
                break
            nxt = level * self.factor if self.rate else max(level + 1, round(level * self.factor))
            level = min(nxt, self.max_level)
        return out if self.rate else [int(x) for x in out]

    def stage_settings(self, level: float, stage: int) -> StressSettings:
        """The stress load of one stage."""
        common = dict(mix=self.mix, timeout_s=self.timeout_s, connect_timeout_s=self.connect_timeout_s, seed=self.seed * 1_000 + stage,
                      dedup_probe=False, out=self.out, quiet=True, duration_s=self.stage_duration_s)
        if self.rate:
            return StressSettings(rate=level, arrival=self.arrival, conns=self.conns or max(32, min(20_000, int(level))), **common)
        return StressSettings(conns=int(level), **common)


def latency_bounded(slos: tuple[str, ...]) -> bool:
    return any(t.latency for t in parse_thresholds(slos, "--slo"))


async def _queue_watch(client: KernelClient, into: dict[str, Any], stop: asyncio.Event) -> None:
    """The kernel's queue length while a stage runs, its peak kept."""
    while not stop.is_set():
        try:
            st = await client.stats(timeout_s=2.0)
        except ConnError:
            return
        q = st.get("queued")
        if isinstance(q, int):
            into["queue_peak"] = max(into.get("queue_peak") or 0, q)
        try:
            await asyncio.wait_for(stop.wait(), 0.1)  # the sampling period, ended early by the stage's end
        except asyncio.TimeoutError:
            pass


async def run_findmax(settings: FindmaxSettings, access: Access) -> RunResult:
    targets = kernel_targets(access)  # one, or several kernels at once: each stage's load split by weight
    for t in targets:
        t.prepare()
    target = targets[0]
    many = len(targets) > 1
    weights = access.weights if many else ()
    levels = settings.levels()
    if many and not settings.rate:
        check_split("connections", int(levels[0]), weights, access.names, "--start")
    slos = parse_thresholds(settings.slos, "--slo")
    unbounded = not latency_bounded(settings.slos)
    fleet_spec = parse_fleet(settings.fleet, settings.fleet_workers, access.allow_remote) if settings.fleet else None

    async def body(run: Run) -> None:
        if fleet_spec is None:
            await stages(run, None)
        else:
            # one fleet for every stage: Ray and its workers start once
            async with open_fleet(run, fleet_spec) as fleet:
                await stages(run, fleet)

    async def stages(run: Run, fleet: Any) -> None:
        stage_extras: list[dict[str, Any]] = run.extras.setdefault("stages", [])
        for k, w in zip(run.extras.get("kernels") or (), weights):
            k["weight"] = w
        stats_client: KernelClient | None = None
        if target.contract.stats:
            try:
                stats_client = await target.client(connect_timeout_s=settings.connect_timeout_s).connect()
            except ConnError:
                stats_client = None
        history: list[dict[str, Any]] = []
        try:
            for i, level in enumerate(levels, 1):
                run.check_alive()
                load = Load(settings.stage_settings(level, i), target, run, targets, weights)
                load.extra_labels = {"stage": i, "level": level}
                info: dict[str, Any] = {"stage": i, "level": level, "t_start_rel": round(time.monotonic() - run.t0, 4)}
                stage_extras.append(info)
                before = await _counters(stats_client)
                stop = asyncio.Event()
                watch = asyncio.create_task(_queue_watch(stats_client, info, stop)) if stats_client is not None else None
                try:
                    if fleet is not None:
                        await fleet_load(run, fleet, "harness.scenarios.stress:fleet_share", load.s, targets, weights, job={"extra_labels": load.extra_labels})
                    else:
                        load.begin()
                        if settings.rate:
                            await load.open_model()
                        else:
                            await load.closed_model()
                finally:
                    stop.set()
                    if watch is not None:
                        await watch
                after = await _counters(stats_client)
                if before is not None and after is not None:
                    info["rejected"] = after - before
                info["t_end_rel"] = round(time.monotonic() - run.t0, 4)
                row = judge_stage_of(run.rows.digest.stage(i), i, level, slos, info)
                history.append(row)
                if not settings.quiet:
                    print(f"\r  stage {i}: level {level:g} — {'held' if row['held'] else 'broke ' + ', '.join(row['broken'])}; "
                          f"p95 {fmt_ms(row['latency_s'].get('p95'))}, {fmt_num(row['throughput_per_s'], '{:.1f}/s')}", file=sys.stderr, flush=True)
                if stop_reason(history, unbounded) is not None:
                    break
        finally:
            if stats_client is not None:
                await stats_client.aclose()

    return await run_scenario(SCENARIO, settings, targets, body, total=None)


async def _counters(client: KernelClient | None) -> int | None:
    if client is None:
        return None
    try:
        v = (await client.stats(timeout_s=2.0)).get("rejected")
    except ConnError:
        return None
    return v if isinstance(v, int) else None


def judge_stage(rows: Iterable[dict[str, Any]], stage: int, level: float, slos: Any, info: dict[str, Any] | None = None) -> dict[str, Any]:
    """One stage's table row: its statistics, each --slo measured, held or not."""
    agg = StageAgg(slos)
    for r in rows:
        agg.add(r)
    return judge_stage_of(agg, stage, level, slos, info)


class StageAgg:
    """What a stage keeps of its turns: a Level with its concurrency, and one
    Level per --slo of the turns it selects."""

    def __init__(self, slos: Any) -> None:
        self.slos = slos
        self.lvl = Level(concurrency=True)
        self.slo_levels = [t.level() for t in slos]
        self.level: float | None = None

    def add(self, r: dict[str, Any]) -> None:
        if self.level is None:
            self.level = r.get("level")
        self.lvl.add(r)
        for t, lvl in zip(self.slos, self.slo_levels):
            if t.selects(r):
                lvl.add(r)


def judge_stage_of(agg: StageAgg, stage: int, level: float, slos: Any, info: dict[str, Any] | None = None) -> dict[str, Any]:
    row: dict[str, Any] = {"stage": stage, "level": level}
    row.update(level_of(agg.lvl))
    results = [r.to_json() for r in evaluate_levels(slos, agg.slo_levels)]
    row["slo"] = results
    row["broken"] = [r["expr"] for r in results if not r["passed"]]
    row["held"] = not row["broken"]
    info = info or {}
    for k in ("queue_peak", "rejected"):
        row[k] = info.get(k)
    _, examples = agg.lvl.failure_counts()
    row["wrong"] = {k: v for k, v in row["errors"].items() if k not in LOAD_SHEDDING}
    row["wrong_examples"] = {k: examples[k] for k in row["wrong"] if k in examples}
    # turns at the agent against turns in flight: a stage's level is what the
    # harness offered, this what the agent took (harness/results/concurrency.py)
    assert agg.lvl.conc is not None
    row["concurrency"] = agg.lvl.conc.summary()
    return row


class FindmaxDigest:
    """findmax's turns as they end (harness/scenarios/digest.py): one
    StageAgg per stage (judged when the stage ends, and again for the
    summary), the whole search's counts, and each kernel's Level."""

    def __init__(self, settings: dict[str, Any], extras: dict[str, Any]) -> None:
        self.settings = settings or {}
        self.extras = extras if extras is not None else {}
        self.slos = parse_thresholds(self.settings.get("slos") or (), "--slo")
        self.stages: dict[int, StageAgg] = {}
        self.loads = Level()
        self.kernels: dict[str, tuple[Level, Level]] = {}  # every turn, the turns out of a warm-up (kernel_summaries)
        self.sample = Sample()

    def feed(self, rows: Iterable[dict[str, Any]]) -> "FindmaxDigest":
        for r in rows:
            self.add(r)
        return self

    def add(self, r: dict[str, Any]) -> None:
        if r.get("kind") != "probe":
            self.sample.add({k: r[k] for k in CHART_FIELDS if k in r})
        if r.get("kind") != "load":
            return
        self.loads.add(r)
        k = r.get("kernel")
        if k is not None:
            every, stat = self.kernels.get(k) or self.kernels.setdefault(k, (Level(), Level()))
            every.add(r)
            if not r.get("warmup"):
                stat.add(r)
        st = r.get("stage")
        if isinstance(st, int) and not isinstance(st, bool):
            agg = self.stages.get(st)
            if agg is None:
                agg = self.stages[st] = StageAgg(self.slos)
            agg.add(r)

    def stage(self, i: int) -> StageAgg:
        return self.stages.get(i) or StageAgg(self.slos)

    def summary(self) -> dict[str, Any]:
        return summarize_findmax_of(self)

    def thresholds(self) -> list[dict[str, Any]]:
        return []  # findmax's service levels are its --slo, judged per stage

    def chart(self) -> tuple[list[dict[str, Any]], dict[str, Any]]:
        s = self.sample
        return s.rows, ({} if s.complete else {"sampled": {"rows": len(s.rows), "of": s.seen}})


def saturated(prev: dict[str, Any], cur: dict[str, Any]) -> bool:
    """Throughput flat while latency climbs, from one stage to the next:
    less than 10% more throughput, and a mean latency grown by at least half
    as much as the level (Little's law: a kernel that only queues the extra
    load grows it as much as the level)."""
    t0, t1 = prev.get("throughput_per_s"), cur.get("throughput_per_s")
    m0, m1 = (prev.get("latency_s") or {}).get("mean"), (cur.get("latency_s") or {}).get("mean")
    if not (t0 and t1 and m0 and m1) or cur["level"] <= prev["level"]:
        return False
    return t1 < FLAT * t0 and m1 / m0 >= 1 + CLIMB_SHARE * (cur["level"] / prev["level"] - 1)


def stop_reason(history: list[dict[str, Any]], unbounded: bool) -> str | None:
    """Why the search ends after the last stage of ``history``, or None to go on."""
    last = history[-1]
    if not last["held"]:
        return "slo"
    if unbounded and len(history) >= 3 and saturated(history[-3], history[-2]) and saturated(history[-2], last):
        return "saturation"
    return None


def saturated_at(history: list[dict[str, Any]]) -> float | None:
    """The first level whose stage gained no throughput while latency climbed."""
    for a, b in zip(history, history[1:]):
        if saturated(a, b):
            return b["level"]
    return None


def knee(history: list[dict[str, Any]]) -> float | None:
    """The lowest level whose throughput reaches 90% of the best stage's."""
    tps = [h.get("throughput_per_s") or 0 for h in history if h["held"]]
    if not tps or max(tps) <= 0:
        return None
    best = max(tps)
    return next(h["level"] for h in history if h["held"] and (h.get("throughput_per_s") or 0) >= KNEE_SHARE * best)


def most_achieved(history: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The stage where the agent had the most turns at once (its mean), and
    whether any stage's turns queued at it (the finding): a search whose
    offered level climbs while this stays put is measuring a queue."""
    seen = [h for h in history if ((h.get("concurrency") or {}).get("agent") or {}).get("mean") is not None]
    if not seen:
        return None
    top = max(seen, key=lambda h: h["concurrency"]["agent"]["mean"])
    c = top["concurrency"]
    flagged = [h["stage"] for h in seen if h["concurrency"].get("finding")]
    return {"stage": top["stage"], "level": top["level"], "agent": c["agent"], "in_flight": c["in_flight"], "ratio": c["ratio"],
            "finding": FINDING if flagged else None, "stages_flagged": flagged}


def summarize_findmax(rows: Iterable[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    return FindmaxDigest(settings, extras).feed(rows).summary()


def summarize_findmax_of(d: FindmaxDigest) -> dict[str, Any]:
    settings, extras, slos = d.settings, d.extras, d.slos
    infos = {e["stage"]: e for e in extras.get("stages") or ()}
    history = [judge_stage_of(d.stages[i], i, d.stages[i].level, slos, infos.get(i)) for i in sorted(d.stages)]
    unbounded = not any(t.latency for t in slos)
    reason = stop_reason(history, unbounded) if history else None
    levels = _levels(settings)
    if reason is None and history and levels and history[-1]["level"] >= levels[-1]:
        reason = "max"
    held = [h for h in history if h["held"]]
    max_level = None
    for h in history:  # the last stage that held, before the first that broke
        if not h["held"]:
            break
        max_level = h["level"]
    best = max(held, key=lambda h: h["level"]) if held else None
    thresholds = (best or (history[0] if history else {})).get("slo") or []
    wrong: dict[str, int] = {}
    examples: dict[str, str] = {}
    for h in history:
        for k, v in h["wrong"].items():
            wrong[k] = wrong.get(k, 0) + v
            examples.setdefault(k, h["wrong_examples"].get(k, k))
    failures, _ = d.loads.failure_counts()
    kernels = [kernel_entry(k, *(d.kernels.get(k["name"]) or (Level(), Level())), extras) for k in extras["kernels"]] if extras.get("kernels") else None
    for k in kernels or ():
        k["wrong"] = {n: c for n, c in k["failures"].items() if n not in LOAD_SHEDDING}
    return {
        "kernels": kernels,
        "unit": "inputs/s" if settings.get("rate") else "connections",
        "max_level": max_level,
        "stop_reason": reason,
        "knee": knee(history),
        "concurrency": most_achieved(history),
        "saturated_at": saturated_at(history),
        "stages": history,
        "attempted": d.loads.attempted,
        "passed": d.loads.passed,
        "failures": failures,
        "wrong": wrong,
        "wrong_examples": examples,
        # the service levels at the maximum sustainable level (or, when none held, at the first stage): exit 99 when they failed
        "thresholds": thresholds,
    }


def _levels(settings: dict[str, Any]) -> list[float]:
    try:
        fields = {f.name for f in dataclasses.fields(FindmaxSettings)}
        kw = {k: v for k, v in settings.items() if k in fields and k != "out"}
        return FindmaxSettings(**kw).levels()
    except (UsageError, TypeError):
        return []


def findmax_checks(s: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    wrong = s.get("wrong") or {}
    detail = "none" if not wrong else "; ".join(f"{k} x{v}: `{(s.get('wrong_examples') or {}).get(k, k)}`" for k, v in wrong.items())
    checks = [
        Check("every turn was right or shed for load (busy, timeout)", s["attempted"] > 0 and not wrong,
              f"{s['passed']}/{s['attempted']} passed; wrong answers: {detail}"),
    ]
    for k in s.get("kernels") or ():  # several kernels: which one answered wrong
        checks.append(Check(f"every turn to {k['name']} was right or shed for load", k["attempted"] > 0 and not k["wrong"],
                            f"{k['passed']}/{k['attempted']} passed" + (f"; wrong answers: {k['wrong']}" if k["wrong"] else "")))
    return checks


STOP_WORDS = {
    "slo": "stage {n} (level {level}) broke {broken}",
    "max": "every stage up to --max held",
    "saturation": "saturation: throughput stayed flat while latency climbed for two steps in a row (no --slo bounds latency)",
}


def render_findmax(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    unit = s.get("unit") or "connections"
    out = header(doc, "findmax")
    stages = s.get("stages") or []
    out += [f"Levels from {st.get('start'):g} {unit}, x{st.get('factor'):g} per stage up to {st.get('max_level'):g}, "
            f"{st.get('stage_duration_s'):g} s each, mix `{st.get('mix')}`; service levels: " + ", ".join(md_code(x) for x in st.get("slos") or ()), ""]
    if s.get("max_level") is not None:
        out += [f"**Maximum sustainable level: {s['max_level']:g} {unit}**", ""]
    else:
        out += ["**No level held its service levels** (the first stage already broke them).", ""]
    reason = s.get("stop_reason")
    if reason:
        last = stages[-1] if stages else {}
        out += ["Stopped: " + STOP_WORDS.get(reason, reason).format(n=last.get("stage"), level=f"{last.get('level', 0):g}", broken=", ".join(md_code(b) for b in last.get("broken") or ())) + ".", ""]
    extra = []
    if s.get("knee") is not None:
        extra.append(f"knee of throughput vs level: {s['knee']:g} {unit} (the lowest level with 90% of the best throughput)")
    if s.get("saturated_at") is not None:
        extra.append(f"throughput flat while latency climbed from {s['saturated_at']:g} {unit}")
    if extra:
        out += ["; ".join(extra).capitalize() + ".", ""]
    mc = s.get("concurrency")
    if mc:
        out += [f"Concurrency achieved: at most {mc['agent']['mean']:.1f} turns at the agent at once (mean; peak {mc['agent']['peak']}), "
                f"at stage {mc['stage']} ({mc['level']:g} {unit}: {mc['in_flight']['mean']:.1f} in flight)"
                + (f". **Finding: {FINDING}** at stage{'s' if len(mc['stages_flagged']) > 1 else ''} {', '.join(str(x) for x in mc['stages_flagged'])}: "
                   "the agent worked on well under the turns in flight, so a higher level only lengthened its queue"
                   + (f"; {mc['agent']['mean']:.1f} at once of {mc['agent']['turn_s'] * 1000:.0f} ms each at the agent caps throughput near "
                      f"{mc['agent']['mean'] / mc['agent']['turn_s']:.1f}/s" if mc["agent"].get("turn_s") else "") if mc.get("finding") else "") + ".", ""]
    out += kernel_sections(s)[0]
    out += ["## Stages", "", f"| stage | level ({unit}) | attempted | pass rate | p50 | p95 | p99 | throughput | at the agent / in flight | kernel queue peak | errors | held |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for h in stages:
        lat = h.get("latency_s") or {}
        errs = md_text(", ".join(f"{k} {v}" for k, v in (h.get("errors") or {}).items()) or "-")
        held = "yes" if h["held"] else "**no**: " + ", ".join(md_code(b) for b in h["broken"])
        out.append(f"| {h['stage']} | {h['level']:g} | {h['attempted']} | {fmt_pct(h.get('pass_rate'))} | {fmt_ms(lat.get('p50'))} | {fmt_ms(lat.get('p95'))} | "
                   f"{fmt_ms(lat.get('p99'))} | {fmt_num(h.get('throughput_per_s'), '{:.1f}/s')} | {_achieved_cell(h.get('concurrency'))} | {h.get('queue_peak') if h.get('queue_peak') is not None else '-'} | {errs} | {held} |")
    out.append("")
    out += checks_section(doc)
    return "\n".join(out)


def _achieved_cell(c: dict[str, Any] | None) -> str:
    if not c or c.get("agent") is None:
        return "-"
    return f"{c['agent']['mean']:.1f} / {c['in_flight']['mean']:.1f}" + (" **serialised**" if c.get("finding") else "")


SCENARIO = Scenario(
    name="findmax",
    help="Step the load up until a stage breaks a service level (--slo); report the maximum sustainable level.",
    settings=FindmaxSettings,
    run=run_findmax,
    summarize=summarize_findmax,
    digest=FindmaxDigest,
    checks=findmax_checks,
    render=render_findmax,
    kernels=True,
    compare=CompareSpec(refused="a findmax run yields one maximum level per run: there is no sample to test; compare two stress runs at the level you care about"),
)
