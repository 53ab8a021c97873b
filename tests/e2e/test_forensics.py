"""Failure forensics end to end: a kernel that runs only the first tool of a
batch (refkernel --fault first-tool-only) leaves failures.jsonl entries with
the frames and the mock's requests of each failed nonce, an example per
failure name in report.md, and `kstress show` tells a turn's story; a clean
run leaves an empty failures.jsonl; at most 20 entries per name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
FAULT = ("--", "--fault", "first-tool-only")


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def entries(d: Path) -> list[dict]:
    return [json.loads(line) for line in (d / "failures.jsonl").read_text().splitlines()]


def test_a_failed_turn_keeps_its_story_and_show_prints_it(cli):
    r = cli.run("stress", "--launch", "--conns", "2", "--inputs", "3", "--mix", "!batch4:1", "--quiet", "--out", str(cli.out), *FAULT)
    assert r.returncode == 1, r.stdout + r.stderr
    d = run_dir(r)
    es = entries(d)
    assert len(es) == 6 and {e["failure"] for e in es} == {"count"}
    e = es[0]
    assert e["row"]["nonce"] == e["nonce"] and e["row"]["failures"] == ["count 1/4"]
    assert e["expected"] == 4 and e["got"] == 1
    assert e["frames"] and e["frames"][-1]["frame"]["type"] == "response"
    assert all(f["t_ms"] >= 0 for f in e["frames"]) and [f["t_ms"] for f in e["frames"]] == sorted(f["t_ms"] for f in e["frames"])
    assert e["mock_source"] == "log" and [q["followup"] for q in e["mock_requests"]] == [False, True]
    follow = e["mock_requests"][1]
    assert all(q["nonce"] == e["nonce"] for q in e["mock_requests"])
    assert len(follow["calls"]) == 4 and len(follow["results"]) == 1 and follow["roles"][-1] == "tool"
    assert "got=1" in e["verdict"]["mock"] and "got=1" in e["verdict"]["reply"]

    report = (d / "report.md").read_text()
    section = report.split("## Failure examples", 1)[1]
    assert "**count**" in section and "6 kept in failures.jsonl" in section and "expected: 4 tool results" in section
    nonce = section.split("(`", 1)[1].split("`", 1)[0]
    assert nonce in {x["nonce"] for x in es}
    assert "## Failure examples" in cli.run("report", str(d)).stdout  # the re-render keeps it

    shown = cli.run("show", str(d), nonce[:-2])  # a prefix matching one turn
    assert shown.returncode == 0, shown.stderr
    out = shown.stdout
    assert out.startswith(f"turn {nonce}: FAIL count 1/4")
    assert '"phase":"start"' in out and '"type":"response"' in out  # the frames, in order, with times
    assert "follow-up" in out and "roles: system user assistant tool" in out and out.count("      call ") == 4 and out.count("      result ") == 1
    assert "expected: 4 tool results" in out and "came:     1 of 4 tool results" in out

    unknown = cli.run("show", str(d), "nosuchnonce")
    assert unknown.returncode == 2 and "'nosuchnonce'" in unknown.stderr and "turns.jsonl" in unknown.stderr


def test_a_clean_run_has_an_empty_failures_file_and_show_reads_turns_and_the_mock_log(cli):
    r = cli.run("stress", "--launch", "--conns", "2", "--inputs", "2", "--mix", "!batch4:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(r)
    assert (d / "failures.jsonl").read_text() == ""
    assert "## Failure examples" not in (d / "report.md").read_text()
    nonce = json.loads((d / "turns.jsonl").read_text().splitlines()[0])["nonce"]
    shown = cli.run("show", str(d), nonce)
    assert shown.returncode == 0 and shown.stdout.startswith(f"turn {nonce}: PASS")
    assert "frames: not kept" in shown.stdout and "from mock.jsonl" in shown.stdout and shown.stdout.count("      result ") == 4


def test_at_most_20_failures_of_one_name_are_kept(cli):
    r = cli.run("stress", "--launch", "--conns", "4", "--inputs", "8", "--mix", "!batch4:1", "--quiet", "--no-dedup-probe", "--out", str(cli.out), *FAULT)
    assert r.returncode == 1, r.stdout + r.stderr
    d = run_dir(r)
    assert len(entries(d)) == 20
    fx = json.loads((d / "run.json").read_text())["extras"]["failure_examples"]
    assert fx["kept"] == {"count": 20} and fx["not_kept"] == {"count": 12}
    assert "20 kept in failures.jsonl, 12 more not kept" in (d / "report.md").read_text()
