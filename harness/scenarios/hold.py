"""hold: open C connections, authenticate them all, keep them open together,
prove the kernel still answers on them, then close them -- from this one
process, or from a fleet of workers (--fleet), on one kernel or several at
once (--bin/--target repeated, split by --weight).

Measures the harness's own memory per held connection, the time to open
them, and sorts every connection that failed by name (`capacity` =
EMFILE/ENFILE/ENOBUFS/ENOMEM on our side, `backlog_full`, `refused`, ...).
"""

from __future__ import annotations

import asyncio
import gc
import math
import resource
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import psutil

from ..wire.client import ConnError, KernelClient
from ..errors import InfraError, KstressError, UsageError
from ..fleet import Fleet, WorkerInfo, parse_fleet
from ..load.kernels import check_split, schedule
from .fleetrun import drive_fleet, share_targets
from .options import check_timeouts, connect_opt, fleet_opt, fleet_workers_opt, metrics_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, fmt_num, header, md_text
from ..results.comparison import CompareSpec
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario
from ..sandbox.sut import Access, Target, kernel_targets

FD_RESERVE = 256  # descriptors the process needs besides the connections
# a fleet worker waits for the head's signal past the longest its slowest
# sibling may take (opening, or probing) by this much before it names the wait
SIGNAL_SLACK_S = 60.0


@dataclass(frozen=True)
class HoldSettings:
    conns: int = opt(10_000, "--conns", int, "Connections to hold at once (with --fleet: over all the workers).")
    probe: int = opt(32, "--probe", int, "Held connections that send one input at once (keep it within the kernel queue).")
    connect_concurrency: int = 512
    connect_timeout_s: float = connect_opt(30.0)  # 10,000 at once, 512 at a time: each waits its turn
    timeout_s: float = opt(120.0, "--timeout", float, "Seconds one turn may take.")
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    metrics_port: int | None = metrics_opt()
    thresholds: tuple[str, ...] = threshold_opt()
    fleet: str | None = fleet_opt()
    fleet_workers: int | None = fleet_workers_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        if self.fleet is not None:
            spec = parse_fleet(self.fleet, self.fleet_workers, allow_remote=None)  # the host is checked with the access's --allow-remote
        elif self.fleet_workers is not None:
            raise UsageError(f"--fleet-workers {self.fleet_workers} without --fleet: name the cluster, e.g. --fleet ray://127.0.0.1:10001")
        if self.conns < 1:
            raise UsageError(f"--conns {self.conns} is invalid: use 1 or more")
        # the descriptor limit is a process's: with a fleet each worker holds
        # its share (a cluster of unknown size is checked by each worker)
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        workers = (spec.workers or 1) if self.fleet is not None else 1
        most = math.ceil(self.conns / workers)
        if most > soft - FD_RESERVE:
            if self.fleet is None:
                raise UsageError(
                    f"--conns {self.conns} is invalid: RLIMIT_NOFILE is {soft} here and the process needs "
                    f"~{FD_RESERVE} descriptors of its own; use 1 to {soft - FD_RESERVE} (or raise the limit, "
                    f"or hold them from several processes: --fleet local:{math.ceil(self.conns / (soft - FD_RESERVE))})"
                )
            raise UsageError(
                f"--conns {self.conns} over {workers} fleet workers is up to {most} a worker: RLIMIT_NOFILE is {soft} here and "
                f"a worker needs ~{FD_RESERVE} descriptors of its own; use at most {(soft - FD_RESERVE) * workers} (or more workers)"
            )
        if not 0 <= self.probe <= self.conns:
            raise UsageError(f"--probe {self.probe} is invalid: use 0 to --conns ({self.conns})")
        if not 1 <= self.connect_concurrency <= 10_000:
            raise UsageError(f"--connect-concurrency {self.connect_concurrency} is invalid: use 1 to 10000")


