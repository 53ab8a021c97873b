"""Resource sampler: the target's process tree (psutil) and the kernel's own
stats frame, at an interval, into resources.jsonl; peaks; its own CPU cost.

    sampler = Sampler(pid, path, interval_s=0.5, stats=client.stats)
    reason = sampler.preflight()      # None, or why sampling cannot work
    await sampler.start(); ...; summary = await sampler.stop()
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil

StatsFn = Callable[[], Awaitable[dict[str, Any]]]


@dataclass
class SamplerSummary:
    samples: int = 0
    peak_rss_mb: float = 0.0
    peak_cpu_pct: float = 0.0
    mean_cpu_pct: float = 0.0
    peak_threads: int = 0
    peak_fds: int = 0
    peak_children: int = 0
    peak_queued: int | None = None
    last_stats: dict[str, Any] = field(default_factory=dict)
    stats_errors: int = 0
    sampler_cpu_s: float = 0.0
    target_gone: bool = False

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def tree(pid: int) -> list[psutil.Process]:
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


class Sampler:
    def __init__(self, pid: int, path: Path | None, interval_s: float = 0.5, stats: StatsFn | None = None) -> None:
        if not 0.01 <= interval_s <= 60:
            raise ValueError(f"sampler interval {interval_s}s is invalid; use 0.01 to 60")
        self.pid = pid
        self.path = path
        self.interval_s = interval_s
        self.stats_fn = stats
        self.summary = SamplerSummary()
        self._task: asyncio.Task | None = None
        self._cpu_sum = 0.0
        self._procs: dict[int, psutil.Process] = {}
        self._file: Any = None
        self._stopping = False

    def preflight(self) -> str | None:
        try:
            p = psutil.Process(self.pid)
            p.memory_info()
            p.num_fds()
        except psutil.NoSuchProcess:
            return f"process {self.pid} does not exist"
        except psutil.AccessDenied:
            return f"no permission to read process {self.pid} (run as its user or root)"
        return None

    def _sample(self) -> dict[str, Any]:
        procs = tree(self.pid)
        if not procs:
            self.summary.target_gone = True
            return {}
        rss = cpu = 0.0
        threads = fds = 0
        alive = {}
        for p in procs:
            # cpu_percent needs the same Process object across calls to have a baseline
            p = self._procs.get(p.pid, p)
            alive[p.pid] = p
            try:
                with p.oneshot():
                    rss += p.memory_info().rss
                    cpu += p.cpu_percent(None)
                    threads += p.num_threads()
                    fds += p.num_fds()
            except psutil.Error:
                continue
        self._procs = alive
        return {
            "rss_mb": round(rss / 2**20, 2),
            "cpu_pct": round(cpu, 1),
            "threads": threads,
            "fds": fds,
            "children": len(procs) - 1,
        }

    async def _loop(self) -> None:
        t0 = time.monotonic()
        while not self._stopping:
            c0 = time.thread_time()
            row: dict[str, Any] = {"t": round(time.monotonic() - t0, 3), "ts": round(time.time(), 3)}
            row.update(self._sample())
            own = time.thread_time() - c0
            if self.stats_fn is not None:
                try:
                    # asyncio.timeout, not wait_for: on 3.11 wait_for returns an answer that lands in
                    # the step stop() cancels it, swallowing the cancel (the run then never ends)
                    async with asyncio.timeout(self.interval_s * 4 + 1):
                        stats = await self.stats_fn()
                    row["kernel"] = stats
                    self.summary.last_stats = stats
                    pq = stats.get("peak_queued")
                    if isinstance(pq, int):
                        self.summary.peak_queued = max(self.summary.peak_queued or 0, pq)
                except Exception:  # noqa: BLE001 - a missed stats sample is counted, not fatal
                    self.summary.stats_errors += 1
            s = self.summary
            if "rss_mb" in row:
                s.samples += 1
                s.peak_rss_mb = max(s.peak_rss_mb, row["rss_mb"])
                s.peak_cpu_pct = max(s.peak_cpu_pct, row["cpu_pct"])
                s.peak_threads = max(s.peak_threads, row["threads"])
                s.peak_fds = max(s.peak_fds, row["fds"])
                s.peak_children = max(s.peak_children, row["children"])
                self._cpu_sum += row["cpu_pct"]
                s.mean_cpu_pct = round(self._cpu_sum / s.samples, 1)
            c1 = time.thread_time()
            if self._file is not None:
                self._file.write(json.dumps(row) + "\n")
            # the event-loop thread's CPU spent sampling (kernel stats round trip excluded)
            self._own_cpu += own + (time.thread_time() - c1)
            s.sampler_cpu_s = round(self._own_cpu, 4)
            await asyncio.sleep(self.interval_s)  # the sampling period itself, not a synchronisation

    async def start(self) -> "Sampler":
        self._own_cpu = 0.0
        if self.path is not None:
            self._file = open(self.path, "a", buffering=1)
        for p in tree(self.pid):
            try:
                p.cpu_percent(None)
                self._procs[p.pid] = p
            except psutil.Error:
                pass
        self._task = asyncio.create_task(self._loop(), name=f"sampler-{self.pid}")
        return self

    async def stop(self) -> SamplerSummary:
        task, self._task = self._task, None
        self._stopping = True  # a cancel swallowed below the loop still ends it within one period
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
        if self._file is not None:
            self._file.close()
            self._file = None
        return self.summary

    async def __aenter__(self) -> "Sampler":
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
