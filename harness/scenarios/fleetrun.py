"""A scenario's load driven by a fleet (issue 25, docs/fleet.md).

The head (this process) keeps everything a run owns: the targets (a launched
sandbox, the mock), the run directory, the watchers and probes. Each worker
gets a *job*: the settings, its share (worker w of n) and each target's
``view()``; it opens the targets as a driver that owns nothing, runs the same
Load on its share and judges every turn with the same ``Run.record`` -- its
rows go to its sink instead of a run directory, and come here in batches,
where they are written, counted and checked exactly as a local turn's are."""

from __future__ import annotations

import contextlib
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Sequence

from ..fleet import Fleet, FleetSpec, WorkerInfo
from ..judge.forensics import Bounds, entry_of
from ..judge.verdict import TurnVerdict, failure_name
from ..sandbox.sut import Target
from ..wire.client import Turn, tag_nonces
from .runner import Progress, Run

# the head hands out the jobs, then every worker starts its load at the same
# moment this far ahead (a worker's first import of the scenario takes ~0.3 s)
START_AHEAD_S = 1.0


class _Discard(list):
    """A worker keeps no rows: they are the head's."""

    def append(self, _row: Any) -> None:
        pass


class _Stories:
    """A worker's bound on failure stories (the head bounds them again over
    the whole fleet); what it leaves out is counted for the head."""

    def __init__(self, sink: Any) -> None:
        self.bounds = Bounds()
        sink.skipped = self.bounds.skipped

    def wants(self, row: dict[str, Any]) -> bool:
        name = failure_name(row)
        return name is not None and self.bounds.take(name)


@contextlib.asynccontextmanager
async def share_targets(job: dict[str, Any], sink: Any) -> AsyncIterator[WorkerRun]:
    """In a worker: the job's targets opened as a driver that owns nothing,
    and the Run its share records into."""
    tag_nonces(f"w{job['worker']}")
    async with contextlib.AsyncExitStack() as stack:
        targets = [await stack.enter_async_context(Target.joined(v)) for v in job["targets"]]
        try:
            yield WorkerRun(targets, sink, job["run_t0"], job["worker"])
        finally:
            # what each target's turns showed of the mock's requests: the head's
            # extras.observed counts them when no mock log is the kernel's alone
            sink.final["llm_seen"] = [dict(t.llm_seen) for t in targets]


class WorkerRun(Run):
    """The Run a fleet worker's load records into: the same ``record`` (verdict,
    row, labels), the rows into the sink."""

    def __init__(self, targets: Sequence[Target], sink: Any, t0: float, worker: int) -> None:  # noqa: D107 - no run directory here
        self.dir = sink
        self.targets = list(targets)
        self.progress = Progress(None, quiet=True)
        self.rows = _Discard()
        self.extras: dict[str, Any] = {}
        self.t0 = t0
        self.forensics = _Stories(sink)  # type: ignore[assignment]
        self.worker = worker

    async def record(self, turn: Turn, target: Target, /, **kw: Any) -> TurnVerdict:
        return await super().record(turn, target, worker=self.worker, **kw)

    async def _keep_failure(self, turn: Turn, v: TurnVerdict, row: dict[str, Any], target: Target) -> None:
        mock = await target.join.get(turn.nonce) if target.join is not None else None
        self.dir.failure(entry_of(turn, v, row, mock, target.label))


# a scenario's word on a worker's note (hold: every worker's connections are open -> signal "probe")
OnNote = Callable[[Fleet, WorkerInfo, dict[str, Any]], Awaitable[None]]


async def drive_fleet(run: Run, spec: FleetSpec, entry: str, settings: Any, targets: Sequence[Target], weights: tuple[float, ...] = (),
                      on_note: OnNote | None = None, job: dict[str, Any] | None = None) -> None:
    """Start the fleet, hand each worker its share (``entry``, a scenario's
    ``module:function`` a worker runs: ``share_targets`` opens what it
    drives), record every batch, pass each note a share sent to ``on_note``;
    what each worker did goes in run.extras["fleet"] on every path. ``job``:
    what a scenario's share needs besides (the same for every worker)."""
    async with open_fleet(run, spec) as fleet:
        await fleet_load(run, fleet, entry, settings, targets, weights, on_note, job)