class _Held:
    """One process's part of a hold: connections ``worker``, ``worker + n``,
    ... of the run (all of them from one process), connection c to the
    kernel ``schedule`` gives it; opened, probed, closed."""

    def __init__(self, s: HoldSettings, targets: Sequence[Target], weights: Sequence[float], share: tuple[int, int] = (0, 1)) -> None:
        self.s, self.targets = s, list(targets)
        w, n = share
        self.mine = range(w, s.conns, n)
        self.kernel_of = schedule(s.conns, weights) if len(self.targets) > 1 else None
        self.probes = len(range(w, s.probe, n))  # this share of --probe
        self.clients: dict[int, KernelClient] = {}
        self.failures: Counter[str] = Counter()
        self.open_s = 0.0
        self.rss0 = self.rss1 = 0
        self.held_at_probe = 0

    def kernel(self, c: int) -> int:
        return self.kernel_of[c] if self.kernel_of is not None else 0

    async def open(self) -> None:
        me = psutil.Process()
        gc.collect()
        self.rss0 = me.memory_info().rss
        gate = asyncio.Semaphore(self.s.connect_concurrency)

        async def open_one(c: int) -> None:
            async with gate:
                client = self.targets[self.kernel(c)].client(connect_timeout_s=self.s.connect_timeout_s)
                try:
                    await client.connect()
                    self.clients[c] = client
                except ConnError as exc:
                    self.failures[exc.kind] += 1

        t0 = time.monotonic()
        async with asyncio.TaskGroup() as tg:
            for c in self.mine:
                tg.create_task(open_one(c))
        self.open_s = time.monotonic() - t0
        gc.collect()
        self.rss1 = me.memory_info().rss

    async def kernel_stats(self, k: int) -> dict[str, Any]:
        """Kernel k's stats frame over one of the connections held to it."""
        c = next((c for c in sorted(self.clients) if self.kernel(c) == k), None)
        if c is None:
            return {}
        try:
            return await self.clients[c].stats(timeout_s=30)
        except ConnError:
            return {}

    async def probe(self, run: Run) -> None:
        """While every connection is held, this share's probes each send one input."""
        probes = sorted(self.clients)[: self.probes]
        async with asyncio.TaskGroup() as tg:
            tasks = [tg.create_task(self.clients[c].turn("", self.s.timeout_s)) for c in probes]
        for c, t in zip(probes, tasks):
            await run.record(t.result(), self.targets[self.kernel(c)], progress=False, kind="probe", conn=c)
        self.held_at_probe = sum(1 for c in self.clients.values() if c.connected)

    async def close(self) -> None:
        # every one closed, whatever another's close raised
        await asyncio.gather(*(c.aclose() for c in self.clients.values()), return_exceptions=True)

    def part(self) -> dict[str, Any]:
        """What this process measured, as the head merges it."""
        per_kernel = Counter(self.kernel(c) for c in self.clients)
        return {"connected": len(self.clients), "failures": dict(self.failures), "open_s": self.open_s,
                "rss_before": self.rss0, "rss_held": self.rss1, "kernels": [per_kernel[k] for k in range(len(self.targets))]}


def _kb_per_conn(delta: int, conns: int) -> float | None:
    return round(delta / 1024 / conns, 2) if conns else None


def _merge(requested: int, parts: list[dict[str, Any]], kernel_connections: list[int | None], fleet: bool) -> dict[str, Any]:
    """extras.hold from each process's part: one process's as it always was;
    a fleet's summed (memory is the workers' sum; open_s the slowest's),
    each worker's beside."""
    connected = sum(p["connected"] for p in parts)
    failures: Counter[str] = Counter()
    for p in parts:
        failures.update(p["failures"])
    before, held = sum(p["rss_before"] for p in parts), sum(p["rss_held"] for p in parts)
    counts = [k for k in kernel_connections if k is not None]
    out = {
        "requested": requested,
        "connected": connected,
        "held_at_probe": sum(p.get("held_at_probe") or 0 for p in parts),
        "failures": dict(failures),
        "open_s": round(max((p["open_s"] for p in parts), default=0.0), 3),
        "harness_rss_mb": {"before": round(before / 2**20, 1), "held": round(held / 2**20, 1)},
        "harness_kb_per_connection": _kb_per_conn(held - before, connected),
        "kernel_connections": sum(counts) if counts else None,
    }
    if fleet:
        out["workers"] = [{"worker": p["worker"], "connected": p["connected"], "held_at_probe": p.get("held_at_probe"),
                           "failures": p["failures"], "open_s": round(p["open_s"], 3),
                           "harness_rss_mb": {"before": round(p["rss_before"] / 2**20, 1), "held": round(p["rss_held"] / 2**20, 1)},
                           "harness_kb_per_connection": _kb_per_conn(p["rss_held"] - p["rss_before"], p["connected"])} for p in parts]
    return out


