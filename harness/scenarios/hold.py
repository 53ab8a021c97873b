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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..wire.client import ConnError, KernelClient
from ..errors import UsageError
from .options import check_timeouts, connect_opt, metrics_opt, opt, out_opt, quiet_opt, threshold_opt
from ..results.report import checks_section, header
from ..results.comparison import CompareSpec
from ..results.rundir import Check
from .runner import Run, RunResult, Scenario, run_scenario
from ..sandbox.sut import Access, Target

FD_RESERVE = 256  # descriptors the process needs besides the connections


@dataclass(frozen=True)
class HoldSettings:
    conns: int = opt(10_000, "--conns", int, "Connections to hold at once.")
    probe: int = opt(32, "--probe", int, "Held connections that send one input at once (keep it within the kernel queue).")
    connect_concurrency: int = 512
    connect_timeout_s: float = connect_opt(30.0)  # 10,000 at once, 512 at a time: each waits its turn
    timeout_s: float = opt(120.0, "--timeout", float, "Seconds one turn may take.")
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    metrics_port: int | None = metrics_opt()
    thresholds: tuple[str, ...] = threshold_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
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

    async def body(run: Run) -> None:
        me = psutil.Process()
        gc.collect()
        rss0 = me.memory_info().rss
        clients: list[KernelClient] = []
        failures: Counter[str] = Counter()
        gate = asyncio.Semaphore(settings.connect_concurrency)
        held = 0
        probes: list[KernelClient] = []

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
            async with asyncio.TaskGroup() as tg:
                for _ in range(settings.conns):
                    tg.create_task(open_one())
            open_s = time.monotonic() - t0
            run.check_alive()
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
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(c.turn("", settings.timeout_s)) for c in probes]
            for k, t in enumerate(tasks):
                await run.record(t.result(), target, progress=False, kind="probe", conn=k)
            held = sum(1 for c in clients if c.connected)
        finally:
            # every one closed, whatever another's close raised
            await asyncio.gather(*(c.aclose() for c in clients), return_exceptions=True)
        per_conn_kb = (rss1 - rss0) / 1024 / len(clients) if clients else None
        run.extras["hold"] = {
            "requested": settings.conns,
            "connected": len(clients),
            "held_at_probe": held,
            "failures": dict(failures),
            "open_s": round(open_s, 3),
            "harness_rss_mb": {"before": round(rss0 / 2**20, 1), "held": round(rss1 / 2**20, 1)},
            "harness_kb_per_connection": round(per_conn_kb, 2) if per_conn_kb is not None else None,
            "kernel_connections": kernel_stats.get("connections"),
        }

    return await run_scenario(SCENARIO, settings, [target], body)


def summarize_hold(rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """The measurements of the body (extras.hold) and the probe turns' verdicts."""
    h = dict(extras.get("hold") or {})
    probes = [r for r in rows if r.get("kind") == "probe"]
    summary = {k: h.get(k) for k in ("requested", "connected", "held_at_probe", "failures", "open_s")}
    summary["probe"] = {"sent": len(probes), "passed": sum(1 for r in probes if r.get("passed"))}
    summary.update({k: h.get(k) for k in ("harness_rss_mb", "harness_kb_per_connection", "kernel_connections")})
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
    out += [
        f"{s.get('connected')}/{s.get('requested')} connections opened and authenticated from one process in {s.get('open_s')} s; "
        f"{s.get('held_at_probe')} still open while {s.get('probe', {}).get('sent')} of them sent an input "
        f"({s.get('probe', {}).get('passed')} passed).",
        "",
        f"Harness memory: {rss.get('before')} MB before, {rss.get('held')} MB holding them: "
        f"**{s.get('harness_kb_per_connection')} KiB per connection**. The kernel reported {s.get('kernel_connections')} connections.",
        "",
        f"Failed connections by kind: {s.get('failures') or 'none'}",
        "",
    ]
    out += checks_section(doc)
    return "\n".join(out)


SCENARIO = Scenario(
    name="hold",
    help="Open and hold many connections from one process; memory per connection.",
    settings=HoldSettings,
    run=run_hold,
    summarize=summarize_hold,
    checks=hold_checks,
    render=render_hold,
    threshold_rows=lambda rows: rows,  # hold's probes are its turns
    compare=CompareSpec(refused="a hold run measures one count per run (connections held, memory per connection): there is no sample to test"),
)
