"""--threshold end to end: a service level that holds exits 0, one that fails
exits 99 with its measured value, a bad expression exits 2 before anything
starts, failed checks still come first (1), `kstress report` agrees, and every
scenario judges its thresholds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
STRESS = ("stress", "--launch", "--conns", "4", "--inputs", "5", "--mix", "!batch4:1,text:1", "--quiet")


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def test_thresholds_that_hold_exit_0_and_one_that_fails_exits_99(cli):
    ok = cli.run(*STRESS, "--threshold", "p95<30s", "--threshold", "pass_rate>=0.99", "--threshold", "errors[busy]<1", "--out", str(cli.out))
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads((run_dir(ok) / "run.json").read_text())
    assert doc["passed"] and [t["passed"] for t in doc["summary"]["thresholds"]] == [True] * 3
    assert doc["summary"]["thresholds"][1]["value"] == 1.0

    bad = cli.run(*STRESS, "--threshold", "p95<30s", "--threshold", "[!batch4]p50<1ms", "--out", str(cli.out))
    assert bad.returncode == 99, bad.stdout + bad.stderr
    d = run_dir(bad)
    doc = json.loads((d / "run.json").read_text())
    assert not doc["passed"] and doc["exit_code"] == 99 and all(c["passed"] for c in doc["checks"])
    failed = doc["summary"]["thresholds"][1]
    assert failed["expr"] == "[!batch4]p50<1ms" and not failed["passed"] and failed["value"] > 0.001
    report = (d / "report.md").read_text()
    assert report.startswith("# kstress stress — FAIL (a threshold)")
    line = next(ln for ln in report.splitlines() if "`[!batch4]p50<1ms`" in ln)
    assert "**FAIL**" in line and f"{failed['value'] * 1000:.1f} ms" in line
    assert "1 of 2 thresholds failed: exit code 99." in report
    # the re-render recomputes the thresholds from turns.jsonl and agrees with run.json
    again = cli.run("report", str(d))
    assert again.returncode == 0 and "were they edited" not in again.stdout and "**FAIL**" in again.stdout


def test_a_bad_expression_exits_2_naming_it_and_the_grammar_before_anything_starts(cli):
    r = cli.run(*STRESS, "--threshold", "p95<2000", "--out", str(cli.out))
    assert r.returncode == 2
    assert "'p95<2000'" in r.stderr and "needs a unit" in r.stderr and "the grammar is" in r.stderr
    assert not cli.out.exists() or not any(cli.out.iterdir())


def test_failed_checks_come_before_thresholds(cli):
    r = cli.run(*STRESS, "--threshold", "pass_rate>=0.99", "--out", str(cli.out), "--", "--fault", "first-tool-only")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads((run_dir(r) / "run.json").read_text())
    assert not doc["summary"]["thresholds"][0]["passed"]


@pytest.mark.parametrize("argv", [
    ("batch", "--launch", "--n", "2", "--rounds", "1", "--kinds", "batch"),
    ("abtest", "--launch", "--n", "4", "--rounds", "3", "--tool-ms", "100"),
    ("hold", "--launch", "--conns", "20", "--probe", "4"),
    ("sessions", "--launch", "--sessions", "2", "--turns", "2", "--mix", "text"),
    ("cmp", "refkernel", "refkernel", "--rounds", "3", "--bombard-conns", "4", "--bombard-rounds", "1", "--stability-rounds", "3", "--tool-ms", "100"),
], ids=lambda a: a[0])
def test_every_scenario_judges_its_thresholds(cli, argv):
    r = cli.run(*argv, "--quiet", "--threshold", "attempted>=1", "--threshold", "attempted>100000", "--out", str(cli.out), timeout=300)
    assert r.returncode == 99, r.stdout[-3000:] + r.stderr[-3000:]
    ts = json.loads((run_dir(r) / "run.json").read_text())["summary"]["thresholds"]
    assert [t["passed"] for t in ts] == [True, False] and ts[0]["value"] >= 1