async def run_hold(settings: HoldSettings, access: Access) -> RunResult:
    targets = kernel_targets(access)  # one, or several kernels at once (--launch with --bin/--target repeated)
    many = len(targets) > 1
    weights = access.weights if many else ()
    shares = check_split("connections", settings.conns, weights, access.names, "--conns") if many else [settings.conns]
    fleet = parse_fleet(settings.fleet, settings.fleet_workers, access.allow_remote) if settings.fleet else None

    async def body(run: Run) -> None:
        per_kernel = run.extras.get("kernels") or []
        for k, w, n in zip(per_kernel, weights, shares):
            k.update(weight=w, conns=n)
        if fleet is None:
            held = _Held(settings, targets, weights)
            try:
                await held.open()
                run.check_alive()
                stats = [await held.kernel_stats(k) for k in range(len(targets))]
                await held.probe(run)
            finally:
                await held.close()
            parts = [{**held.part(), "held_at_probe": held.held_at_probe}]
            counts = [st.get("connections") for st in stats]
        else:
            head = _Head(settings, targets)
            try:
                await drive_fleet(run, fleet, "harness.scenarios.hold:fleet_share", settings, targets, weights, on_note=head.on_note)
            except KstressError as exc:
                raise head.named(exc) from exc
            finally:
                parts = [{**head.opened[w], "worker": w, "held_at_probe": head.probed.get(w)} for w in sorted(head.opened)]
                counts = head.counts
                run.extras["hold"] = _merge(settings.conns, parts, counts, True)
                _per_kernel(per_kernel, parts, counts)
            return
        run.extras["hold"] = _merge(settings.conns, parts, counts, False)
        _per_kernel(per_kernel, parts, counts)

    return await run_scenario(SCENARIO, settings, targets, body)


def _per_kernel(per_kernel: list[dict[str, Any]], parts: list[dict[str, Any]], counts: list[int | None]) -> None:
    """Several kernels: each one's connections as the harness opened them and as its stats frame counts them."""
    for k, entry in enumerate(per_kernel):
        entry.update(connected=sum(p["kernels"][k] for p in parts), kernel_connections=counts[k] if k < len(counts) else None)


class _Head:
    """A fleet hold's head: once every worker said its connections are open,
    each kernel's stats frame is read and the workers probe; once every
    worker probed, they release."""

    def __init__(self, settings: HoldSettings, targets: Sequence[Target]) -> None:
        self.s, self.targets = settings, targets
        self.n = 0
        self.opened: dict[int, dict[str, Any]] = {}
        self.probed: dict[int, int] = {}
        self.counts: list[int | None] = [None] * len(targets)

    async def on_note(self, fleet: Fleet, w: WorkerInfo, note: dict[str, Any]) -> None:
        self.n = len(fleet.workers)
        if note.get("phase") == "opened":
            self.opened[w.index] = note["part"]
            if len(self.opened) == self.n:
                self.counts = [await self._count(t) for t in self.targets]
                fleet.signal("probe")
        elif note.get("phase") == "probed":
            self.probed[w.index] = note["held_at_probe"]
            if len(self.probed) == self.n:
                fleet.signal("release")

    def named(self, exc: KstressError) -> KstressError:
        """A fleet's failure, naming the workers that never said their
        connections were open (their siblings gave up waiting on them)."""
        missing = [w for w in range(self.n) if w not in self.opened]
        if not missing or isinstance(exc, UsageError):
            return exc
        return InfraError(f"hold --fleet: worker(s) {', '.join(map(str, missing))} never said their connections were open: {exc}")

    async def _count(self, target: Target) -> int | None:
        """The kernel's connections, less the one the head asks on."""
        c = target.client(connect_timeout_s=self.s.connect_timeout_s)
        try:
            await c.connect()
            n = (await c.stats(timeout_s=30)).get("connections")
            return n - 1 if isinstance(n, int) else None
        except ConnError:
            return None
        finally:
            await c.aclose()


async def _signalled(sink: Any, name: str, within_s: float, worker: int, waiting_for: str) -> None:
    try:
        await asyncio.wait_for(sink.signal(name).wait(), within_s)
    except TimeoutError:
        raise InfraError(f"hold --fleet: worker {worker} waited {within_s:.0f} s for the head's {name!r} signal ({waiting_for})") from None


async def fleet_share(job: dict[str, Any], sink: Any, t0: float) -> dict[str, Any]:
    """A fleet worker's part of a hold (harness/fleet/actor.py runs it): open
    its share, say so, hold until the head signals ``probe``, probe its share
    of --probe, say how many are still open, hold until ``release``, close."""
    s: HoldSettings = job["settings"]
    w, n = job["worker"], job["workers"]
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if len(range(w, s.conns, n)) > soft - FD_RESERVE:
        raise UsageError(f"hold --fleet: worker {w} holds {len(range(w, s.conns, n))} connections but RLIMIT_NOFILE is {soft} on its host; "
                         f"use more workers (--fleet-workers) or fewer --conns")
    async with share_targets(job, sink) as run:
        held = _Held(s, run.targets, job["weights"], (w, n))
        try:
            await held.open()
            sink.note({"phase": "opened", "part": held.part()})
            # the slowest sibling's open: its share, connect_concurrency at a time, each within the connect timeout
            opening = math.ceil(math.ceil(s.conns / n) / s.connect_concurrency) * s.connect_timeout_s
            await _signalled(sink, "probe", opening + SIGNAL_SLACK_S, w, "every worker's connections open")
            await held.probe(run)
            sink.note({"phase": "probed", "held_at_probe": held.held_at_probe})
            await _signalled(sink, "release", s.timeout_s + SIGNAL_SLACK_S, w, "every worker's probes done")
        finally:
            await held.close()
    return {"hold": {**held.part(), "held_at_probe": held.held_at_probe}}


