"""sessions: S concurrent sessions of T turns each, every turn checked for
session isolation.

Each input carries `session` (protocol v1, docs/protocol.md *Sessions*) and a
nonce that encodes its session and turn (`mock.markers.session_nonce`), so the
mock checks that the history of turn t holds exactly turns 1..t-1 **of that
session**, in order, and no other session's (`history=ok`, or the first foreign
or missing turn, named). The turns of one session go one after another;
sessions are spread over the connections, several interleaved on each (so a
kernel that keys history by connection bleeds them together), and with
`--reconnect` each turn of a session goes out on the next connection (a
session resumed elsewhere). A session stops at its first failed turn: the
kernel keeps no failed turn in its history, so every later one would fail for
the same reason.

Reported: latency by turn index (does turn 10 cost more than turn 1?), the
pass rate, every history problem by name, and the kernel's memory growth per
session held (its process tree's RSS before the first turn and after the last).
"""

from __future__ import annotations

import asyncio
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from mock.errors import MarkerError
from mock.markers import build_plan, session_nonce

from ..wire.client import ConnError, KernelClient
from ..errors import UsageError
from .options import check_timeouts, connect_opt, fleet_opt, fleet_workers_opt, metrics_opt, opt, out_opt, quiet_opt, threshold_opt
from ..fleet import FleetSpec, parse_fleet
from .fleetrun import drive_fleet, share_targets
from ..results.report import checks_section, fmt_ms, fmt_num, fmt_pct, header, latency_by_marker_section, md_code, md_text
from ..results.comparison import SHAPE, CompareSpec
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario, settings_json
from ..results.aggregate import Level
from ..results.thresholds import LATENCY_PS, by_marker_of, check_mix_markers
from ..load.kernels import check_split, schedule, split
from ..load.shapes import DURATION_HELP, Ramp, duration_parser, follow_level, parse_stages
from ..sandbox.launcher import tree_rss_mb
from ..sandbox.sut import Access, Target, kernel_targets
from .common import kernel_checks, kernel_entry, kernel_sections
from .digest import LoadDigest
from .stress import MIX_MATTERS, check_shape, load_compare_rows, mix_key, parse_mix, stage_section

DEFAULT_MIX = "text:3,!batch2:1"
MAX_TURNS = 1_000_000


