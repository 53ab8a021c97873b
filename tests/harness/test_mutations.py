"""The mutation suite: for each reference-kernel fault, the scenario that
should catch it fails (exit 1) naming the right failure; with no fault every
scenario passes. Real mock, real refkernel, real socket."""

from __future__ import annotations

import json

import pytest

from harness.scenarios import AbtestSettings, BatchSettings, StressSettings, run_abtest, run_batch, run_stress
from harness.results.rundir import read_jsonl

pytestmark = pytest.mark.slow
# overlaps, completion order and speedups of real tool processes: run alone. A count, an error
# count, a missing verdict or a replay is in the replies whatever the load: those run in parallel
serial = pytest.mark.serial
# the whole suite runs on each LLM API the reference kernel speaks
DIALECTS = ("chat", "responses", "anthropic")


async def batch(kernel, out, **kw):
    s = BatchSettings(ns=(2, 4), rounds=1, out=out, quiet=True, **kw)
    return await run_batch(s, kernel.access())


@pytest.mark.parametrize(
    "fault, must",
    [
        # marker -> the failure its turns must show (other markers may fail too)
        ("ignore-stream-index", {"!batch4": "count 1/4", "!slowbatch4": "count 1/4"}),
        ("first-tool-only", {"!batch2": "count 1/2", "!batch4": "count 1/4", "!mixed4": "count 1/4"}),
        pytest.param("completion-order", {"!slowbatch2": "order", "!slowbatch4": "order"}, marks=serial),
        pytest.param("always-parallel", {"!mixed4": "overlap 3>1"}, marks=serial),
        ("drop-last-result", {"!batch2": "count 1/2", "!batch4": "count 3/4", "!slowbatch4": "count 3/4"}),
    ],
)
@pytest.mark.parametrize("api", DIALECTS)
async def test_batch_catches(kernel_factory, out_dir, fault, must, api):
    async with kernel_factory("--fault", fault, "--llm-api", api, tool_ms=100) as k:
        r = await batch(k, out_dir)
    assert r.exit_code == 1, r.report
    by_marker = {}
    for row in read_jsonl(r.dir / "turns.jsonl"):
        by_marker.setdefault(row["marker"], []).append(row["failures"][0] if row["failures"] else "ok")
    for marker, failure in must.items():
        assert all(f.startswith(failure) for f in by_marker[marker]), (marker, by_marker[marker])
    assert "FAIL every batch turn passed its verdict" in r.report


@serial
@pytest.mark.parametrize("api", DIALECTS)
async def test_batch_passes_without_fault(kernel_factory, out_dir, api):
    async with kernel_factory("--llm-api", api, tool_ms=100) as k:
        for _ in range(2):  # repeatedly
            r = await batch(k, out_dir)
            assert r.exit_code == 0 and r.passed, r.report


@serial
@pytest.mark.parametrize("api", DIALECTS)
async def test_abtest_catches_serial_tools(kernel_factory, out_dir, api):
    async with kernel_factory("--fault", "serial-tools", "--llm-api", api, tool_ms=100) as k:
        r = await run_abtest(AbtestSettings(ns=(4,), rounds=3, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1
    row = r.summary["rows"][0]
    assert row["valid"] and row["overlap_concurrent"] == 1 and row["speedup"] < 1.3
    assert any(not c.passed and "ran concurrently" in c.name for c in r.checks)


@serial
async def test_abtest_measures_speedup(kernel_factory, out_dir):
    async with kernel_factory(tool_ms=100) as k:
        r = await run_abtest(AbtestSettings(ns=(2, 4), rounds=3, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 0, r.report
    for row in r.summary["rows"]:
        assert row["valid"] and row["overlap_concurrent"] == row["n"] and row["overlap_serial"] == 1
        assert row["speedup"] > 0.75 * row["n"], row


@pytest.mark.parametrize(
    "fault, mix, expected",
    [
        ("swallow-tool-errors", "!img:1,!ocr:1", "errors"),
        ("hide-error-frames", "!err:500:1", "missing_verdict"),
    ],
)
@pytest.mark.parametrize("api", DIALECTS)
async def test_stress_catches(kernel_factory, out_dir, fault, mix, expected, api):
    async with kernel_factory("--fault", fault, "--llm-api", api) as k:
        r = await run_stress(StressSettings(conns=4, inputs=2, mix=mix, dedup_probe=False, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1
    assert set(r.summary["failures"]) == {expected}, r.summary["failures"]


@pytest.mark.parametrize("api", DIALECTS)
async def test_stress_dedup_probe_catches_no_dedup(kernel_factory, out_dir, api):
    async with kernel_factory("--fault", "no-dedup", "--llm-api", api) as k:
        r = await run_stress(StressSettings(conns=2, inputs=2, mix="!batch2", out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1 and r.summary["passed"] == r.summary["attempted"]
    probe = [c for c in r.checks if "replay guard" in c.name][0]
    assert not probe.passed and "no dedup" in probe.detail


@serial
async def test_stress_passes_and_accounts(kernel_factory, out_dir):
    async with kernel_factory() as k:
        r = await run_stress(StressSettings(conns=8, inputs=3, mix="!batch4:2,!img:1,!mixed2:1,text:1", interrupts=5, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 0, r.report
    s = r.summary
    assert s["attempted"] == 8 * 3 + s["interrupts"]["attempted"]
    assert s["pass_rate"] == 1.0 and s["failures"] == {}
    doc = json.loads((r.dir / "run.json").read_text())
    assert doc["schema"] == "kstress.run/1" and doc["passed"] and doc["summary"]["attempted"] == s["attempted"]
    rows = read_jsonl(r.dir / "turns.jsonl")
    nonces = [row["nonce"] for row in rows if row["kind"] != "probe"]
    assert len(nonces) == len(set(nonces)), "every input carries its own nonce"
