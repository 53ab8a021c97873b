"""hold: open C connections from this one process, authenticate them all, keep
them open together, prove the kernel still answers on them, then close them.

Measures the harness's own memory per held connection, the time to open
them, and sorts every connection that failed by name (`capacity` =
EMFILE/ENFILE/ENOBUFS/ENOMEM on our side, `backlog_full`, `refused`, ...).
"""

from __future__ import annotations

import asyncio
import gc
import resource
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from ..client import ConnError, KernelClient
from ..errors import UsageError
from ..results import Check, RunDir
from ..verdict import judge
from .common import Access, Outcome, RunResult, Target, Watch, run_scenario

FD_RESERVE = 256  # descriptors the process needs besides the connections


@dataclass(frozen=True)
class HoldSettings:
    conns: int = 10_000
    probe: int = 32  # connections that send one input at once while all are held (within a 64-deep queue)
    connect_concurrency: int = 512
    connect_timeout_s: float = 60.0
    timeout_s: float = 120.0
    out: Path = Path("runs")
    quiet: bool = False

    def __post_init__(self) -> None:
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if not 1 <= self.conns <= soft - FD_RESERVE:
            raise UsageError(
                f"--conns {self.conns} is invalid: RLIMIT_NOFILE is {soft} here and the process needs "
                f"~{FD_RESERVE} descriptors of its own; use 1 to {soft - FD_RESERVE} (or raise the limit)"
            )
        if not 0 <= self.probe <= self.conns:
            raise UsageError(f"--probe {self.probe} is invalid: use 0 to --conns ({self.conns})")
        if not 1 <= self.connect_concurrency <= 10_000:
            raise UsageError(f"--connect-concurrency {self.connect_concurrency} is invalid: use 1 to 10000")


async def run_hold(settings: HoldSettings, access: Access) -> RunResult:
    target = Target(access)

    async def body(rundir: RunDir, watch: Watch) -> Outcome:
        me = psutil.Process()
        gc.collect()
        rss0 = me.memory_info().rss
        clients: list[KernelClient] = []
        failures: Counter[str] = Counter()
        gate = asyncio.Semaphore(settings.connect_concurrency)

        async def open_one() -> None:
            async with gate:
                c = target.client(connect_timeout_s=settings.connect_timeout_s)
                try:
                    await c.connect()
                    clients.append(c)
                except ConnError as exc:
                    failures[exc.kind] += 1

        t0 = time.monotonic()
        try:
            await asyncio.gather(*(open_one() for _ in range(settings.conns)))
            open_s = time.monotonic() - t0
            watch.check()
            gc.collect()
            rss1 = me.memory_info().rss
            kernel_stats: dict[str, Any] = {}
            if clients:
                try:
                    kernel_stats = await clients[0].stats(timeout_s=30)
                except ConnError:
                    pass
            # while every connection is held, some of them work
            probes = clients[: settings.probe]
            turns = await asyncio.gather(*(c.turn("", settings.timeout_s) for c in probes))
            passed = 0
            for k, t in enumerate(turns):
                v = judge(t, target.plan(t.text))
                passed += v.passed
                row = v.to_json()
                row.update(kind="probe", conn=k)
                rundir.turn(row)
            held = sum(1 for c in clients if c.connected)
        finally:
            await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
        per_conn_kb = (rss1 - rss0) / 1024 / len(clients) if clients else None
        summary = {
            "requested": settings.conns,
            "connected": len(clients),
            "held_at_probe": held,
            "failures": dict(failures),
            "open_s": round(open_s, 3),
            "probe": {"sent": len(probes), "passed": passed},
            "harness_rss_mb": {"before": round(rss0 / 2**20, 1), "held": round(rss1 / 2**20, 1)},
            "harness_kb_per_connection": round(per_conn_kb, 2) if per_conn_kb is not None else None,
            "kernel_connections": kernel_stats.get("connections"),
        }
        checks = [
            Check(f"{settings.conns} connections opened and authenticated", len(clients) == settings.conns, f"{len(clients)} connected; failures {dict(failures) or 'none'}"),
            Check("all connections still open while probing", held == len(clients), f"{held}/{len(clients)}"),
            Check("the kernel answers while they are held", passed == len(probes), f"{passed}/{len(probes)} probe turns passed"),
        ]
        return Outcome(summary, checks, _settings_json(settings), {"orphans": await target.stop_and_check_orphans()})

    from ..report import render_hold

    return await run_scenario("hold", settings.out, [target], body, render_hold, _settings_json(settings))


def _settings_json(s: HoldSettings) -> dict[str, Any]:
    d = asdict(s)
    d["out"] = str(s.out)
    return d
