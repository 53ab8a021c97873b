"""stress: C connections x K inputs (closed model) or R inputs/s (open model),
a weighted marker mix, an optional interrupt stream, resource and kernel-stats
sampling, a replay-guard probe, and an orphan check at the end.

Accounting (docs/metrics.md): the pass rate's denominator is every input
attempted, connection failures included; only passed turns enter latency
statistics; in the open model latency is also measured from the *scheduled*
send time, so a stalled kernel cannot hide behind a slowed-down load
generator (coordinated omission).
"""

from __future__ import annotations

import asyncio
import bisect
import itertools
import re
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from mock.errors import MarkerError
from mock.markers import build_plan

from ..wire.client import ConnError, KernelClient, new_nonce
from ..errors import UsageError
from .options import check_timeouts, connect_opt, fleet_opt, fleet_workers_opt, metrics_opt, opt, out_opt, quiet_opt, threshold_opt
from ..fleet import parse_fleet
from .fleetrun import drive_fleet, share_targets
from ..results.report import checks_section, fmt_ms, fmt_num, fmt_pct, header, latency_by_marker_section, md_code, md_text
from ..results.concurrency import finding_text
from ..results.concurrency import line as concurrency_line
from ..results.comparison import SHAPE, CompareSpec, RunPair, latency_rows, load_span, resource_rows, throughput_row
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario, settings_json
from ..load.sampler import Sampler
from ..results.aggregate import Level, Quantiles
from ..results.thresholds import LATENCY_PS, by_marker_of, check_mix_markers
from ..load.kernels import check_split, schedule
from ..load.shapes import DURATION_HELP, MAX_RUN_S, Ramp, arrival_offsets, duration_parser, follow_level, parse_stages
from ..sandbox.sut import Access, Target, kernel_targets
from .common import kernel_checks, kernel_entry, kernel_sections
from .digest import ANATOMY_PARTS, LoadDigest

DEFAULT_MIX = "!batch4:3,!slowbatch2:1,!mixed3:1,!img:1,text:2"
DEFAULT_INTERRUPT_MARKER = "!batch2"
# over an agent protocol an interrupt is a cancel sent while the turn's tools
# run: tools long enough that an agent running on is seen asking again well
# past the cancel's bound (harness/judge/cancel.py)
AGENT_CANCEL_MARKER = "!slowbatch2:2000:0"
MAX_INPUTS = 1_000_000
DEFAULT_INPUTS = 10
ARRIVALS = ("constant", "poisson")


def check_shape(s: Any) -> None:
    """--duration, --stage, --warmup and --arrival together (stress and
    sessions): one way to say how long, every bad combination named."""
    if s.duration_s is not None and not 0 < s.duration_s <= MAX_RUN_S:
        raise UsageError(f"--duration {s.duration_s:g} s is invalid: use more than 0 and at most 24 h, e.g. --duration 30s")
    open_model = getattr(s, "rate", None) is not None
    stages = parse_stages(s.stages, integer=not open_model)
    if stages and s.duration_s is not None:
        raise UsageError(f"--duration {s.duration_s:g} s with --stage: the stages set the run's length; drop --duration, or add a stage that holds the level (--stage {s.duration_s:g}s:N)")
    if getattr(s, "arrival", "constant") != "constant" and not open_model:
        raise UsageError(f"--arrival {s.arrival}: arrivals are the open model's; add --rate R (inputs per second)")
    if s.warmup_s is not None:
        length = sum(st.duration_s for st in stages) if stages else s.duration_s
        if length is None:
            raise UsageError(f"--warmup {s.warmup_s:g} s needs a timed run: add --duration or --stage (the warm-up is the first part of that time)")
        if not 0 < s.warmup_s < length:
            raise UsageError(f"--warmup {s.warmup_s:g} s must be more than 0 and shorter than the run ({length:g} s)")


def parse_mix(spec: str) -> tuple[tuple[str, int], ...]:
    """``'!batch4:3,!slowbatch2:1,text:1'`` -> ((marker, weight), ...). The last
    ``:N`` of an item is its weight (default 1); ``text`` is a plain input."""
    items = []
    if not spec.strip():
        raise UsageError(f"--mix {spec!r} is empty; e.g. --mix '!batch4:3,text:1'")
    for raw in spec.split(","):
        raw = raw.strip()
        if not raw:
            raise UsageError(f"--mix {spec!r} has an empty item (two commas, or a trailing one); e.g. --mix '!batch4:3,text:1'")
        marker, weight = raw, 1
        head, sep, tail = raw.rpartition(":")
        if sep and re.fullmatch(r"[+-]?\d+", tail):  # a number there is always the weight, even a bad one
            marker, weight = head, int(tail)
        elif sep and head == "text":  # text takes no arguments: what follows it can only be a weight
            raise UsageError(f"--mix item {raw!r}: weight {tail!r} must be a whole number from 1 to 1000")
        if weight < 1 or weight > 1000:
            raise UsageError(f"--mix item {raw!r}: weight {weight} must be from 1 to 1000")
        if marker != "text":
            if not marker.startswith("!"):
                raise UsageError(f"--mix item {raw!r}: expected a marker like !batch4 or the word text")
            try:
                plan = build_plan(f"{marker} #probe")
            except MarkerError as exc:
                raise UsageError(f"--mix item {raw!r}: {exc}") from None
            if plan.kind == "text":
                raise UsageError(f"--mix item {raw!r}: {marker!r} is not a marker")
        items.append((marker, weight))
    if not items:
        raise UsageError(f"--mix {spec!r} is empty; e.g. --mix '!batch4:3,text:1'")
    return tuple(items)


MIX_HELP = (
    "Weighted markers, e.g. '!batch4:3,!slowbatch2:1,text:1'. The last ':N' of an item is always its "
    "weight: write '!err:429:1' for a 429 with weight 1 ('!err:429' is !err with weight 429). "
    "Default: " + DEFAULT_MIX + "."
)


