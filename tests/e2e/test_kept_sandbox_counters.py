"""A kept sandbox (`kstress launch`, then runs against it) serves run after run:
its kernel's counters are totals since it started. Each run's report shows
its own — the counters at its end minus at its start (issue 22 item 8)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_a_second_run_on_a_kept_sandbox_counts_only_its_own_turns(cli):
    """Before: the second run's report said executed 12, the first run's 6 turns included."""
    up = cli.run("launch")
    assert up.returncode == 0, up.stderr
    runs = []
    try:
        for _ in range(2):
            r = cli.run("stress", "--conns", "2", "--inputs", "3", "--mix", "text:1", "--no-dedup-probe", "--quiet", "--out", str(cli.out))
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            runs.append(Path(r.stdout.strip().splitlines()[-1].removeprefix("run: ")))
    finally:
        assert cli.run("stop").returncode == 0
    summaries = [json.loads((d / "run.json").read_text())["summary"] for d in runs]
    assert [(s["attempted"], s["kernel"]["executed"]) for s in summaries] == [(6, 6), (6, 6)], [s["kernel"] for s in summaries]
    for d, s in zip(runs, summaries):
        assert s["kernel_counted"] == "run" and "this run's (at its end minus at its start)" in (d / "report.md").read_text()
