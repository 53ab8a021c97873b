"""Every scenario that launched its target fails, naming the orphan, when the
target leaves a child behind: a wrapper forks `sleep 600` into the background,
then execs the reference kernel. Before the one runner, abtest, hold and cmp
recorded orphans but never checked them (they passed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.sandbox.launcher import LaunchSettings
from harness.scenarios import (
    AbtestSettings,
    Access,
    BatchSettings,
    CmpSettings,
    HoldSettings,
    StressSettings,
    run_abtest,
    run_batch,
    run_cmp,
    run_hold,
    run_stress,
)
from harness.sandbox.target import TargetSpec

pytestmark = pytest.mark.slow
REFKERNEL = str(Path(sys.executable).with_name("refkernel"))


@pytest.fixture
def leaky(tmp_path: Path) -> Path:
    w = tmp_path / "leaky-kernel"
    w.write_text(f"#!/bin/sh\n# a child the kernel never knew about, outliving it\nsleep 600 &\nexec {REFKERNEL} \"$@\"\n")
    w.chmod(0o755)
    return w


def access(bin_: Path) -> Access:
    return Access(launch=LaunchSettings(target=TargetSpec(bin=str(bin_)), tool_ms=50), tool_ms=50)


def orphan_check(r):
    assert r.exit_code == 1, r.report
    failed = [c for c in r.checks if not c.passed]
    assert [c.name for c in failed] == ["no orphans after the target exited"], r.report
    assert "sleep 600" in failed[0].detail, failed[0].detail
    assert "FAIL no orphans after the target exited" in r.report and "sleep 600" in r.report
    return failed[0]


async def test_stress(leaky, tmp_path):
    orphan_check(await run_stress(StressSettings(conns=2, inputs=2, mix="!batch2", out=tmp_path / "runs", quiet=True), access(leaky)))


async def test_batch(leaky, tmp_path):
    orphan_check(await run_batch(BatchSettings(ns=(2,), rounds=1, out=tmp_path / "runs", quiet=True), access(leaky)))


async def test_abtest(leaky, tmp_path):
    orphan_check(await run_abtest(AbtestSettings(ns=(2,), rounds=3, out=tmp_path / "runs", quiet=True), access(leaky)))


async def test_hold(leaky, tmp_path):
    orphan_check(await run_hold(HoldSettings(conns=20, probe=4, out=tmp_path / "runs", quiet=True), access(leaky)))


async def test_cmp_names_the_version_that_leaked(leaky, tmp_path):
    s = CmpSettings(old="refkernel", new=str(leaky), n=2, rounds=3, bombard_conns=2, bombard_rounds=1, stability_rounds=3, tool_ms=50, out=tmp_path / "runs", quiet=True)
    check = orphan_check(await run_cmp(s))
    assert check.detail.startswith("new: pid "), check.detail


async def test_a_clean_target_passes_the_same_check(tmp_path):
    """The same check on the same scenario with the reference kernel itself:
    present, and passing."""
    r = await run_batch(BatchSettings(ns=(2,), rounds=1, out=tmp_path / "runs", quiet=True), access(Path(REFKERNEL)))
    assert r.exit_code == 0, r.report
    assert [c for c in r.checks if c.name == "no orphans after the target exited"][0].passed