@dataclass(frozen=True)
class StressSettings:
    conns: int = opt(32, "--conns", int, "Concurrent connections.")
    inputs: int | None = opt(None, "--inputs", int, "Inputs per connection (default 10; with --duration or --stage connections send until the time ends, and --inputs caps each).", show_default=False)
    mix: str = opt(DEFAULT_MIX, "--mix", str, MIX_HELP, show_default=False)
    interrupts: float = opt(0.0, "--interrupts", float, "Interrupt-priority inputs per second.")
    interrupt_marker: str = DEFAULT_INTERRUPT_MARKER
    duration_s: float | None = opt(None, "--duration", str, f"Run length: connections keep sending until it ends ({DURATION_HELP}).", parse=duration_parser("--duration"))
    rate: float | None = opt(None, "--rate", float, "Open model: inputs per second (latency also from the scheduled time); with --stage, the rate the first stage ramps from.")
    stages: tuple[str, ...] = opt((), "--stage", str, "DURATION:TARGET, repeatable: ramp linearly to TARGET connections (inputs/s with --rate) within DURATION, from 0 (or --rate); e.g. --stage 10s:32 --stage 30s:32 --stage 10s:0.", multiple=True)
    arrival: str = opt("constant", "--arrival", str, "Open model: arrivals evenly spaced (constant) or a Poisson process of the same rate (poisson).", choices=ARRIVALS)
    warmup_s: float | None = opt(None, "--warmup", str, "The first DURATION of a timed run is warm-up: its turns are verified but kept out of every statistic and threshold.", parse=duration_parser("--warmup"))
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take.")
    connect_timeout_s: float = connect_opt()
    seed: int = opt(1, "--seed", int, "Seed of the marker mix.")
    sample_interval_s: float = 0.5
    dedup_probe: bool = opt(True, "--no-dedup-probe", bool, "Skip the replay-guard probe (for kernels without one).")
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()
    metrics_port: int | None = metrics_opt()
    fleet: str | None = fleet_opt()
    fleet_workers: int | None = fleet_workers_opt()

    def __post_init__(self) -> None:
        if not 1 <= self.conns <= 20_000:
            raise UsageError(f"--conns {self.conns} is invalid: use 1 to 20000 (RLIMIT_NOFILE bounds it)")
        if self.inputs is not None and not 1 <= self.inputs <= 100_000:
            raise UsageError(f"--inputs {self.inputs} is invalid: use 1 to 100000 per connection")
        if self.conns * (self.inputs or DEFAULT_INPUTS) > MAX_INPUTS:
            raise UsageError(f"--conns x --inputs = {self.conns * (self.inputs or DEFAULT_INPUTS)} is over the {MAX_INPUTS} bound of one run")
        if self.interrupts < 0 or self.interrupts > 1000:
            raise UsageError(f"--interrupts {self.interrupts} is invalid: use 0 to 1000 per second")
        check_shape(self)
        if self.rate is not None and not 0 < self.rate <= 100_000:
            raise UsageError(f"--rate {self.rate} is invalid: use 0 < R <= 100000 inputs per second")
        check_timeouts(self)
        mix = parse_mix(self.mix)
        try:
            build_plan(f"{self.interrupt_marker} #probe")
        except MarkerError as exc:
            raise UsageError(f"--interrupt-marker {self.interrupt_marker!r}: {exc}") from None
        check_mix_markers(self.thresholds, [m for m, _ in mix] + ([self.interrupt_marker] if self.interrupts else []))
        if self.fleet is not None:
            parse_fleet(self.fleet, self.fleet_workers, allow_remote=None)  # the host is checked with the access's --allow-remote
        elif self.fleet_workers is not None:
            raise UsageError(f"--fleet-workers {self.fleet_workers} without --fleet: name the cluster, e.g. --fleet ray://127.0.0.1:10001")

    @property
    def timed(self) -> bool:
        return bool(self.stages) or self.duration_s is not None

    def ramp(self) -> Ramp | None:
        """The level over time (connections, or inputs/s with --rate); None
        for a run counted in inputs."""
        if self.stages:
            return Ramp(parse_stages(self.stages, integer=self.rate is None), self.rate or 0.0)
        if self.duration_s is not None:
            return Ramp.constant(self.rate or self.conns, self.duration_s)
        return None

    @property
    def per_conn(self) -> int | None:
        """Inputs one connection sends at most (None: until the time ends)."""
        return self.inputs if self.inputs is not None else (None if self.timed else DEFAULT_INPUTS)

    @property
    def total_cap(self) -> int:
        """Inputs the whole run sends at most: every load loop is bounded."""
        if self.inputs is not None and not self.stages:
            return self.conns * self.inputs
        return MAX_INPUTS if self.timed else self.conns * DEFAULT_INPUTS


_M64 = (1 << 64) - 1


def _unit(seed: int, conn: int, seq: int) -> float:
    """A uniform draw in [0, 1) from (seed, conn, seq): two multiply-xorshift
    rounds over the three, the same on every host and Python version (about
    1 us; Python's tuple hash is faster but its draws for consecutive inputs
    correlate, -0.21 at lag 1, against 0.002 here)."""
    x = ((seed ^ ((conn & _M64) * 0xBF58476D1CE4E5B9) ^ (seq * 0x94D049BB133111EB)) * 0xD6E8FEB86659FD93) & _M64
    x = ((x ^ (x >> 32)) * 0xD6E8FEB86659FD93) & _M64
    return (x >> 11) * (1.0 / (1 << 53))


def _share_cap(s: StressSettings, worker: int, n: int) -> int:
    """Inputs worker ``worker`` of ``n`` sends at most: its connections'
    inputs, or its part of the open model's count; a timed run's bound split."""
    if s.rate is None and s.inputs is not None and not s.stages:
        return len(range(worker, s.conns, n)) * s.inputs
    total = s.total_cap
    return total // n + (1 if worker < total % n else 0)


