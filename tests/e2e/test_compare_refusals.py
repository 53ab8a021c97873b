"""kstress compare on real stored runs of the reference kernel, where no
timing decides: runs of other settings or scenarios are refused (exit 2)
naming the difference; the reference kernel's contract against one's own
compares over the keys stress uses, another order rule is refused. (What
timing decides, made alone: test_compare_runs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from e2ehelpers import run_dir

# not `serial`: a refusal is read from run.json, and of the one compare that goes on (`mix` against `own`, 4 turns
# each) only `latency all` is timed, 2 slow and 2 text turns a run: a band of ~40-90x, whose drift limit (x890 at
# 1.5 bands) no load of the moment crosses (docs/metrics.md); the other timed rows have too few samples
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
# another mix and conns than `mix` below, and other inputs (which may differ)
OLD = ("stress", "--launch", "--conns", "4", "--inputs", "1", "--mix", "!slowbatch4:1,text:1", "--quiet")
MIX = ("stress", "--launch", "--conns", "2", "--inputs", "2", "--mix", "!slowbatch4:1,text:2", "--quiet")
RUNS = {
    "old": OLD,
    "mix": MIX,
    "batch": ("batch", "--launch", "--n", "2", "--kinds", "batch", "--rounds", "1", "--quiet"),
    # like `mix` under one's own kernel's contract (no dedup, interrupts, stats, sessions), and under another order rule
    "own": (*MIX, *[a for pair in ("dedup=false", "interrupts=false", "stats=false", "sessions=false") for a in ("--contract", pair)]),
    "anyorder": (*MIX, "--contract", "order=any"),
}


def made(cli, *names: str) -> dict[str, Path]:
    """The stored runs a test compares, made by the test itself: a module's
    shared runs would be made again by each xdist worker its tests land on."""
    out = {}
    for name in names:
        r = cli.run(*RUNS[name], "--out", str(cli.out))
        assert r.returncode == 0, r.stdout + r.stderr
        out[name] = run_dir(r)
    return out


def test_runs_that_cannot_be_compared_are_refused_naming_the_difference(cli, tmp_path):
    d = made(cli, "old", "mix", "batch")
    r = cli.run("compare", str(d["old"]), str(d["mix"]))
    assert r.returncode == 2 and r.stdout == ""
    assert "different mix: OLD '!slowbatch4:1,text:1', NEW '!slowbatch4:1,text:2'" in r.stderr
    assert "different conns: OLD 4, NEW 2" in r.stderr and "inputs" not in r.stderr.split("cannot be compared:")[1].split("(docs")[0]
    r = cli.run("compare", str(d["old"]), str(d["batch"]))
    assert r.returncode == 2 and "different scenarios: OLD is stress, NEW is batch" in r.stderr
    r = cli.run("compare", str(d["old"]), str(tmp_path))
    assert r.returncode == 2 and f"{tmp_path}/run.json: cannot read it" in r.stderr and "run directory" in r.stderr


def test_the_reference_kernels_contract_against_ones_own_compares_over_the_keys_stress_uses(cli):
    """issue 22 item 16: refused as 'different contract' though stress uses none of the keys that differ."""
    d = made(cli, "mix", "own", "anyorder")
    r = cli.run("compare", str(d["mix"]), str(d["own"]))
    assert r.returncode == 0, r.stdout + r.stderr
    for key in ("dedup", "interrupts", "stats", "sessions"):
        assert f"note: contract {key} differs (OLD True, NEW False): allowed, stress's rows do not depend on it" in r.stdout
    r = cli.run("compare", str(d["mix"]), str(d["anyorder"]))
    assert r.returncode == 2 and r.stdout == ""
    assert "different contract order: OLD 'declared', NEW 'any'" in r.stderr and "different contract:" not in r.stderr