@dataclass(frozen=True)
class SessionsSettings:
    sessions: int = opt(8, "--sessions", int, "Concurrent sessions.")
    turns: int = opt(5, "--turns", int, "Turns per session, one after another.")
    conns: int | None = opt(None, "--conns", int, "Connections the sessions are spread over (default: a quarter of --sessions, at least 1): several sessions interleave on each.")
    mix: str = opt(DEFAULT_MIX, "--mix", str, "Weighted markers of the turns, as stress takes them (the last ':N' of an item is its weight).")
    reconnect: bool = opt(False, "--reconnect", bool, "Send each turn of a session on the next connection: a session resumed elsewhere.")
    duration_s: float | None = opt(None, "--duration", str, f"Run length: --sessions sessions at a time, a new one starting as one ends, until it ends ({DURATION_HELP}).", parse=duration_parser("--duration"))
    stages: tuple[str, ...] = opt((), "--stage", str, "DURATION:TARGET, repeatable: ramp linearly to TARGET concurrent sessions within DURATION, from 0; e.g. --stage 10s:32 --stage 30s:32.", multiple=True)
    warmup_s: float | None = opt(None, "--warmup", str, "The first DURATION of a timed run is warm-up: its turns are verified but kept out of every statistic and threshold.", parse=duration_parser("--warmup"))
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    seed: int = opt(1, "--seed", int, "Seed of the marker mix.")
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()
    metrics_port: int | None = metrics_opt()
    fleet: str | None = fleet_opt()
    fleet_workers: int | None = fleet_workers_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        if self.fleet is not None:
            parse_fleet(self.fleet, self.fleet_workers, allow_remote=None)  # the host is checked with the access's --allow-remote
        elif self.fleet_workers is not None:
            raise UsageError(f"--fleet-workers {self.fleet_workers} without --fleet: name the cluster, e.g. --fleet ray://127.0.0.1:10001")
        if not 1 <= self.sessions <= 10_000:
            raise UsageError(f"--sessions {self.sessions} is invalid: use 1 to 10000")
        if not 1 <= self.turns <= 1000:
            raise UsageError(f"--turns {self.turns} is invalid: use 1 to 1000 per session")
        if self.sessions * self.turns > 1_000_000:
            raise UsageError(f"--sessions x --turns = {self.sessions * self.turns} is over the 1000000 bound of one run")
        if self.conns is not None and not 1 <= self.conns <= 10_000:
            raise UsageError(f"--conns {self.conns} is invalid: use 1 to 10000")
        mix = parse_mix(self.mix)
        for marker, _ in mix:
            if marker != "text":
                try:
                    kind = build_plan(f"{marker} #p").kind
                except MarkerError as exc:  # parse_mix has checked: this cannot happen
                    raise UsageError(f"--mix {marker!r}: {exc}") from None
                if kind in ("err", "hang"):
                    raise UsageError(f"--mix {marker!r}: a turn that fails on purpose ends its session; sessions take turns that succeed")
        check_mix_markers(self.thresholds, [m for m, _ in mix])

        check_shape(self)

    @property
    def timed(self) -> bool:
        return bool(self.stages) or self.duration_s is not None

    def ramp(self) -> Ramp | None:
        if self.stages:
            return Ramp(parse_stages(self.stages, integer=True))
        return Ramp.constant(self.sessions, self.duration_s) if self.duration_s is not None else None

    @property
    def peak_sessions(self) -> int:
        return int(max(st.target for st in parse_stages(self.stages, integer=True))) if self.stages else self.sessions

    @property
    def connections(self) -> int:
        return self.conns or max(1, self.peak_sessions // 4)


async def run_sessions(settings: SessionsSettings, access: Access) -> RunResult:
    targets = kernel_targets(access)  # one, or several kernels at once: sessions go to them by weight
    for t in targets:
        t.prepare()
    session_kernel, kernel_conns = _spread(settings, access, len(targets))
    run_tag = "r" + os.urandom(3).hex()
    fleet = parse_fleet(settings.fleet, settings.fleet_workers, access.allow_remote) if settings.fleet else None
    load = _SessionLoad(settings, access.weights, targets, session_kernel, kernel_conns, run_tag, parse_mix(settings.mix), fleet=fleet)
    return await run_scenario(SCENARIO, settings, targets, load.body, total=None if settings.timed else settings.sessions * settings.turns)


def _spread(settings: SessionsSettings, access: Access, n_targets: int) -> tuple[list[int], list[int]]:
    """Each session's kernel, and each kernel's number of connections."""
    if n_targets > 1:
        check_split("sessions", settings.sessions, access.weights, access.names, "--sessions")
        session_kernel = schedule(settings.sessions, access.weights)
        # each kernel its own connections, its share of --conns (at least one)
        kernel_conns = [max(1, n) for n in split(settings.connections, access.weights)]
    else:
        session_kernel, kernel_conns = [0] * settings.sessions, [settings.connections]
    return session_kernel, kernel_conns


class _SessionLoad:
    """One sessions run's load: the connections the sessions share, the
    sessions themselves, and the shape's slots that start them one after another."""

    def __init__(self, settings: SessionsSettings, weights: tuple[float, ...], targets: list[Target], session_kernel: list[int], kernel_conns: list[int], run_tag: str,
                 mix: tuple[tuple[str, int], ...], fleet: FleetSpec | None = None, share: tuple[int, int] = (0, 1)) -> None:
        self.s = settings
        self.weights_k = weights
        self.fleet = fleet
        # a fleet worker's share: sessions w, w+n, ... of the run, on connections of its own
        self.worker, self.workers_n = share
        self.targets = targets
        self.many = len(targets) > 1
        self.session_kernel = session_kernel
        self.kernel_conns = kernel_conns
        self.run_tag = run_tag
        self.markers = [m for m, _ in mix]
        self.weights = [w for _, w in mix]

    async def body(self, run: Run) -> None:
        self.open(run)
        try:
            if self.fleet is not None:
                job = {"run_tag": self.run_tag, "session_kernel": self.session_kernel, "kernel_conns": self.kernel_conns}
                await drive_fleet(run, self.fleet, "harness.scenarios.sessions:fleet_share", self.s, self.targets, self.weights_k, job=job)
            else:
                await self.drive()
        finally:
            await self.close()

    def open(self, run: Run) -> None:
        """The connection slots (connected on first use), each kernel's memory
        before the first turn, and the load's clock."""
        self.run = run
        targets, kernel_conns = self.targets, self.kernel_conns
        # kernel i's connections are conns[base[i] : base[i] + kernel_conns[i]]
        self.base = [sum(kernel_conns[:i]) for i in range(len(targets))]
        self.conns: list[KernelClient | None] = [None] * sum(kernel_conns)
        self.conn_target = [targets[i] for i, n in enumerate(kernel_conns) for _ in range(n)]
        self.locks = [asyncio.Lock() for _ in self.conns]
        self.per_kernel = run.extras.get("kernels") or []
        for i, k in enumerate(self.per_kernel):
            k.update(weight=self.weights_k[i], conns=kernel_conns[i], sessions=self.session_kernel.count(i), memory={"rss_before_mb": tree_rss_mb(targets[i].target_pid)})
        if not self.many:
            run.extras["memory"] = {"rss_before_mb": tree_rss_mb(targets[0].target_pid)}
        self.t0 = time.monotonic()
        self.warm_until = self.t0 + self.s.warmup_s if self.s.warmup_s else None
        run.extras["load_t0_rel"] = round(self.t0 - run.t0, 4)
        self.next_id = 0
        self.max_sessions = MAX_TURNS // self.s.turns  # every load loop is bounded
        self.full = asyncio.Event()

    async def drive(self, t0: float | None = None) -> None:
        """The sessions: all of --sessions at once, or as many as the shape's
        level at each moment (a fleet worker: its share of them, from the
        fleet's common ``t0``)."""
        if t0 is not None:
            self.t0 = t0
            self.warm_until = t0 + self.s.warmup_s if self.s.warmup_s else None
            if t0 > time.monotonic():
                await asyncio.sleep(t0 - time.monotonic())  # the fleet's common start
        ramp = self.s.ramp()
        if ramp is not None:
            await follow_level(ramp, self.t0, self.slot, stop=self.full, share=(self.worker, self.workers_n))
        else:
            async with asyncio.TaskGroup() as tg:
                for k in range(self.worker, self.s.sessions, self.workers_n):
                    tg.create_task(self.session(k))

    async def close(self) -> None:
        """Each kernel's memory after the last turn, then every connection closed."""
        if self.many:
            for i, k in enumerate(self.per_kernel):
                k["memory"]["rss_after_mb"] = tree_rss_mb(self.targets[i].target_pid)
        else:
            self.run.extras["memory"]["rss_after_mb"] = tree_rss_mb(self.targets[0].target_pid)
        for c in self.conns:
            if c is not None:
                await c.aclose()

    async def connection(self, k: int) -> KernelClient | None:
        async with self.locks[k]:  # sessions share it: one connects, the others wait
            c = self.conns[k]
            if c is not None and c.connected:
                return c
            if c is not None:
                await c.aclose()
                self.run.extras["reconnects"] = self.run.extras.get("reconnects", 0) + 1
            try:
                self.conns[k] = await self.conn_target[k].client(connect_timeout_s=self.s.connect_timeout_s).connect()
            except ConnError:
                self.conns[k] = None
                raise
            return self.conns[k]

    def kernel_of(self, k: int) -> tuple[int, int]:
        """Session k's kernel, and its index among that kernel's sessions."""
        # a timed run starts sessions past --sessions: they follow the same kernel pattern, cycled
        n = len(self.session_kernel)
        ki = self.session_kernel[k % n]
        local = (k // n) * self.session_kernel.count(ki) + self.session_kernel[: k % n].count(ki)
        return ki, local

    async def session(self, k: int, keep_going: Callable[[], bool] | None = None) -> None:
        s, run = self.s, self.run
        part = f"{k:04d}"
        sid = f"s{part}"  # the session field; the nonce spells it _s<part>_t<turn>
        rng = random.Random(s.seed * 100_003 + k)
        ki, local = self.kernel_of(k)
        target = self.targets[ki]
        for t in range(1, s.turns + 1):
            if keep_going is not None and not keep_going():
                return  # the time ended: a session cut short, not failed
            run.check_alive()
            marker = rng.choices(self.markers, self.weights)[0]
            marker = "" if marker == "text" else marker
            # a fleet worker holds 1/n of the connections and of the sessions: as many sessions share each
            ci = self.base[ki] + (local // self.workers_n + (t - 1 if s.reconnect else 0)) % self.kernel_conns[ki]
            labels: dict[str, Any] = dict(kind="session", session=sid, turn=t, conn=ci)
            if self.warm_until is not None and time.monotonic() < self.warm_until:
                labels["warmup"] = True
            try:
                client = await self.connection(ci)
            except ConnError as exc:
                await run.record_failure(marker, exc, target, **labels)
                return
            assert client is not None
            turn = await client.turn(marker, s.timeout_s, nonce=session_nonce(self.run_tag, part, t), session=sid)
            v = await run.record(turn, target, **labels)
            if not v.passed:
                return  # the kernel keeps no failed turn: every later one would fail for it too

    async def slot(self, _wid: int, keep_going: Callable[[], bool]) -> None:
        """A slot of the shape: one session after another while it lasts (a
        fleet worker's sessions are w, w+n, ...: disjoint from the others')."""
        while keep_going():
            k = self.next_id * self.workers_n + self.worker
            if k >= self.max_sessions:
                self.full.set()
                return
            self.next_id += 1
            await self.session(k, keep_going)


async def fleet_share(job: dict[str, Any], sink: Any, t0: float) -> dict[str, Any]:
    """A fleet worker's sessions (harness/fleet/actor.py runs it): its share,
    on connections of its own -- sessions interleave on a connection only
    with the sessions of the same worker."""
    s, w, n = job["settings"], job["worker"], job["workers"]
    conns = [max(1, len(range(w, c, n))) for c in job["kernel_conns"]]  # its part of each kernel's connections
    async with share_targets(job, sink) as run:
        load = _SessionLoad(s, job["weights"], run.targets, job["session_kernel"], conns, job["run_tag"], parse_mix(s.mix), share=(w, n))
        load.open(run)
        try:
            await load.drive(t0)
        finally:
            await load.close()
    return {"reconnects": run.extras.get("reconnects", 0)}


def summarize_sessions(rows: Iterable[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    return SessionsDigest(settings, extras).feed(rows).summary()


class SessionsDigest(LoadDigest):
    """sessions' summary from streaming aggregates (harness/scenarios/digest.py).
    A session's turns run in order and it stops at its first failed turn
    (_SessionLoad.session), so sessions are counted without keeping their
    ids: one started per turn 1 recorded, one complete per passed last
    turn, one failed per failed turn; the rest were cut by a timed run's
    end. Warm-up turns are verified (the checks count them) but out of every
    statistic."""

    KINDS = ("session",)

    def __init__(self, settings: dict[str, Any], extras: dict[str, Any]) -> None:
        super().__init__(settings, extras)
        self.started = self.complete = self.failed = 0
        self.history = 0
        self.history_example: str | None = None
        self.by_turn: dict[int, Level] = {}

    def add(self, r: dict[str, Any]) -> None:
        if r.get("kind") == "session":
            t = r.get("turn")
            self.started += t == 1
            if r.get("passed"):
                self.complete += t == self.settings.get("turns")
            else:
                self.failed += 1
            if not r.get("warmup") and t is not None:
                lvl = self.by_turn.get(t)
                if lvl is None:
                    lvl = self.by_turn[t] = Level()
                lvl.add(r)
                fs = r.get("failures")
                if fs and fs[0].startswith("history "):
                    self.history += 1
                    if self.history_example is None:
                        self.history_example = fs[0]
        super().add(r)

    def summary(self) -> dict[str, Any]:
        extras, inp, warm = self.extras, self.inputs, self.warm
        failures, examples = inp.failure_counts()
        by_turn = []
        for t in sorted(self.by_turn):
            lvl = self.by_turn[t]
            st = lvl.lat.stats((50, 95))
            by_turn.append({"turn": t, "attempted": lvl.attempted, "passed": lvl.passed, "p50": st["p50"], "p95": st["p95"], "mean": st["mean"]})
        cut = self.started - self.complete - self.failed  # a timed run's end stopped them between turns
        mem = extras.get("memory") or {}
        before, after = mem.get("rss_before_mb"), mem.get("rss_after_mb")
        growth = (after - before) if before is not None and after is not None else None
        return {
            "attempted": inp.attempted,
            "passed": inp.passed,
            "pass_rate": inp.passed / inp.attempted if inp.attempted else None,
            "failures": failures,
            "failure_examples": examples,
            "sessions": {"started": self.started, "complete": self.complete, "cut": cut, "failed": self.failed},
            "warmup": {"attempted": warm.attempted, "passed": warm.passed, "failures": warm.failure_counts()[0]} if warm.attempted else None,
            "stages": self.stage_table(),
            "history_failures": self.history,
            "history_example": self.history_example,
            "latency_s": inp.lat.stats(LATENCY_PS),
            "latency_by_marker": by_marker_of(inp.lat, self.by_marker),
            "throughput": self.ends.windows(),
            "by_turn": by_turn,
            # the last turn against the first: what a longer history costs
            "last_vs_first_p50": (by_turn[-1]["p50"] / by_turn[0]["p50"]) if len(by_turn) > 1 and by_turn[0]["p50"] and by_turn[-1]["p50"] else None,
            "memory": {
                "rss_before_mb": round(before, 2) if before is not None else None,
                "rss_after_mb": round(after, 2) if after is not None else None,
                "kb_per_session": round(growth * 1024 / self.complete, 2) if growth is not None and self.complete else None,
            },
            "reconnects": extras.get("reconnects", 0),
            **({"kernels": [{**kernel_entry(k, lvl, lvl, extras), "memory": k.get("memory")}
                            for k in extras["kernels"] for lvl in (self.kernels.get(k["name"]) or Level(),)]} if extras.get("kernels") else {}),
        }


def sessions_checks(s: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    warm = s.get("warmup") or {"attempted": 0, "passed": 0, "failures": {}}
    sess = s["sessions"]
    timed = bool(settings.get("stages")) or settings.get("duration_s") is not None
    # a timed run ends sessions between turns: those count apart, not as failed
    want = sess["started"] - sess.get("cut", 0) if timed else settings.get("sessions")
    checks = [
        Check("every turn passed its verdict", s["attempted"] > 0 and s["passed"] == s["attempted"] and warm["passed"] == warm["attempted"],
              f"{s['passed']}/{s['attempted']} passed" + (f"; failures: {s['failures']}" if s["failures"] else "")
              + (f"; warm-up {warm['passed']}/{warm['attempted']} passed" + (f", failures: {warm['failures']}" if warm["failures"] else "") if warm["attempted"] else "")),
        Check(f"every session ran its {settings.get('turns')} turns", sess["complete"] == want and sess["complete"] > 0,
              f"{sess['complete']}/{want} complete" + (f" ({sess['cut']} more cut short by the end of the run)" if timed and sess.get("cut") else "")),
    ]
    return checks + kernel_checks(s, "turn")


def render_sessions(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    conns = st.get("conns") or max(1, (st.get("sessions") or 1) // 4)
    out = header(doc, "sessions")
    if st.get("stages"):
        shape = "concurrent sessions ramping " + " → ".join(f"{x.rpartition(':')[2]} in {x.rpartition(':')[0]}" for x in st["stages"]) + f", {st.get('turns')} turns each"
    elif st.get("duration_s"):
        shape = f"{st.get('sessions')} sessions at a time x {st.get('turns')} turns for {st['duration_s']:g} s"
    else:
        shape = f"{st.get('sessions')} sessions x {st.get('turns')} turns"
    out += [
        f"{shape} over {conns} connections"
        + (" (each turn on the next connection)" if st.get("reconnect") else " (several sessions interleaved on each)")
        + f", mix `{st.get('mix')}`",
        "",
        "| attempted | passed | pass rate | sessions complete | history problems |",
        "|---:|---:|---:|---:|---:|",
        f"| {s.get('attempted')} | {s.get('passed')} | {fmt_pct(s.get('pass_rate'))} | {(s.get('sessions') or {}).get('complete')}/{(s.get('sessions') or {}).get('started')} | {s.get('history_failures')} |",
        "",
    ]
    by_kernel, kernel_latency = kernel_sections(s)
    out += by_kernel
    w = s.get("warmup")
    if w:
        out += [f"Warm-up: the first {fmt_num(st.get('warmup_s'), '{:g} s')}, {w['passed']}/{w['attempted']} turns passed; kept out of every statistic below.", ""]
    out += stage_section(s.get("stages"), "sessions")
    if s.get("history_example"):
        out += [f"First history problem: {md_code(s['history_example'])}", ""]
    if s.get("failures"):
        ex = s.get("failure_examples") or {}
        out += ["| failure | count | first seen as |", "|---|---:|---|"]
        out += [f"| {md_text(k)} | {v} | {md_code(ex.get(k, k))} |" for k, v in s["failures"].items()] + [""]
    if kernel_latency:
        out += ["## Latency by kernel (passed turns)", ""] + kernel_latency
    out += latency_by_marker_section(s)
    out += ["## Latency by turn index (passed turns)", "", "| turn | attempted | passed | p50 | p95 | mean |", "|---:|---:|---:|---:|---:|---:|"]
    for r in s.get("by_turn") or ():
        out.append(f"| {r['turn']} | {r['attempted']} | {r['passed']} | {fmt_ms(r['p50'])} | {fmt_ms(r['p95'])} | {fmt_ms(r['mean'])} |")
    out.append("")
    if s.get("last_vs_first_p50"):
        out += [f"The last turn's p50 is {s['last_vs_first_p50']:.2f}x the first's.", ""]
    m = s.get("memory") or {}
    if m.get("rss_before_mb") is not None:
        out += [f"Kernel memory (process tree RSS): {fmt_num(m.get('rss_before_mb'), '{:.1f} MB')} before the first turn, "
                f"{fmt_num(m.get('rss_after_mb'), '{:.1f} MB')} after the last: **{fmt_num(m.get('kb_per_session'), '{:.1f} KiB')} per session held**.", ""]
    out += checks_section(doc)
    return "\n".join(out)


ISOLATION = "every session kept its own history"


def sessions_all_checks(s: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    checks = sessions_checks(s, settings)
    if settings.get("contract_sessions", True):
        checks.append(Check(ISOLATION, s["history_failures"] == 0,
                            s["history_example"] or "turn t carried exactly turns 1..t-1 of its own session, each whole, in every session"))
    else:
        # Isolation is what this scenario is for: a kernel that declares no
        # sessions cannot have it checked, and a run that checked only the
        # verdicts must not read as a pass of it (exit 6, docs/results.md).
        checks.append(Check(ISOLATION, False, ran=False, detail=(
            "not checked: the contract says sessions=false (the default for any kernel but the reference kernel), "
            "so the turns' histories were not held to their sessions; what ran proves only the verdicts above. "
            "A kernel that keeps a history per session declares sessions=true (--contract sessions=true, docs/targets.md)")))
    return checks


def _settings_json(s: SessionsSettings, targets: Sequence[Target]) -> dict[str, Any]:
    d = settings_json(s)
    d["contract_sessions"] = targets[0].contract.sessions if targets else True
    return d


SCENARIO = Scenario(
    name="sessions",
    help="Concurrent multi-turn sessions, each turn checked for isolation; latency by turn index; memory per session.",
    settings=SessionsSettings,
    run=run_sessions,
    summarize=summarize_sessions,
    digest=SessionsDigest,
    checks=sessions_all_checks,
    render=render_sessions,
    to_json=_settings_json,
    kernels=True,
    compare=CompareSpec(
        kinds=("session",),
        must_match={"mix": MIX_MATTERS, **SHAPE,
                    "sessions": "the number of concurrent sessions is the load level", "turns": "history length grows with the turns",
                    "reconnect": "resuming sessions elsewhere is another workload"},
        rows=lambda pair, s: load_compare_rows(pair, s, resources=False),
        normalize={"mix": mix_key},
        contract_keys=("batch", "order", "sessions"),
    ),
)
