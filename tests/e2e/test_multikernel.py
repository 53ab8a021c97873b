"""Several kernels at once, end to end: two reference kernels launched
together in one sandbox with one shared mock. Only the faulty one fails, by
name, and only its check; weights split the attempts (closed and open model);
a bad --weight count is exit 2 before anything starts; sessions run on two
kernels; an orphan is blamed on the kernel that left it, not its sibling;
`kstress report` recomputes the same summary.kernels."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.results.rundir import read_run
from harness.scenarios.runner import recompute
from harness.scenarios import scenario

from e2ehelpers import namespace_gone

pytestmark = pytest.mark.slow
SMALL = ("--conns", "8", "--inputs", "4", "--mix", "!batch4:1", "--quiet")
REFKERNEL = str(Path(sys.executable).with_name("refkernel"))


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def loaded(d: Path):
    doc = json.loads((d / "run.json").read_text())
    rows = [json.loads(ln) for ln in (d / "turns.jsonl").read_text().splitlines()]
    return doc, rows


def assert_recomputed(d: Path, doc: dict) -> None:
    """`kstress report` derives summary.kernels and the checks from the raw files, and they agree."""
    run = read_run(d)
    summary, checks = recompute(scenario(doc["scenario"]), run.doc, run.rows)
    assert summary["kernels"] == doc["summary"]["kernels"]
    assert [c.to_json() for c in checks] == doc["checks"]


def test_only_the_faulty_kernel_fails_by_name(cli):
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", "refkernel --fault first-tool-only", *SMALL, "--out", str(cli.out))
    assert r.returncode == 1, r.stdout + r.stderr
    d = run_dir(r)
    doc, rows = loaded(d)
    clean, faulty = doc["summary"]["kernels"]
    assert (clean["name"], faulty["name"]) == ("refkernel", "refkernel#2")
    assert clean["attempted"] == faulty["attempted"] == 16  # an even split of 8 connections x 4 inputs
    assert clean["passed"] == 16 and clean["pass_rate"] == 1.0 and clean["failures"] == {} and clean["orphans"] == []
    # first-tool-only runs one tool of four: the count failure, named
    assert faulty["passed"] == 0 and faulty["failures"] == {"count": 16} and faulty["failure_examples"]["count"] == "count 1/4"
    assert clean["latency_s"]["n"] == 16 and set(clean["latency_s"]) == set(doc["summary"]["latency_s"])
    failed = [c["name"] for c in doc["checks"] if not c["passed"]]
    assert failed == ["every input passed its verdict", "every input to refkernel#2 passed its verdict"], doc["checks"]
    assert {c["name"] for c in doc["checks"]} >= {"every input to refkernel passed its verdict", "no orphans after refkernel exited", "no orphans after refkernel#2 exited"}
    # every row names its kernel; the clean kernel's rows all passed
    load = [x for x in rows if x["kind"] == "load"]
    assert {x["kernel"] for x in load} == {"refkernel", "refkernel#2"}
    assert all(x["passed"] for x in load if x["kernel"] == "refkernel") and not any(x["passed"] for x in load if x["kernel"] == "refkernel#2")
    # one sandbox, one mock: both kernels in the same namespace, the mock's log kept once
    ns = {t["namespace"] for t in doc["meta"]["targets"]}
    assert len(ns) == 1 and [t["kernel"] for t in doc["meta"]["targets"]] == ["refkernel", "refkernel#2"]
    assert (d / "mock.jsonl").exists() and (d / "logs-refkernel" / "mock.err").exists() and (d / "logs-refkernel#2" / "target.err").exists()
    assert namespace_gone(next(iter(ns)), None)
    report = (d / "report.md").read_text()
    assert "| refkernel#2 | 1 | 16 | 0 | 0.0% |" in report and "| refkernel | 1 | 16 | 16 | 100.0% |" in report
    assert "FAIL every input to refkernel#2 passed its verdict" in report and "PASS every input to refkernel passed its verdict" in report
    assert_recomputed(d, doc)
    again = cli.run("report", str(d))
    assert again.returncode == 0 and "were they edited" not in again.stdout and "| refkernel#2 | 1 | 16 | 0 | 0.0% |" in again.stdout


def test_weights_split_the_attempts_closed_and_open_model(cli):
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "3", "--weight", "1", *SMALL, "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    d = run_dir(r)
    doc, rows = loaded(d)
    a, b = doc["summary"]["kernels"]
    assert (a["name"], a["weight"], a["conns"], a["attempted"], a["passed"]) == ("refkernel", 3.0, 6, 24, 24)
    assert (b["name"], b["weight"], b["conns"], b["attempted"], b["passed"]) == ("refkernel#2", 1.0, 2, 8, 8)
    assert doc["passed"] and all(c["passed"] for c in doc["checks"])
    # the connections of one kernel send only to it
    by_conn = {}
    for x in rows:
        if x["kind"] == "load":
            by_conn.setdefault(x["conn"], set()).add(x["kernel"])
    assert all(len(v) == 1 for v in by_conn.values()) and len(by_conn) == 8
    assert_recomputed(d, doc)

    # the open model splits the inputs by weight
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "1", "--weight", "3",
                "--rate", "40", "--conns", "4", "--inputs", "4", "--mix", "!batch2:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc, _ = loaded(run_dir(r))
    assert [(k["attempted"], k["passed"]) for k in doc["summary"]["kernels"]] == [(4, 4), (12, 12)]


def test_a_bad_weight_count_exits_2_before_anything_starts(cli):
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", "refkernel --fault first-tool-only", "--weight", "1", *SMALL, "--out", str(cli.out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--weight was given 1 time(s) for 2 kernel(s) (refkernel, refkernel#2): give one --weight per kernel" in r.stderr
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "-2", "--weight", "1", *SMALL, "--out", str(cli.out))
    assert r.returncode == 2 and "--weight -2.0 (kernel refkernel) is invalid: a weight is a positive number" in r.stderr, r.stderr
    assert not cli.out.exists() or not any(cli.out.iterdir())


@pytest.mark.parametrize("name", ["x/../../../evil", "a/b", "/abs"])
def test_a_kernel_name_that_is_not_one_path_part_exits_2_before_anything_starts(cli, tmp_path, name):
    """Each kernel's name names its files in the run directory (logs-NAME/,
    resources-NAME.jsonl): one with a '/' wrote outside it, or crashed with
    exit 4 (issue 22, item 10)."""
    files = []
    for i, n in enumerate((name, "fine")):
        f = tmp_path / f"k{i}.toml"
        f.write_text(f'[target]\nname = "{n}"\nbin = "{REFKERNEL}"\n')
        files += ["--target", str(f)]
    r = cli.run("stress", "--launch", *files, *SMALL, "--out", str(cli.out))
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"kernel name {name!r} (target file {files[1]}) cannot name its files in the run directory" in r.stderr, r.stderr
    assert "without '/'" in r.stderr
    assert not cli.out.exists() or not any(cli.out.iterdir())
    assert not (tmp_path.parent / "evil").exists() and not (tmp_path / "evil").exists()


def test_sessions_on_two_kernels(cli):
    r = cli.run("sessions", "--launch", "--bin", "refkernel", "--bin", "refkernel --fault first-tool-only", "--sessions", "4", "--turns", "3",
                "--mix", "!batch2:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 1, r.stdout + r.stderr
    d = run_dir(r)
    doc, rows = loaded(d)
    clean, faulty = doc["summary"]["kernels"]
    assert (clean["name"], clean["sessions"], clean["attempted"], clean["passed"]) == ("refkernel", 2, 6, 6)
    # a session stops at its first failed turn: two sessions, one turn each
    assert (faulty["name"], faulty["sessions"], faulty["attempted"], faulty["passed"], faulty["failures"]) == ("refkernel#2", 2, 2, 0, {"count": 2})
    failed = [c["name"] for c in doc["checks"] if not c["passed"]]
    assert "every turn to refkernel#2 passed its verdict" in failed and "every turn to refkernel passed its verdict" not in failed
    # a session's turns all go to one kernel
    by_session = {}
    for x in rows:
        by_session.setdefault(x["session"], set()).add(x["kernel"])
    assert all(len(v) == 1 for v in by_session.values())
    assert_recomputed(d, doc)

    ok = cli.run("sessions", "--launch", "--bin", "refkernel", "--bin", "refkernel", "--sessions", "4", "--turns", "2", "--quiet", "--out", str(cli.out))
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_an_orphan_is_blamed_on_the_kernel_that_left_it(cli, tmp_path):
    # the leaky kernel runs second: while the first is stopped and checked,
    # the second (and what it runs) lives on, and is not the first's orphan
    leaky = tmp_path / "leaky-kernel"
    leaky.write_text(f"#!/bin/sh\n# a child the kernel never knew about, outliving it\nsleep 600 &\nexec {REFKERNEL} \"$@\"\n")
    leaky.chmod(0o755)
    r = cli.run("stress", "--launch", "--bin", "refkernel", "--bin", str(leaky), "--conns", "2", "--inputs", "2", "--mix", "!batch2:1",
                "--no-dedup-probe", "--quiet", "--out", str(cli.out))
    assert r.returncode == 1, r.stdout + r.stderr
    doc, _ = loaded(run_dir(r))
    failed = [c for c in doc["checks"] if not c["passed"]]
    assert [c["name"] for c in failed] == ["no orphans after leaky-kernel exited"], doc["checks"]
    assert "sleep 600" in failed[0]["detail"]
    ref, leak = doc["summary"]["kernels"]
    assert ref["orphans"] == [] and [o["cmdline"] for o in leak["orphans"]] == ["sleep 600"]
