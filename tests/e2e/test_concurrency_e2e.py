"""Load truth (issue 23, item 5) as users type it: the reference kernel with
one worker runs one turn at a time however many connections are open, and
stress and findmax say so from the mock's side (turns at the agent against
turns in flight); with four workers the same load runs four at once. Bands,
not timings: one worker stays under 1.5 turns at the agent, four over 2.5."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
# turns of ~250 ms of tools: long enough that four overlap at the agent, short enough for a quick run
STRESS = ("stress", "--launch", "--quiet", "--conns", "4", "--inputs", "5", "--mix", "!slowbatch2:1", "--no-dedup-probe")


def run_doc(r) -> tuple[Path, dict]:
    d = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    return d, json.loads((d / "run.json").read_text())


def test_one_worker_serialises_and_four_do_not(cli):
    one = cli.run(*STRESS, "--out", str(cli.out), "--", "--workers", "1")
    assert one.returncode == 0, one.stdout + one.stderr
    d, doc = run_doc(one)
    c = doc["summary"]["concurrency"]
    assert c["seen"] == c["turns"] == 20
    assert c["agent"]["mean"] < 1.5 and c["agent"]["peak"] == 1 and c["in_flight"]["peak"] == 4
    assert c["finding"] == "turns_serialised"
    report = (d / "report.md").read_text()
    assert "Concurrency achieved: " in report and "**Finding:** turns_serialised" in report
    # a finding, not a failed check: the run passed (exit 0 above); a threshold makes it one
    strict = cli.run(*STRESS, "--threshold", "concurrency_ratio>=0.8", "--out", str(cli.out), "--", "--workers", "1")
    assert strict.returncode == 99, strict.stdout + strict.stderr
    _, sdoc = run_doc(strict)
    assert not sdoc["summary"]["thresholds"][0]["passed"]
    # kstress report recomputes it from turns.jsonl
    again = cli.run("report", str(d))
    assert again.returncode == 0 and "**Finding:** turns_serialised" in again.stdout

    four = cli.run(*STRESS, "--out", str(cli.out), "--", "--workers", "4")
    assert four.returncode == 0, four.stdout + four.stderr
    _, doc4 = run_doc(four)
    c4 = doc4["summary"]["concurrency"]
    assert c4["agent"]["mean"] > 2.5 and c4["agent"]["peak"] >= 3 and c4["finding"] is None, c4


def test_per_kernel_lines_name_the_serial_one(cli):
    r = cli.run("stress", "--launch", "--quiet", "--bin", "refkernel --workers 1", "--bin", "refkernel --workers 4", "--conns", "8", "--inputs", "3",
                "--mix", "!slowbatch2:1", "--no-dedup-probe", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d, doc = run_doc(r)
    by = {k["name"]: k["concurrency"] for k in doc["summary"]["kernels"]}
    assert by["refkernel"]["agent"]["peak"] == 1 and by["refkernel"]["finding"] == "turns_serialised"
    assert by["refkernel#2"]["agent"]["mean"] > 2.0 and by["refkernel#2"]["finding"] is None, by
    report = (d / "report.md").read_text()
    assert "- refkernel: concurrency achieved: " in report and "**Finding (refkernel):** turns_serialised" in report
    assert "**Finding (refkernel#2):**" not in report


def test_findmax_knee_of_a_one_worker_kernel_is_one_connection(cli):
    r = cli.run("findmax", "--launch", "--quiet", "--start", "1", "--factor", "2", "--max", "4", "--stage-duration", "2s",
                "--mix", "!slowbatch2:1", "--slo", "pass_rate>=0.99", "--out", str(cli.out), "--", "--workers", "1")
    assert r.returncode == 0, r.stdout + r.stderr
    d, doc = run_doc(r)
    s = doc["summary"]
    assert all(h["concurrency"]["agent"]["peak"] == 1 for h in s["stages"]), s["stages"]
    # one turn at a time: more connections only queue, and the throughput is 1 / the turn's time at the agent from the
    # first stage on (2 when the harness's own gap between one connection's turns costs it over 10% on a loaded host)
    assert s["knee"] in (1, 2), [(h["level"], h["throughput_per_s"]) for h in s["stages"]]
    mc = s["concurrency"]
    assert mc["finding"] == "turns_serialised" and mc["agent"]["mean"] < 1.5
    cap = 1 / mc["agent"]["turn_s"]
    best = max(h["throughput_per_s"] for h in s["stages"])
    assert 0.6 * cap < best < 1.2 * cap, (best, cap)
    report = (d / "report.md").read_text()
    assert "Concurrency achieved: at most 1.0 turns at the agent" in report and "**Finding: turns_serialised**" in report