@contextlib.asynccontextmanager
async def open_fleet(run: Run, spec: FleetSpec) -> AsyncIterator[Fleet]:
    """The fleet for one run, however many loads it drives (findmax: one a
    stage); what each worker did goes in run.extras["fleet"] on every path."""
    info: dict[str, Any] = run.extras.setdefault("fleet", spec.to_json())
    t_start = time.monotonic()
    async with Fleet(spec, run.dir.path / "fleet.log") as fleet:
        info.update(tag=fleet.tag, start_s=round(time.monotonic() - t_start, 3), ray_init_s=fleet.init_s, merge_s=0.0, rows_merged=0)
        try:
            yield fleet
        finally:
            info["workers"] = [w.to_json() for w in fleet.workers]


async def fleet_load(run: Run, fleet: Fleet, entry: str, settings: Any, targets: Sequence[Target], weights: tuple[float, ...] = (),
                     on_note: OnNote | None = None, job: dict[str, Any] | None = None) -> None:
    """One load on the fleet's workers, from a common start."""
    views = [t.view() for t in targets]
    info = run.extras["fleet"]
    n = len(fleet.workers)
    jobs = [{**(job or {}), "settings": settings, "worker": i, "workers": n, "targets": views, "weights": weights, "run_t0": run.t0} for i in range(n)]
    head_t0 = time.monotonic() + START_AHEAD_S
    if not info.get("loads"):
        # the first load's start, as one process records it; before any row:
        # a streaming summary places each row in its stage as it comes
        run.extras["load_t0_rel"] = round(head_t0 - run.t0, 4)
    merge = _Merge(run, fleet, on_note)
    try:
        await fleet.run(entry, jobs, head_t0, merge.batch)
    finally:
        for w in fleet.workers:
            for t, seen in zip(targets, (w.final or {}).get("llm_seen") or ()):
                t.llm_seen.update(seen)
        info["workers"] = [w.to_json() for w in fleet.workers]
        info["merge_s"] = round(info.get("merge_s", 0.0) + merge.seconds, 4)
        info["rows_merged"] = info.get("rows_merged", 0) + merge.rows
        _merge_extras(run.extras, [w.extras for w in fleet.workers])
        info["loads"] = info.get("loads", 0) + 1


class _Merge:
    """What the head does with a batch: every row as a local turn's (the run
    directory, the run's digest or rows, the progress line), the failure stories within the
    run's bound, and the target's life checked."""

    def __init__(self, run: Run, fleet: Fleet | None = None, on_note: OnNote | None = None) -> None:
        self.run = run
        self.fleet, self.on_note = fleet, on_note
        self.seconds = 0.0
        self.rows = 0

    async def batch(self, w: WorkerInfo, b: dict[str, Any]) -> None:
        t = time.perf_counter()
        run = self.run
        for row in b["rows"]:
            run.dir.turn(row)
            run.rows.append(row)
            run.progress.add(bool(row.get("passed")), row.get("latency_s"))
        self.rows += len(b["rows"])
        f = run.forensics
        for entry in b.get("failures") or ():
            if f.bounds.take(entry["failure"]):
                f.add(entry)
        for name, k in (b.get("skipped") or {}).items():
            f.bounds.skipped[name] = f.bounds.skipped.get(name, 0) + k
        if f.examples or f.bounds.skipped:
            run.extras["failure_examples"] = f.summary()
        self.seconds += time.perf_counter() - t
        run.check_alive()  # a dead target or mock ends the run here, as between two local turns
        if self.on_note is not None and self.fleet is not None:
            for note in b.get("notes") or ():
                await self.on_note(self.fleet, w, note)


def _merge_extras(extras: dict[str, Any], parts: list[dict[str, Any]]) -> None:
    """The Load's own extras, summed over the workers (and over the loads of
    one fleet: findmax's stages)."""
    if any("reconnects" in p for p in parts):
        extras["reconnects"] = (extras.get("reconnects") or 0) + sum(p.get("reconnects") or 0 for p in parts)
    if any("capacity_errors" in p for p in parts):
        caps: dict[str, int] = dict(extras.get("capacity_errors") or {})
        for p in parts:
            for k, v in (p.get("capacity_errors") or {}).items():
                caps[k] = caps.get(k, 0) + v
        extras["capacity_errors"] = caps
