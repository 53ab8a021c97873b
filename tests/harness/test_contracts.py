"""Kernel contracts on the reference kernel, which can really behave as each
(`--batch whole-batch|barrier|parallel|serial`): the right contract passes,
every wrong one fails by name, and the faults that break a contract are caught
under it. Real mock, real refkernel, real socket."""

from __future__ import annotations

import pytest

from harness.results.rundir import read_jsonl
from harness.scenarios import AbtestSettings, BatchSettings, run_abtest, run_batch

pytestmark = pytest.mark.slow
RULES = ("whole-batch", "barrier", "parallel", "serial")


async def batch_under(k, out, rule):
    s = BatchSettings(ns=(4,), kinds=("mixed", "slowbatch"), rounds=1, out=out, quiet=True)
    return await run_batch(s, k.access(f"batch={rule}"))


def first_failures(r) -> dict[str, str]:
    return {row["marker"]: row["failures"][0].split(" ", 1)[0] for row in read_jsonl(r.dir / "turns.jsonl") if row["failures"]}


@pytest.mark.serial  # judges the overlap of real tool processes
@pytest.mark.parametrize("mode", RULES)
async def test_the_right_contract_passes_and_every_wrong_one_fails_by_name(kernel_factory, out_dir, mode):
    async with kernel_factory("--batch", mode, tool_ms=100) as k:
        for rule in RULES:
            r = await batch_under(k, out_dir, rule)
            if rule == mode:
                assert r.exit_code == 0, (mode, rule, r.report)
                continue
            assert r.exit_code == 1, (mode, rule, r.report)
            names = set(first_failures(r).values())
            assert names and names <= {"overlap", "barrier", "no_overlap"}, (mode, rule, names)
            assert "contract batch=" in r.report or "must separate them" in r.report


@pytest.mark.parametrize(
    "rule, fault, marker, name",
    [
        ("whole-batch", "always-parallel", "!mixed4", "overlap"),
        ("whole-batch", "serial-tools", "!slowbatch4", "no_overlap"),
        ("barrier", "always-parallel", "!mixed4", "barrier"),
        ("barrier", "serial-tools", "!slowbatch4", "no_overlap"),
        ("parallel", "serial-tools", "!mixed4", "no_overlap"),
        ("serial", "always-parallel", "!slowbatch4", "overlap"),
    ],
)
async def test_a_fault_that_breaks_the_contract_is_caught_under_it(kernel_factory, out_dir, rule, fault, marker, name):
    async with kernel_factory("--batch", rule, "--fault", fault, tool_ms=100) as k:
        r = await batch_under(k, out_dir, rule)
    assert r.exit_code == 1, r.report
    assert first_failures(r).get(marker) == name, first_failures(r)


@pytest.mark.serial  # judges the overlap of real tool processes
@pytest.mark.parametrize("limit, failure", [("16", None), ("2", "no_overlap")])
async def test_short_mixed_calls_are_judged_by_their_stagger_and_a_throttle_is_still_caught(kernel_factory, out_dir, limit, failure):
    # issue 22 item 5: the 50 ms sleeps of !mixed8 under batch=parallel may
    # not all run at once when their starts spread past 50 ms, and pass; a
    # kernel that runs two calls at a time starts each next one after an end
    async with kernel_factory("--batch", "parallel", "--max-parallel-tools", limit) as k:
        r = await run_batch(BatchSettings(ns=(8,), kinds=("mixed",), rounds=3, out=out_dir, quiet=True), k.access("batch=parallel"))
    if failure is None:
        assert r.exit_code == 0, r.report
    else:
        assert r.exit_code == 1, r.report
        assert first_failures(r) == {"!mixed8": failure}, first_failures(r)
        assert "waited for an end" in r.report


@pytest.mark.serial  # a speedup of real tool processes: beside other tests it fell to 2.64 at n=4 (CI, 35719ac)
@pytest.mark.parametrize("baseline", ["kernel", "sum"])
async def test_the_speedup_is_near_n_with_each_baseline(kernel_factory, out_dir, baseline):
    # the default 200 ms tools: the kernel's few ms of overhead per call stay small beside them
    async with kernel_factory(tool_ms=200) as k:
        r = await run_abtest(AbtestSettings(ns=(2, 4), rounds=3, baseline=baseline, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 0, r.report
    assert r.summary["baseline"] == baseline
    for row in r.summary["rows"]:
        # near N (the 15% of the docs is measured on a quiet machine, not asserted on a shared one)
        assert row["valid"] and 0.7 * row["n"] < row["speedup"] <= 1.05 * row["n"], row


async def test_a_baseline_that_does_not_fit_the_contract_is_refused(kernel_factory, out_dir):
    from harness.errors import UsageError

    async with kernel_factory("--batch", "barrier", tool_ms=100) as k:
        with pytest.raises(UsageError, match="--baseline kernel: .* this kernel declares batch=barrier"):
            await run_abtest(AbtestSettings(ns=(2,), rounds=3, baseline="kernel", out=out_dir, quiet=True), k.access("batch=barrier"))
        # auto picks what fits, and says which
        r = await run_abtest(AbtestSettings(ns=(2,), rounds=3, out=out_dir, quiet=True), k.access("batch=barrier"))
    assert r.exit_code == 0 and r.summary["baseline"] == "sum", r.report
    assert "baseline `sum`" in r.report


async def test_a_serial_kernel_measures_about_1x_and_that_is_its_promise(kernel_factory, out_dir):
    async with kernel_factory("--batch", "serial", tool_ms=100) as k:
        r = await run_abtest(AbtestSettings(ns=(4,), rounds=3, out=out_dir, quiet=True), k.access("batch=serial"))
    assert r.exit_code == 0, r.report
    row = r.summary["rows"][0]
    assert row["valid"] and 0.8 < row["speedup"] < 1.25 and row["overlap_concurrent"] == 1