class Load:
    """One stress load against the targets: its connections or arrivals, the
    turns they send and the verdicts they collect (findmax runs one per level)."""

    def __init__(self, s: StressSettings, target: Target, run: Run, targets: list[Target] | None = None, weights: tuple[float, ...] = (),
                 share: tuple[int, int] = (0, 1)) -> None:
        self.s = s
        # a fleet worker's share (harness/scenarios/fleetrun.py): worker w of n
        # drives connections w, w+n, ... (closed model) or inputs w, w+n, ...
        # (open model) of the one load; every marker is drawn from (seed,
        # connection, input), so the share draws what one process would
        self.worker, self.workers_n = share
        self.target = target
        self.run = run
        # several kernels at once: connections (closed model) or inputs (open
        # model) go to the kernels by weight (harness/load/kernels.py)
        self.targets = targets or [target]
        self.weights = weights or (1.0,) * len(self.targets)
        self.conn_kernel = schedule(s.conns, self.weights) if len(self.targets) > 1 else [0] * s.conns
        self.mix = parse_mix(s.mix)
        self.markers = [m for m, _ in self.mix]
        # cumulative once: a draw is one bisect
        self.cum_weights = list(itertools.accumulate(w for _, w in self.mix))
        self._total = self.cum_weights[-1] + 0.0
        self._hi = len(self.cum_weights) - 1
        self._seed = (s.seed * 0x9E3779B97F4A7C15) & _M64
        self.t0 = run.t0
        self.ramp = s.ramp()
        self.extra_labels: dict[str, Any] = {}
        self.stage_ends = list(itertools.accumulate(st.duration_s for st in parse_stages(s.stages, integer=s.rate is None)))
        self.begin()
        self.sent = 0
        self.cap = s.total_cap if self.workers_n == 1 else _share_cap(s, self.worker, self.workers_n)
        self.full = asyncio.Event()  # the run's input bound is reached
        self.workers = 0
        self.reconnects = 0
        self.capacity_errors: Counter[str] = Counter()

    def begin(self, t0: float | None = None) -> None:
        """The shape's clock starts now (after the stats connection and the
        sampler are up), or at a fleet's common ``t0``: deadline, warm-up and
        schedule count from here."""
        self.t0 = time.monotonic() if t0 is None else t0
        self.deadline = self.t0 + self.ramp.total_s if self.ramp is not None else None
        self.warm_until = self.t0 + self.s.warmup_s if self.s.warmup_s else None
        self.run.extras["load_t0_rel"] = round(self.t0 - self.run.t0, 4)

    def pick(self, conn: int, seq: int) -> str:
        """The marker of input ``seq`` of connection ``conn`` (the open model:
        conn -1, seq the input's index): a function of the seed and the two,
        whichever process draws it and in whatever order the turns end."""
        m = self.markers[bisect.bisect(self.cum_weights, _unit(self._seed, conn, seq) * self._total, 0, self._hi)]
        return "" if m == "text" else m

    def expired(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def take(self) -> bool:
        """One more input, if the run's bound allows it."""
        if self.sent >= self.cap:
            self.full.set()
            return False
        self.sent += 1
        return True

    def labels(self, at: float) -> dict[str, Any]:
        """Row labels of an input sent (or scheduled) at ``at``: warm-up turns
        say so; ``extra_labels`` (find-max's stage and level) go on every row."""
        out = dict(self.extra_labels)
        if self.warm_until is not None and at < self.warm_until:
            out["warmup"] = True
        if self.stage_ends:  # `[stage=N]` selects a stage's turns in a threshold
            out["stage"] = next((i for i, end in enumerate(self.stage_ends, 1) if at - self.t0 < end), len(self.stage_ends))
        return out

    async def record_conn_failure(self, marker: str, conn: int, seq: int, err: ConnError, kind: str = "load", target: Target | None = None) -> None:
        if err.kind == "capacity":
            self.capacity_errors[err.detail or "capacity"] += 1
        await self.run.record_failure(marker, err, target or self.target, kind=kind, conn=conn, seq=seq)

    async def connect(self, target: Target | None = None) -> KernelClient:
        c = (target or self.target).client(connect_timeout_s=self.s.connect_timeout_s)
        return await c.connect()

    async def ready(self, client: KernelClient | None, marker: str, conn: int, seq: int, target: Target | None = None) -> KernelClient | None:
        """A connected client for the next input: reconnect after a lost
        connection; None (and the input recorded as failed) when that fails."""
        if client is not None and client.connected:
            return client
        if client is not None:
            await client.aclose()
            self.reconnects += 1
        try:
            return await self.connect(target)
        except ConnError as exc:
            await self.record_conn_failure(marker, conn, seq, exc, target=target)
            return None

    async def closed_conn(self, conn: int, keep_going: Callable[[], bool] | None = None) -> None:
        """One connection of the closed model: send, wait for the turn, repeat
        — its count of inputs, or until the time ends (or a falling ramp
        sends it away: ``keep_going``)."""
        client: KernelClient | None = None
        target = self.targets[self.conn_kernel[conn % len(self.conn_kernel)]]  # a ramp's workers past --conns cycle over the kernels
        try:
            seq = 0
            while self.s.per_conn is None or seq < self.s.per_conn:
                if self.expired() or (keep_going is not None and not keep_going()) or not self.take():
                    return
                self.run.check_alive()
                marker = self.pick(conn, seq)
                at = time.monotonic()
                client = await self.ready(client, marker, conn, seq, target)
                if client is not None:
                    turn = await client.turn(marker, self.s.timeout_s)
                    await self.run.record(turn, target, kind="load", conn=conn, seq=seq, **self.labels(at))
                seq += 1
        finally:
            if client is not None:
                await client.aclose()

    async def closed_model(self) -> None:
        if self.ramp is None or not self.s.stages:
            mine = range(self.worker, self.s.conns, self.workers_n)
            async with asyncio.TaskGroup() as conns:
                for c in mine:
                    conns.create_task(self.closed_conn(c))
            self.workers = len(mine)
        else:
            w, n = self.worker, self.workers_n

            async def slot(wid: int, keep_going: Callable[[], bool]) -> None:
                await self.closed_conn(wid * n + w, keep_going)  # this process's slot wid is the level's slot wid*n + w

            self.workers = await follow_level(self.ramp, self.t0, slot, stop=self.full, share=(w, n))

    async def open_model(self) -> None:
        """Inputs scheduled by the rate (constant, or a Poisson process; along
        the stages' ramp) and handed to an idle connection of a pool of
        --conns; latency also counts from the scheduled time."""
        # one pool of idle connections per kernel, its share of --conns
        pools: list[asyncio.Queue[KernelClient | None]] = [asyncio.Queue() for _ in self.targets]
        for k in self.conn_kernel[self.worker::self.workers_n]:
            pools[k].put_nowait(None)
        # a run counted in inputs: the constant rate for as long as they take
        ramp = self.ramp or Ramp.constant(self.s.rate or 1.0, MAX_RUN_S)
        # which kernel each input goes to: by weight, interleaved; a period of the schedule, cycled (a timed run has no count)
        period = min(self.cap, max(1_000, self.s.conns))
        input_kernel = schedule(period, self.weights) if len(self.targets) > 1 else None

        async def one(i: int, scheduled: float) -> None:
            k = input_kernel[i % len(input_kernel)] if input_kernel is not None else 0
            pool, target = pools[k], self.targets[k]
            client = await pool.get()
            marker = self.pick(-1, i)
            try:
                client = await self.ready(client, marker, i % self.s.conns, i, target)
                if client is None:
                    return
                turn = await client.send(marker, timeout_s=self.s.timeout_s)
                turn.t_scheduled = scheduled
                turn = await client.collect(turn, self.s.timeout_s)
                await self.run.record(turn, target, kind="load", conn=i % self.s.conns, seq=i, **self.labels(scheduled))
            finally:
                pool.put_nowait(client)

        try:
            # one input's fatal error (the target died) cancels and awaits the others
            async with asyncio.TaskGroup() as tg:
                n, w = self.workers_n, self.worker
                for i, offset in enumerate(arrival_offsets(ramp, self.s.arrival, self.s.seed, self.s.total_cap)):
                    if i % n != w:
                        continue  # another worker's input of the one schedule
                    if self.sent >= self.cap:
                        break
                    scheduled = self.t0 + offset
                    delay = scheduled - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)  # pacing to the schedule, not synchronisation
                    self.run.check_alive()
                    self.sent += 1
                    tg.create_task(one(i, scheduled))
        finally:
            for pool in pools:
                while not pool.empty():
                    c = pool.get_nowait()
                    if c is not None:
                        await c.aclose()

    async def interrupts(self, stop: asyncio.Event) -> None:
        """Priority inputs at a fixed rate on their own connection until the load ends."""
        interval = 1.0 / self.s.interrupts
        clients: dict[int, KernelClient] = {}  # several kernels: the interrupts go round them in turn
        seq = 0
        next_at = time.monotonic()
        try:
            while not stop.is_set() and seq < 100_000:
                try:
                    await asyncio.wait_for(stop.wait(), max(0.0, next_at - time.monotonic()))
                    return
                except asyncio.TimeoutError:
                    pass
                next_at += interval
                k = seq % len(self.targets)
                target, client = self.targets[k], clients.get(k)
                if client is None or not client.connected:
                    try:
                        client = clients[k] = await self.connect(target)
                    except ConnError as exc:
                        await self.record_conn_failure(self.s.interrupt_marker, -1, seq, exc, kind="interrupt", target=target)
                        seq += 1
                        continue
                if hasattr(client, "interrupt"):
                    # an agent protocol: the interrupt is a cancel, verified from the mock's side
                    marker = AGENT_CANCEL_MARKER if self.s.interrupt_marker == DEFAULT_INTERRUPT_MARKER else self.s.interrupt_marker
                    turn = await client.interrupt(marker, self.s.timeout_s, target.cancel_point)
                else:
                    turn = await client.turn(self.s.interrupt_marker, self.s.timeout_s, interrupt=True)
                await self.run.record(turn, target, kind="interrupt", conn=-1, seq=seq)
                seq += 1
        finally:
            for client in clients.values():
                await client.aclose()

    async def drive(self, t0: float | None = None) -> None:
        """The load, with the interrupt stream beside it when one is asked for;
        what the connections met is kept in extras on every path. A fleet
        worker's load starts at the fleet's ``t0``; the interrupt stream is
        worker 0's."""
        stop = asyncio.Event()
        try:
            # one connection's fatal error (the target died) cancels and
            # awaits every other before the results are written
            self.begin(t0)
            if t0 is not None and t0 > time.monotonic():
                await asyncio.sleep(t0 - time.monotonic())  # the fleet's common start, not synchronisation of results
            async with asyncio.TaskGroup() as tg:
                if self.s.interrupts > 0 and self.worker == 0:
                    tg.create_task(self.interrupts(stop))
                try:
                    if self.s.rate:
                        await self.open_model()
                    else:
                        await self.closed_model()
                finally:
                    stop.set()
        finally:
            self.run.extras["reconnects"] = self.reconnects
            self.run.extras["capacity_errors"] = dict(self.capacity_errors)

    async def dedup_probe(self, target: Target | None = None) -> dict[str, Any]:
        """Send one input twice, identical: a kernel with a replay guard must
        drop the second (`duplicate: true`)."""
        target = target or self.target
        try:
            async with target.client(connect_timeout_s=self.s.connect_timeout_s) as c:
                first = await c.turn("", self.s.timeout_s, nonce=new_nonce("dup"))
                second = await c.turn(first.text, self.s.timeout_s, raw=True, nonce=first.nonce + "r")
        except ConnError as exc:
            return {"ok": False, "detail": f"could not connect: {exc}"}
        v1, v2 = await target.verdict(first), await target.verdict(second, expect_duplicate=True)
        for k, (turn, v) in enumerate(((first, v1), (second, v2))):
            row = v.to_json()
            row.update(kind="probe", conn=-2, seq=k, t_rel=round(turn.t_sent - self.run.t0, 4), duplicate=turn.duplicate)
            if target.kernel:
                row["kernel"] = target.kernel
            self.run.dir.turn(row)
            self.run.rows.append(row)
        if not v1.passed:
            return {"ok": False, "detail": f"the probe's first input failed: {v1.failure}"}
        if not v2.passed:
            return {"ok": False, "detail": "an identical input sent again was executed, not dropped as a replay (no dedup)"}
        return {"ok": True, "detail": "the identical second input came back duplicate: true"}


