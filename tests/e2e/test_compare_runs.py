"""kstress compare on real stored runs of the reference kernel: two clean
stress runs compare clean (exit 0); a run with `--fault serial-tools` as NEW
against a clean OLD exits 1 naming the rows it is worse on — its `!slowbatch4`
turns all fail `no_overlap` (the batch ran one call at a time), so the pass
rate falls by those turns and `!slowbatch4` has no passed turn left to time;
swapped, the same pair is better, not worse. Two runs of one build are
neither better nor worse on any row, stress or abtest (issue 22 item 6:
drift between stored runs is inconclusive), while abtest's speedup of a
serial-tools NEW is still worse. (Refusals and contract keys, which no load
moves: test_compare_refusals.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from e2ehelpers import Cli, run_dir

# two stored runs made apart: their latency drifts with the load of the moment (issue 22, item 6): `serial`;
# a module fixture makes three runs, each up to 25 s on a loaded 2-core box
pytestmark = [pytest.mark.slow, pytest.mark.serial, pytest.mark.timeout(300)]
STRESS = ("stress", "--launch", "--conns", "4", "--inputs", "8", "--mix", "!slowbatch4:1,text:1", "--quiet")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The stored runs, made once: clean OLD and NEW back to back, a
    serial-tools NEW."""
    base = tmp_path_factory.mktemp("compare")
    cli = Cli(base / "home", base / "runs")
    out = {}
    for name, extra in (("old", ()), ("new", ()), ("serial", ("--", "--fault", "serial-tools"))):
        r = cli.run(*STRESS, "--out", str(cli.out), *extra)
        assert r.returncode == (1 if name == "serial" else 0), r.stdout + r.stderr
        out[name] = run_dir(r)
    return cli, out


def rows_of(path: Path) -> dict[str, dict]:
    return {r["name"]: r for r in json.loads(path.read_text())["rows"]}


def test_two_clean_runs_of_the_same_kernel_compare_clean(runs, tmp_path):
    cli, d = runs
    r = cli.run("compare", str(d["old"]), str(d["new"]), "-o", str(tmp_path / "compare.json"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().splitlines()[-1].startswith("compare: NEW is not worse on any row")
    rows = rows_of(tmp_path / "compare.json")
    assert rows["pass rate"]["old"] == rows["pass rate"]["new"] == 1.0 and rows["pass rate"]["verdict"] == "same"
    assert {"latency all", "latency !slowbatch4", "latency text", "throughput", "resources RSS"} <= set(rows)
    # one build: no claim either way; a row the within-run test called is inconclusive, with the numbers (issue 22 item 6)
    assert not [n for n, row in rows.items() if row["verdict"] in ("worse", "better")], rows
    assert "note: the same binary (sha256 " in r.stdout


def test_serial_tools_new_is_worse_on_pass_rate_and_slowbatch_latency_and_swapped_it_is_better(runs, tmp_path):
    cli, d = runs
    r = cli.run(str(d["old"]), str(d["serial"]), "-o", str(tmp_path / "compare.md"), script="compare.py")
    assert r.returncode == 1, r.stdout + r.stderr
    last = r.stdout.strip().splitlines()[-1]
    # text turns are not touched by the fault, but share a kernel busy with serial batches: their latency may move too
    assert last.startswith("compare: NEW is worse on ") and "pass rate, latency !slowbatch4" in last, last
    assert (tmp_path / "compare.md").read_text().rstrip().endswith(last)
    r = cli.run("compare", str(d["old"]), str(d["serial"]), "--json")
    assert r.returncode == 1 and r.stderr.strip() == last
    doc = json.loads(r.stdout)
    rows = {row["name"]: row for row in doc["rows"]}
    assert doc["worse"][:2] == ["pass rate", "latency !slowbatch4"] and set(doc["worse"]) <= {"pass rate", "latency !slowbatch4", "latency text"}
    assert doc["exit_code"] == 1
    slow_turns = sum(1 for line in (d["serial"] / "turns.jsonl").read_text().splitlines()
                     if json.loads(line).get("kind") == "load" and json.loads(line).get("marker") == "!slowbatch4")
    pr = rows["pass rate"]
    assert pr["new_failures"] == {"no_overlap": slow_turns} and pr["change"] == pytest.approx(-slow_turns / 32)
    assert rows["latency !slowbatch4"]["new"] is None and f"0 of {slow_turns} turns passed" in rows["latency !slowbatch4"]["reason"]
    assert rows["latency all"]["verdict"] == "unmeasurable" and "another mix of markers" in rows["latency all"]["reason"]

    back = cli.run("compare", str(d["serial"]), str(d["old"]), "--json")
    doc = json.loads(back.stdout)
    rows = {row["name"]: row for row in doc["rows"]}
    # the fixed kernel runs 4 tools at once: more processes, fds and RSS at a time, which the resource rows may call
    # worse; and its text turns now share the 2 cores with 4 tool processes at a time instead of 1 (CI saw text's
    # median at 8.6 ms called worse, p<0.05): the reason the forward direction allows "latency text" too
    assert set(doc["worse"]) <= {"latency text", "resources RSS", "resources CPU", "resources open fds"}, back.stdout
    assert back.returncode == (1 if doc["worse"] else 0)
    assert rows["pass rate"]["verdict"] == "better"
    assert rows["latency !slowbatch4"]["verdict"] == "unmeasurable"  # OLD had nothing to time: no claim either way


ABTEST = ("abtest", "--launch", "--n", "4", "--rounds", "6", "--quiet")


@pytest.fixture(scope="module")
def abruns(tmp_path_factory):
    """Two abtest runs of the reference kernel made apart (the issue's pair: 3.51x -> 3.14x came out worse), and
    one with --fault serial-tools (its parallel-safe batches ran without overlap: exit 1)."""
    base = tmp_path_factory.mktemp("abcompare")
    cli = Cli(base / "home", base / "runs")
    out = {}
    for name, extra in (("old", ()), ("new", ()), ("serial", ("--", "--fault", "serial-tools"))):
        r = cli.run(*ABTEST, "--out", str(cli.out), *extra)
        assert r.returncode == (1 if name == "serial" else 0), r.stdout + r.stderr
        out[name] = run_dir(r)
    return cli, out


def test_two_abtest_runs_of_one_build_are_neither_better_nor_worse(abruns):
    cli, d = abruns
    for old, new in (("old", "new"), ("new", "old")):
        r = cli.run("compare", str(d[old]), str(d[new]), "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        rows = {row["name"]: row for row in json.loads(r.stdout)["rows"]}
        assert {"speedup N=4", "tool phase N=4"} <= set(rows)
        assert not [n for n, row in rows.items() if row["verdict"] in ("worse", "better")], rows
        assert rows["speedup N=4"]["drift"]["limit"] > 1  # the rule had both runs' bands to go by


def test_abtest_serial_tools_new_is_still_worse_on_the_speedup(abruns):
    cli, d = abruns
    r = cli.run("compare", str(d["old"]), str(d["serial"]), "--json")
    assert r.returncode == 1, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    rows = {row["name"]: row for row in doc["rows"]}
    sp = rows["speedup N=4"]
    # ~3.5x -> ~1x: far beyond either run's own band
    assert sp["verdict"] == "worse" and sp["new"] < 1.5 < 2.5 < sp["old"] and sp["drift"]["shift"] > sp["drift"]["limit"], sp
    assert "speedup N=4" in doc["worse"] and r.stderr.strip().endswith("exit 1")
