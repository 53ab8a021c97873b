"""A kernel that writes its own verdict lines fails by `forged_verdict`, in
every scenario (issue 22 item 1). Before: 40/40 in stress, and a pass in
sessions, findmax, batch and abtest, with the mock holding no record of any
of those turns. tests/harness/test_verdict_auth.py holds the judge's rules
one by one; this is the real kernel, in a real sandbox."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.results.rundir import read_jsonl

pytestmark = pytest.mark.slow

FORGE = Path(__file__).resolve().parent / "forgekernel.py"

SCENARIOS = [
    ("stress", "--conns", "4", "--inputs", "3", "--mix", "text:1,!batch4:1,!slowbatch2:1,!mixed3:1", "--no-dedup-probe"),
    ("batch", "--n", "2,4", "--rounds", "1"),
    ("abtest", "--n", "2", "--rounds", "3"),
    ("sessions", "--sessions", "2", "--turns", "3", "--mix", "!batch2:1,text:1", "--contract", "sessions=true"),
    ("findmax", "--start", "1", "--max", "2", "--stage-duration", "1s", "--slo", "p95<5s", "--mix", "!batch2:1"),
]


def wrapper(tmp: Path, mode: str) -> Path:
    w = tmp / f"forge-{mode}"
    w.write_text(f"#!/bin/sh\nexec {sys.executable} {FORGE} {mode} \"$@\"\n")
    w.chmod(0o755)
    return w


def failures_of(run_dir: Path, text: bool) -> set[str]:
    """The first failure's name of every answered turn (tool turns; and text
    turns when ``text``: a kernel that asked the LLM for a text turn got the
    mock's real answer, and may pass it on)."""
    rows = [r for r in read_jsonl(run_dir / "turns.jsonl") if r.get("outcome") == "response" and not r.get("duplicate")]
    rows = [r for r in rows if text or r.get("plan") != "text"]
    assert rows, f"no answered turn in {run_dir}"
    return {(r.get("failures") or ["passed"])[0].split(" ", 1)[0] for r in rows}


@pytest.mark.parametrize("mode", ["never", "skip-tools"])
def test_a_kernel_that_forges_its_verdict_lines_fails_every_scenario(cli, mode):
    up = cli.run("launch", "--bin", str(wrapper(cli.out.parent, mode)))
    assert up.returncode == 0, up.stderr
    try:
        for args in SCENARIOS:
            before = set(cli.out.iterdir()) if cli.out.exists() else set()
            r = cli.run(*args, "--quiet", "--out", str(cli.out))
            assert r.returncode == 1, (args[0], r.returncode, r.stdout[-2000:], r.stderr[-2000:])
            [run_dir] = [p for p in set(cli.out.iterdir()) - before if not p.is_symlink()]
            got = failures_of(run_dir, text=mode == "never")
            assert got == {"forged_verdict"}, (args[0], got)
            doc = json.loads((run_dir / "run.json").read_text())
            assert doc["exit_code"] == 1
    finally:
        assert cli.run("stop").returncode == 0


def test_the_reference_kernel_passes_the_same_scenarios(cli):
    """The control: the honest kernel, in the same sandbox shape, passes each."""
    up = cli.run("launch")
    assert up.returncode == 0, up.stderr
    try:
        for args in SCENARIOS:
            args = tuple(a for a in args if a != "sessions=true" and a != "--contract")  # the refkernel declares it
            r = cli.run(*args, "--quiet", "--out", str(cli.out))
            assert r.returncode == 0, (args[0], r.stdout[-3000:], r.stderr[-2000:])
    finally:
        assert cli.run("stop").returncode == 0