async def fleet_share(job: dict[str, Any], sink: Any, t0: float) -> dict[str, Any]:
    """A fleet worker's part of a stress load (harness/fleet/actor.py runs it)."""
    async with share_targets(job, sink) as run:
        load = Load(job["settings"], run.targets[0], run, run.targets, job["weights"], share=(job["worker"], job["workers"]))
        load.extra_labels = job.get("extra_labels") or {}  # findmax's stage and level
        sink.sent = lambda: load.sent
        await load.drive(t0)
    return run.extras


def summarize_stress(rows: Iterable[dict[str, Any]], extras: dict[str, Any] | None = None, settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Everything the report shows, from the turn rows alone (+ extras):
    `kstress report` recomputes it from turns.jsonl, through the digest a
    run feeds as it goes (harness/scenarios/digest.py)."""
    return StressDigest(settings or {}, extras or {}).feed(rows).summary()


class StressDigest(LoadDigest):
    """stress's summary from its streaming aggregates: warm-up turns are
    verified (the check counts them) but out of every statistic; failures
    are keyed by their name without numbers (`count 1/4` and `count 3/4` are
    one row), the first full reason of each kept as an example."""

    def summary(self) -> dict[str, Any]:
        extras, settings = self.extras, self.settings
        inp = self.inputs
        failures, examples = inp.failure_counts()
        # from the first send to the last end: what the load took, the same span a throughput threshold uses
        duration = inp.span()
        kstats = extras.get("kernel_stats") or {}
        res = extras.get("resources") or {}
        warm = self.warm
        return {
            "attempted": inp.attempted,
            "passed": inp.passed,
            "pass_rate": (inp.passed / inp.attempted) if inp.attempted else None,
            "failures": failures,
            "failure_examples": examples,
            "interrupts": {"attempted": self.interrupts.attempted, "passed": self.interrupts.passed} | self.cancel_summary(),
            "latency_s": _pcts(inp.lat),
            "latency_by_marker": by_marker_of(inp.lat, self.by_marker),
            "throughput": self.ends.windows(),
            "first_frame_s": _pcts(self.first),
            "scheduled_latency_s": _pcts(self.sched) if self.sched.n else None,
            "throughput_per_s": round(inp.passed / duration, 2) if duration > 0 else None,
            "duration_s": round(duration, 3),
            **_counters(kstats, res, extras.get("kernel_stats_start"), fresh=extras.get("orphans") is not None),
            "reconnects": extras.get("reconnects", 0),
            "capacity_errors": extras.get("capacity_errors", {}),
            "dedup_probe": extras.get("dedup_probe"),
            "anatomy": self.anatomy_table(),
            "warmup": ({"attempted": warm.attempted, "passed": warm.passed, **dict(zip(("failures", "failure_examples"), warm.failure_counts()))}
                       if warm.attempted or settings.get("warmup_s") else None),
            "stages": self.stage_table(),
            "orphans": extras.get("orphans"),
            "concurrency": inp.conc.summary() if inp.conc is not None else None,
            **({"kernels": [self._kernel(k) for k in extras["kernels"]]} if extras.get("kernels") else {}),
        }


    def _kernel(self, k: dict[str, Any]) -> dict[str, Any]:
        """One kernel's entry: its turns' figures, counters and concurrency."""
        lvl = self.kernels.get(k["name"]) or Level(concurrency=True)
        entry = kernel_entry(k, lvl, lvl, self.extras)
        return {**entry, **_counters(k.get("kernel_stats") or {}, k.get("resources") or {}, k.get("kernel_stats_start"), fresh=entry.get("orphans") is not None),
                "concurrency": lvl.conc.summary() if lvl.conc is not None else None}


def concurrency_lines(s: dict[str, Any]) -> list[str]:
    """The report's lines: the run's (each kernel's when there are several), and the finding."""
    ks = [(k["name"], k.get("concurrency")) for k in s.get("kernels") or () if "concurrency" in k]
    if not s.get("concurrency") and not ks:
        return []
    first = concurrency_line(s.get("concurrency"))
    out = [first[:1].upper() + first[1:] + ".", ""]
    out += [f"- {md_text(name)}: {concurrency_line(c)}" for name, c in ks] + ([""] if ks else [])
    for name, c in [(None, s.get("concurrency"))] + ks:
        if c and c.get("finding"):
            out += [f"**Finding{f' ({md_text(name)})' if name else ''}:** {md_text(finding_text(c))}.", ""]
    return out


COUNTERS = ("executed", "rejected", "suspended", "resumed", "preempted", "duplicates")  # totals since the kernel started


def _counters(kstats: dict[str, Any], res: dict[str, Any], start: dict[str, Any] | None = None, fresh: bool = False) -> dict[str, Any]:
    """The kernel's counters, queue peak and resources a summary shows (the
    whole run's, or one kernel's of several). A kernel's counters are totals
    since it started: a sandbox kept running (`kstress up`, launch.sh) has
    earlier runs in them. With the counters read when the run started
    (``start``) they are this run's: the end minus the start; without, they
    are the run's only when the run launched the kernel (``fresh``), and
    ``kernel_counted`` says ``lifetime`` otherwise."""
    kernel = {k: kstats.get(k) for k in (*COUNTERS, "peak_queued", "children", "llm_state") if k in kstats}
    peak = max((v for v in (kstats.get("peak_queued"), res.get("peak_queued")) if v is not None), default=None)
    if start and kernel:
        for k in COUNTERS:
            if isinstance(kernel.get(k), (int, float)) and isinstance(start.get(k), (int, float)):
                kernel[k] = kernel[k] - start[k]
        # the kernel's peak is its lifetime's: this run's only if the run raised it
        if isinstance(start.get("peak_queued"), (int, float)) and peak is not None and peak <= start["peak_queued"]:
            kernel.pop("peak_queued", None)
            peak = None
    return {
        "kernel": kernel,
        "kernel_counted": None if not kernel else ("run" if start or fresh else "lifetime"),
        # 0 is a peak too: only a missing value is skipped
        "peak_queue": peak,
        "resources": {k: res.get(k) for k in ("peak_rss_mb", "peak_cpu_pct", "mean_cpu_pct", "peak_threads", "peak_fds", "peak_children", "samples", "sampler_cpu_s") if k in res},
    }


def _pcts(q: Quantiles) -> dict[str, Any]:
    s = q.stats(LATENCY_PS)
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items()}


def stress_checks(summary: dict[str, Any], settings: dict[str, Any] | None = None) -> list[Check]:
    warm = summary.get("warmup") or {"attempted": 0, "passed": 0, "failures": {}}
    checks = [
        Check(
            "every input passed its verdict",
            summary["attempted"] > 0 and summary["passed"] == summary["attempted"] and warm["passed"] == warm["attempted"],
            f"{summary['passed']}/{summary['attempted']} passed" + (f"; failures: {summary['failures']}" if summary["failures"] else "")
            + (f"; warm-up {warm['passed']}/{warm['attempted']} passed" + (f", failures: {warm['failures']}" if warm["failures"] else "") if warm["attempted"] else ""),
        )
    ]
    checks += kernel_checks(summary)
    probe = summary.get("dedup_probe")
    if probe is not None:
        checks.append(Check("replay guard drops an identical input", bool(probe.get("ok")), probe.get("detail", "")))
    return checks


class _Watch:
    """What watches the kernels beside the load: each one's stats connection
    (its counters at the end) and resource sampler. What they measured goes in
    run.extras, or in the kernel's own entry when there are several."""

    def __init__(self, s: StressSettings, run: Run, targets: list[Target], per_kernel: list[dict[str, Any]], skipped: list[dict[str, Any]]) -> None:
        self.s = s
        self.run = run
        self.targets = targets
        self.per_kernel = per_kernel
        self.skipped = skipped
        self.many = len(targets) > 1
        self.stats_clients: list[KernelClient | None] = [None] * len(targets)
        self.samplers: list[Sampler | None] = [None] * len(targets)

    async def open(self) -> None:
        """Each kernel's stats connection (when its contract has the frame), then its sampler."""
        for i, t in enumerate(self.targets):
            of = f" of {t.kernel}" if self.many else ""
            if t.contract.stats:
                try:
                    self.stats_clients[i] = await t.client(connect_timeout_s=self.s.connect_timeout_s).connect()
                except ConnError:
                    self.stats_clients[i] = None
                if self.stats_clients[i] is not None:
                    try:
                        # the counters before the first input: a kept sandbox's kernel counts earlier runs too
                        self._keep(i, "kernel_stats_start", await self.stats_clients[i].stats())
                    except ConnError:
                        pass  # no start value: the report labels the counters lifetime (unless the run launched the kernel)
            else:
                self.skipped.append({"check": f"kernel counters (stats frame){of}", "why": "the contract says stats=false"})
            if t.target_pid is not None:
                path = self.run.dir.path / f"resources-{t.kernel}.jsonl" if self.many else self.run.dir.resources_path
                sc = self.stats_clients[i]
                sampler = Sampler(t.target_pid, path, self.s.sample_interval_s, sc.stats if sc else None)
                if sampler.preflight() is None:
                    await sampler.start()
                    self.samplers[i] = sampler

    async def read_counters(self) -> None:
        """The kernels' counters once the load is over; a connection gone by then has none."""
        for i, sc in enumerate(self.stats_clients):
            if sc is not None:
                try:
                    got = await sc.stats()
                except ConnError:
                    continue
                self._keep(i, "kernel_stats", got)

    async def close(self) -> None:
        """Every sampler stopped (its peaks kept), then every stats connection closed."""
        for i, sampler in enumerate(self.samplers):
            if sampler is not None:
                got = (await sampler.stop()).to_json()
                self._keep(i, "resources", got)
        for sc in self.stats_clients:
            if sc is not None:
                await sc.aclose()

    def _keep(self, i: int, key: str, got: Any) -> None:
        if self.many:
            self.per_kernel[i][key] = got
        else:
            self.run.extras[key] = got


async def _replay_probes(load: Load, targets: list[Target], per_kernel: list[dict[str, Any]], skipped: list[dict[str, Any]], extras: dict[str, Any]) -> None:
    """The replay-guard probe of each kernel that declares a guard, and one
    result for the run (with several kernels, every one's guard must hold)."""
    many = len(targets) > 1
    probes = []
    for t, k in zip(targets, per_kernel):
        if load.s.dedup_probe and t.contract.dedup:
            probe = await load.dedup_probe(t)
            probes.append((t, probe))
            k["dedup_probe"] = probe
        elif load.s.dedup_probe:
            of = f" ({t.kernel})" if many else ""
            skipped.append({"check": f"replay guard drops an identical input{of}", "why": "the contract says dedup=false (the kernel declares no replay guard)"})
    if probes and not many:
        extras["dedup_probe"] = probes[0][1]
    elif probes:
        bad = [(t, p) for t, p in probes if not p.get("ok")]
        extras["dedup_probe"] = {"ok": not bad, "detail": "; ".join(f"{t.kernel}: {p.get('detail')}" for t, p in (bad or probes))}


async def run_stress(settings: StressSettings, access: Access) -> RunResult:
    targets = kernel_targets(access)  # one, or several kernels at once (--launch with --bin/--target repeated)
    target = targets[0]
    many = len(targets) > 1
    for t in targets:
        t.prepare()
        if settings.interrupts > 0 and not t.contract.interrupts:
            of = f" of {t.kernel}" if many else ""
            raise UsageError(f"--interrupts {settings.interrupts:g}: the kernel's contract{of} says interrupts=false; drop --interrupts, or declare --contract interrupts=true")
    weights = access.weights if many else ()
    fleet = parse_fleet(settings.fleet, settings.fleet_workers, access.allow_remote) if settings.fleet else None
    shares = check_split("connections", settings.conns, weights, access.names, "--conns") if many else [settings.conns]

    async def body(run: Run) -> None:
        load = Load(settings, target, run, targets, weights)
        extras = run.extras
        per_kernel = extras.get("kernels") or [{} for _ in targets]  # several kernels: what each one measured beside its turns
        for k, w, n in zip(per_kernel, weights, shares):
            k.update(weight=w, conns=n)
        skipped = extras.setdefault("skipped", [])
        watch = _Watch(settings, run, targets, per_kernel, skipped)
        try:
            await watch.open()
            if fleet is not None:
                await drive_fleet(run, fleet, "harness.scenarios.stress:fleet_share", settings, targets, weights)
            else:
                await load.drive()
            run.check_alive()
            await _replay_probes(load, targets, per_kernel, skipped, extras)
            if not skipped:
                del extras["skipped"]
            await watch.read_counters()
        finally:
            await watch.close()
        run.check_alive()

    return await run_scenario(SCENARIO, settings, targets, body, total=None if settings.timed else settings.total_cap)


def summarize_run(rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    return summarize_stress(rows, extras, settings)


def shape_line(st: dict[str, Any]) -> str:
    """What load ran, in one line: model, level, length."""
    rate, stages = st.get("rate"), st.get("stages") or ()
    if stages:
        unit = "inputs/s" if rate else "connections"
        base = f"open model ({st.get('arrival', 'constant')} arrivals, a pool of {st.get('conns')} connections)" if rate else "closed model"
        start = f" from {rate:g}" if rate else " from 0"
        return f"{base}, stages{start} → " + " → ".join(f"{x.rpartition(':')[2]} in {x.rpartition(':')[0]}" for x in stages) + f" ({unit})"
    length = f" for {st['duration_s']:g} s" if st.get("duration_s") else ""
    count = f" x {st['inputs']} inputs" if st.get("inputs") else ("" if length else f" x {DEFAULT_INPUTS} inputs")
    if rate:
        return f"open model at {rate:g} inputs/s ({st.get('arrival', 'constant')} arrivals), a pool of {st.get('conns')} connections{count}{length}"
    return f"{st.get('conns')} connections{count}{length} (closed model)"


def stage_section(stages: list[dict[str, Any]] | None, unit: str, title: str = "Stages") -> list[str]:
    if not stages:
        return []
    out = [f"## {title}", "", f"| stage | to ({unit}) | attempted | pass rate | p50 | p95 | p99 | throughput | errors |", "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in stages:
        lat = r.get("latency_s") or {}
        errs = md_text(", ".join(f"{k} {v}" for k, v in (r.get("errors") or {}).items()) or "-")
        out.append(f"| {r['stage']} `{r['spec']}` | {r['target']:g} | {r['attempted']} | {fmt_pct(r.get('pass_rate'))} | {fmt_ms(lat.get('p50'))} | {fmt_ms(lat.get('p95'))} | {fmt_ms(lat.get('p99'))} | {fmt_num(r.get('throughput_per_s'), '{:.1f}/s')} | {errs} |")
    return out + [""]


def cancel_lines(i: dict[str, Any]) -> list[str]:
    c = i.get("cancels")
    if not c:
        return []
    answers = ", ".join(f"`{a}` ×{n}" for a, n in sorted(c["answers"].items()))
    return [f"Cancels (interrupts over an agent protocol, docs/protocol.md *Cancels*): {c['sent']} sent while the turn's tools ran, "
            f"{c['honoured']} honoured, {c['ignored']} ignored (cancel_ignored)" + (f"; the cancel request was answered {answers}" if answers else "") + ".", ""]


def render_stress(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    out = header(doc, "stress")
    out += [shape_line(st) + f", mix `{st.get('mix')}`" + (f", {st.get('interrupts')} interrupts/s" if st.get("interrupts") else ""), ""]
    w = s.get("warmup")
    if w:
        out += [f"Warm-up: the first {fmt_num(st.get('warmup_s'), '{:g} s')}, {w['passed']}/{w['attempted']} turns passed"
                + (f" (failures: {md_text(w['failures'])})" if w.get("failures") else "") + "; kept out of every statistic below.", ""]
    out += stage_section(s.get("stages"), "connections" if not st.get("rate") else "inputs/s")
    out += [
        "## Verdicts",
        "",
        "| attempted | passed | pass rate | throughput |",
        "|---:|---:|---:|---:|",
        f"| {s.get('attempted')} | {s.get('passed')} | {fmt_pct(s.get('pass_rate'))} | {fmt_num(s.get('throughput_per_s'), '{:.1f}/s')} |",
        "",
    ]
    out += concurrency_lines(s)
    out += cancel_lines(s.get("interrupts") or {})
    by_kernel, kernel_latency = kernel_sections(s)
    out += by_kernel
    if s.get("failures"):
        ex = s.get("failure_examples") or {}
        out += ["| failure | count | first seen as |", "|---|---:|---|"]
        out += [f"| {md_text(k)} | {v} | {md_code(ex.get(k, k))} |" for k, v in s["failures"].items()] + [""]
    out += ["## Latency (passed turns only)", "", "| measure | n | p50 | p90 | p95 | p99 | max | mean |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, key in (("done (from send)", "latency_s"), ("first frame", "first_frame_s"), ("done (from schedule)", "scheduled_latency_s")):
        p = s.get(key)
        if p:
            out.append(f"| {name} | {p.get('n')} | " + " | ".join(fmt_ms(p.get(k)) for k in ("p50", "p90", "p95", "p99", "max", "mean")) + " |")
    out.append("")
    if kernel_latency:
        out += ["Done (from send), by kernel:", ""] + kernel_latency
    out += latency_by_marker_section(s)
    an = s.get("anatomy") or {}
    if an:
        out += ["## Where the time went (turn anatomy, passed turns, p50 / p95)", "",
                "| marker | n | before the LLM | LLM | tools | between requests | after the LLM | kernel overhead |",
                "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for m, a in an.items():
            cells = " | ".join(f"{fmt_ms(a[k]['p50'])} / {fmt_ms(a[k]['p95'])}" for k in ANATOMY_PARTS)
            out.append(f"| `{m}` | {a['n']} | {cells} |")
        out += ["", "Kernel overhead = turn − LLM − tools; before + LLM + between + after = the turn (docs/metrics.md).", ""]
    # several kernels: one row (one line) each, named
    for name, ks in ([(kk["name"], kk) for kk in s.get("kernels") or ()] or [(None, s)]):
        k = ks.get("kernel") or {}
        if k:
            counted = (" — the kernel's lifetime totals (a kept sandbox: earlier runs included; no count at this run's start)" if ks.get("kernel_counted") == "lifetime"
                       else " — this run's (at its end minus at its start)")
            out += [f"## Kernel counters{f' ({md_text(name)})' if name else ''}", "", f"The counts{counted}.", "",
                    "| " + " | ".join(k) + " |", "|" + "---:|" * len(k), "| " + " | ".join(md_text(v) for v in k.values()) + " |", ""]
    for name, ks in ([(kk["name"], kk) for kk in s.get("kernels") or ()] or [(None, s)]):
        r = ks.get("resources") or {}
        if not r:
            continue
        out += [
            f"## Resources ({f'{md_text(name)}, its' if name else 'target'} process tree)",
            "",
            f"peak RSS {fmt_num(r.get('peak_rss_mb'), '{:.1f} MB')}, peak CPU {fmt_num(r.get('peak_cpu_pct'), '{:.0f}%')} "
            f"(mean {fmt_num(r.get('mean_cpu_pct'), '{:.0f}%')}), peak threads {r.get('peak_threads')}, peak fds {r.get('peak_fds')}, "
            f"peak children {r.get('peak_children')}, peak queue {'n/a' if ks.get('peak_queue') is None else ks['peak_queue']}; {r.get('samples')} samples, "
            f"sampler CPU {fmt_num(r.get('sampler_cpu_s'), '{:.3f} s')}",
            "",
        ]
    if s.get("capacity_errors"):
        out += [f"Capacity errors (harness side): {s['capacity_errors']}", ""]
    out += checks_section(doc)
    return "\n".join(out)


MIX_MATTERS = "the marker mix decides what each turn asks of the kernel"


def mix_key(spec: str) -> list[tuple[str, int]]:
    """A mix as `kstress compare` matches it: the order of the items does not
    matter, their weights do."""
    return sorted(parse_mix(spec))


def load_compare_rows(pair: RunPair, s: dict[str, Any], *, resources: bool) -> list[dict[str, Any]]:
    """`kstress compare` of two load runs (stress, sessions), after the pass
    rate: latency, all and per marker (and from the schedule in the open
    model), throughput, and with ``resources`` the target's samples."""
    old, new = pair.old, pair.new
    rows = latency_rows(old, new, s)
    if any(isinstance(r.get("scheduled_s"), (int, float)) for r in old + new):
        rows.append(latency_rows(old, new, s, key="scheduled_s", label="latency from schedule")[0])
    rows.append(throughput_row(old, new, s))
    if resources:
        rows += resource_rows(pair.old_dir, pair.new_dir, {"old": load_span(old), "new": load_span(new)}, s)
    return rows


def stress_json(settings: StressSettings, targets: Any = ()) -> dict[str, Any]:
    """run.json's settings: ``inputs`` is what each connection was to send --
    the default 10 was stored as null, which reads as "no cap" (a timed run's)."""
    d = settings_json(settings, targets)
    d["inputs"] = settings.per_conn
    return d


SCENARIO = Scenario(
    name="stress",
    help="Many connections, a marker mix, every turn verified.",
    settings=StressSettings,
    run=run_stress,
    summarize=summarize_run,
    digest=StressDigest,
    checks=stress_checks,
    render=render_stress,
    to_json=stress_json,
    kernels=True,
    compare=CompareSpec(
        kinds=("load", "interrupt"),
        must_match={"mix": MIX_MATTERS, **SHAPE,
                    "interrupts": "interrupt inputs compete with the load", "interrupt_marker": "interrupt inputs compete with the load"},
        rows=lambda pair, s: load_compare_rows(pair, s, resources=True),
        normalize={"mix": mix_key},
        contract_keys=("batch", "order"),  # the dedup probe and the counters are no row; interrupts > 0 needs interrupts=true in both
    ),
)
