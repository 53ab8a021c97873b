"""stress: the open model measures from the scheduled send time; --duration
bounds a run; kcli's shell reads inputs from stdin."""

from __future__ import annotations

import io

import pytest

from harness.cli.kcli import Endpoint, shell
from harness.wire.protocol import Protocol
from harness.results.rundir import read_jsonl
from harness.scenarios import StressSettings, run_stress

pytestmark = pytest.mark.slow


async def test_open_model_latency_from_the_schedule(kernel_factory, out_dir):
    async with kernel_factory() as k:
        s = StressSettings(conns=4, inputs=5, rate=40.0, mix="!batch2:1,text:1", dedup_probe=False, out=out_dir, quiet=True)
        r = await run_stress(s, k.access())
    assert r.exit_code == 0, r.report
    sched, sent = r.summary["scheduled_latency_s"], r.summary["latency_s"]
    assert sched["n"] == sent["n"] == 20
    # measured from the schedule, a latency can only be longer
    assert sched["p50"] >= sent["p50"] and sched["max"] >= sent["max"]
    rows = read_jsonl(r.dir / "turns.jsonl")
    assert all(row["scheduled_s"] >= row["latency_s"] for row in rows)
    assert "done (from schedule)" in r.report


async def test_duration_bounds_the_run(kernel_factory, out_dir):
    async with kernel_factory() as k:
        s = StressSettings(conns=2, inputs=10_000, duration_s=1.0, mix="!slowbatch2:1", dedup_probe=False, out=out_dir, quiet=True)
        r = await run_stress(s, k.access())
    assert r.exit_code == 0
    assert 2 <= r.summary["attempted"] < 40  # ~0.25 s per turn, 2 connections, 1 s


async def test_kcli_shell(kernel_factory):
    async with kernel_factory() as k:
        out = io.StringIO()
        failed = await shell(Endpoint(str(k.socket), k.token, Protocol()), 30, io.StringIO("!batch2\n\nhello\n!nope\n"), out)
    text = out.getvalue()
    assert text.count("verdict: ok") == 2
    assert "error: input '!nope': unknown marker" in text and failed == 1