def summarize_hold(rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """The measurements of the body (extras.hold) and the probe turns' verdicts."""
    h = dict(extras.get("hold") or {})
    probes = [r for r in rows if r.get("kind") == "probe"]
    summary = {k: h.get(k) for k in ("requested", "connected", "held_at_probe", "failures", "open_s")}
    summary["probe"] = {"sent": len(probes), "passed": sum(1 for r in probes if r.get("passed"))}
    summary.update({k: h.get(k) for k in ("harness_rss_mb", "harness_kb_per_connection", "kernel_connections")})
    if h.get("workers") is not None:
        summary["workers"] = h["workers"]
    if extras.get("kernels"):
        summary["kernels"] = [{f: k.get(f) for f in ("name", "weight", "conns", "connected", "kernel_connections")} for k in extras["kernels"]]
    return summary


def hold_checks(s: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    connected, probe = s.get("connected") or 0, s.get("probe") or {}
    return [
        Check(f"{settings['conns']} connections opened and authenticated", connected == settings["conns"], f"{connected} connected; failures {s.get('failures') or 'none'}"),
        Check("all connections still open while probing", s.get("held_at_probe") == connected, f"{s.get('held_at_probe')}/{connected}"),
        Check("the kernel answers while they are held", probe.get("passed") == probe.get("sent"), f"{probe.get('passed')}/{probe.get('sent')} probe turns passed"),
    ]


def render_hold(doc: dict[str, Any], s: dict[str, Any]) -> str:
    out = header(doc, "hold")
    rss = s.get("harness_rss_mb") or {}
    workers = s.get("workers")
    where = f"from {len(workers)} fleet workers ({md_text(str(doc.get('settings', {}).get('fleet')))})" if workers is not None else "from one process"
    out += [
        f"{s.get('connected')}/{s.get('requested')} connections opened and authenticated {where} in {s.get('open_s')} s; "
        f"{s.get('held_at_probe')} still open while {s.get('probe', {}).get('sent')} of them sent an input "
        f"({s.get('probe', {}).get('passed')} passed).",
        "",
        f"Harness memory{' (the workers summed)' if workers is not None else ''}: {rss.get('before')} MB before, {rss.get('held')} MB holding them: "
        f"**{s.get('harness_kb_per_connection')} KiB per connection**. The kernel{'s' if s.get('kernels') else ''} reported {s.get('kernel_connections')} connections.",
        "",
        f"Failed connections by kind: {s.get('failures') or 'none'}",
        "",
    ]
    if workers:
        out += ["| worker | connected | held at probe | open s | harness MB before | held | KiB per connection | failures |",
                "|---:|---:|---:|---:|---:|---:|---:|---|"]
        for w in workers:
            r = w.get("harness_rss_mb") or {}
            out.append(f"| {w['worker']} | {w['connected']} | {w.get('held_at_probe')} | {w.get('open_s')} | {r.get('before')} | {r.get('held')} | "
                       f"{w.get('harness_kb_per_connection')} | {md_text(str(w.get('failures') or '-'))} |")
        out.append("")
    if s.get("kernels"):
        out += ["| kernel | weight | connections | opened | the kernel's count |", "|---|---:|---:|---:|---:|"]
        for k in s["kernels"]:
            out.append(f"| {md_text(str(k['name']))} | {fmt_num(k.get('weight'), '{:g}')} | {k.get('conns')} | {k.get('connected')} | {k.get('kernel_connections')} |")
        out.append("")
    out += checks_section(doc)
    return "\n".join(out)


SCENARIO = Scenario(
    name="hold",
    help="Open and hold many connections (from one process, or a --fleet); memory per connection.",
    settings=HoldSettings,
    run=run_hold,
    summarize=summarize_hold,
    checks=hold_checks,
    render=render_hold,
    threshold_rows=lambda rows: rows,  # hold's probes are its turns
    kernels=True,
    compare=CompareSpec(refused="a hold run measures one count per run (connections held, memory per connection): there is no sample to test"),
)
