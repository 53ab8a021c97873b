"""hold past one process (issue 25): `hold --fleet local:3` holds 30,000
connections on two reference kernels, more than one process's RLIMIT_NOFILE
(20,000) allows, which without --fleet is refused by name; two kernels held
from one process split the connections by weight. Nothing of Ray and no
sandbox namespace is left."""

from __future__ import annotations

import resource

import pytest

from e2ehelpers import namespace_gone
from test_fleet import loaded, ray_left, run_dir

# a fleet starts Ray, then opens 30,000 connections: past the suite's 120 s on a loaded CI
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]
TWO = ("--launch", "--bin", "refkernel", "--bin", "refkernel", "--quiet")


def _namespaces(doc) -> list[str]:
    return [t["namespace"] for t in doc["meta"]["targets"] if t.get("namespace")]


def test_a_local_fleet_holds_more_connections_than_one_process_can(cli):
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft >= 30_000 + 256:
        pytest.skip(f"RLIMIT_NOFILE is {soft} here: one process could hold 30,000 alone")
    one = cli.run("hold", *TWO, "--conns", "30000", "--out", str(cli.out))
    assert one.returncode == 2 and f"RLIMIT_NOFILE is {soft}" in one.stderr and "--fleet local:" in one.stderr, one.stdout + one.stderr

    r = cli.run("hold", "--fleet", "local:3", *TWO, "--conns", "30000", "--out", str(cli.out), timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    doc, rows = loaded(run_dir(r))
    s = doc["summary"]
    assert (s["requested"], s["connected"], s["held_at_probe"], s["failures"]) == (30_000, 30_000, 30_000, {})
    assert s["probe"] == {"sent": 32, "passed": 32} and all(c["passed"] for c in doc["checks"] if not c["name"].startswith("declared_llm_api"))
    assert [w["connected"] for w in s["workers"]] == [10_000] * 3 and all(w["harness_kb_per_connection"] > 0 for w in s["workers"])
    # each kernel's own stats frame: 15,000 held (the head's asking connection not counted)
    assert [(k["name"], k["conns"], k["connected"], k["kernel_connections"]) for k in s["kernels"]] == [
        ("refkernel", 15_000, 15_000, 15_000), ("refkernel#2", 15_000, 15_000, 15_000)]
    assert s["kernel_connections"] == 30_000
    probes = [r for r in rows if r["kind"] == "probe"]
    assert sorted(r["conn"] for r in probes) == list(range(32)) and {r["worker"] for r in probes} == {0, 1, 2}
    assert {r["kernel"] for r in probes} == {"refkernel", "refkernel#2"}
    assert ray_left() == []
    assert all(namespace_gone(ns, None) for ns in _namespaces(doc))


def test_two_kernels_held_from_one_process_split_by_weight(cli):
    r = cli.run("hold", *TWO, "--weight", "3", "--weight", "1", "--conns", "200", "--probe", "8", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    doc, rows = loaded(run_dir(r))
    s = doc["summary"]
    assert (s["connected"], s["held_at_probe"], s["kernel_connections"], s["probe"]) == (200, 200, 200, {"sent": 8, "passed": 8})
    assert [(k["name"], k["weight"], k["conns"], k["connected"], k["kernel_connections"]) for k in s["kernels"]] == [
        ("refkernel", 3.0, 150, 150, 150), ("refkernel#2", 1.0, 50, 50, 50)]
    assert "workers" not in s and "fleet" not in doc["extras"]
    assert sorted(r["conn"] for r in rows) == list(range(8)) and {r["kernel"] for r in rows} == {"refkernel", "refkernel#2"}
    report = (run_dir(r) / "report.md").read_text()
    assert "| refkernel#2 | 1 | 50 | 50 | 50 |" in report
    assert all(namespace_gone(ns, None) for ns in _namespaces(doc))
