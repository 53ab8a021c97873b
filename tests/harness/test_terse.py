"""Verdicts that need no echo: the reference kernel with `--terse` answers
every turn with "done" (no model text at all), and is verified exactly as the
echoing kernel is -- every scenario passes on the mock's record, and every
fault the mutation suite switches on is still caught, by the same name."""

from __future__ import annotations

import pytest

from harness.results.rundir import read_jsonl
from harness.scenarios import AbtestSettings, BatchSettings, HoldSettings, StressSettings, run_abtest, run_batch, run_hold, run_stress
from harness.judge.verdict import judge
from harness.wire.client import Turn
from mock.markers import build_plan

pytestmark = pytest.mark.slow


def sources(r) -> set:
    return {row.get("verdict_source") for row in read_jsonl(r.dir / "turns.jsonl") if row.get("kind") in ("load", "batch", "abtest", "probe") and row["outcome"] == "response" and not row.get("duplicate")}


async def test_every_scenario_passes_on_the_mocks_record(kernel_factory, out_dir):
    async with kernel_factory("--terse", tool_ms=100) as k:
        r = await run_stress(StressSettings(conns=4, inputs=3, mix="!batch4:2,!slowbatch2:1,!mixed3:1,!img:1,text:1", interrupts=3, out=out_dir, quiet=True), k.access())
        assert r.exit_code == 0, r.report
        assert sources(r) == {"mock"}
        r = await run_batch(BatchSettings(ns=(2, 4), rounds=1, out=out_dir, quiet=True), k.access())
        assert r.exit_code == 0, r.report
        assert sources(r) == {"mock"}
        r = await run_abtest(AbtestSettings(ns=(4,), rounds=3, out=out_dir, quiet=True), k.access())
        assert r.exit_code == 0, r.report
        assert r.summary["rows"][0]["overlap_concurrent"] == 4, "the schedule comes from the stamps the mock saw"
        r = await run_hold(HoldSettings(conns=20, probe=4, out=out_dir, quiet=True), k.access())
        assert r.exit_code == 0, r.report


async def test_without_the_mock_a_terse_kernel_has_no_verdict(kernel_factory, out_dir, monkeypatch):
    """The control: the same kernel, judged by its reply alone, fails every turn
    (a bare socket without --mock needs a verdict key to be run at all)."""
    monkeypatch.setenv("KSTRESS_VERDICT_KEY", "00" * 16)
    async with kernel_factory("--terse", tool_ms=100) as k:
        r = await run_batch(BatchSettings(ns=(2,), kinds=("batch",), rounds=1, out=out_dir, quiet=True), k.access(mock=False))
    assert r.exit_code == 1 and set(r.summary["rows"][0]["failures"]) == {"missing_verdict"}


@pytest.mark.parametrize(
    "fault, must",
    [
        ("ignore-stream-index", {"!batch4": "count 1/4"}),
        ("first-tool-only", {"!batch4": "count 1/4", "!mixed4": "count 1/4"}),
        ("completion-order", {"!slowbatch4": "order"}),
        ("always-parallel", {"!mixed4": "overlap 3>1"}),
        ("drop-last-result", {"!batch4": "count 3/4"}),
        ("serial-tools", {"!slowbatch4": "no_overlap"}),
    ],
)
async def test_batch_faults_are_caught_through_a_terse_kernel(kernel_factory, out_dir, fault, must):
    async with kernel_factory("--terse", "--fault", fault, tool_ms=100) as k:
        r = await run_batch(BatchSettings(ns=(2, 4), rounds=1, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1, r.report
    by_marker = {row["marker"]: row["failures"][0] if row["failures"] else "ok" for row in read_jsonl(r.dir / "turns.jsonl")}
    for marker, failure in must.items():
        assert by_marker[marker].startswith(failure), (marker, by_marker[marker])


@pytest.mark.parametrize("fault, mix, expected", [("swallow-tool-errors", "!img:1,!ocr:1", "errors"), ("hide-error-frames", "!err:500:1", "missing_verdict")])
async def test_stress_faults_are_caught_through_a_terse_kernel(kernel_factory, out_dir, fault, mix, expected):
    async with kernel_factory("--terse", "--fault", fault) as k:
        r = await run_stress(StressSettings(conns=2, inputs=2, mix=mix, dedup_probe=False, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1 and set(r.summary["failures"]) == {expected}, r.summary["failures"]


async def test_no_dedup_is_caught_through_a_terse_kernel(kernel_factory, out_dir):
    async with kernel_factory("--terse", "--fault", "no-dedup") as k:
        r = await run_stress(StressSettings(conns=2, inputs=2, mix="!batch2", out=out_dir, quiet=True), k.access())
    assert r.exit_code == 1 and r.summary["passed"] == r.summary["attempted"]
    assert not r.summary["dedup_probe"]["ok"] and "no dedup" in r.summary["dedup_probe"]["detail"]


def test_a_reply_that_alters_the_mocks_line_is_caught():
    """A kernel that echoes the verdict line but changes it (here: ids=bad made
    ids=ok) must agree with what the mock recorded; it does not."""
    plan = build_plan("!batch2 #alt1")
    true_line = f"KST nonce=alt1 plan=batch expected=2 got=2 ids=bad args=ok order=ok errors=0 tool_ms=3"
    turn = Turn(input_id="alt1", text="!batch2 #alt1", nonce="alt1", outcome="response", response_text=true_line.replace("ids=bad", "ids=ok"), t_sent=0.0, t_done=0.1)
    v = judge(turn, plan, mock={"verdict": {"line": true_line}}, joined=True)
    assert not v.passed and v.failures[0].startswith("verdict_mismatch (the reply says") and v.verdict_source == "both"
    turn.response_text = true_line
    v = judge(turn, plan, mock={"verdict": {"line": true_line}}, joined=True)
    assert v.failures == ("ids",) and v.verdict_source == "both"
