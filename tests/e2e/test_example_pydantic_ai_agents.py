"""pydantic-ai on its own servers, launched from the example target files as a
user would (issue 23 item 6): AG-UI (examples/pydantic-ai-agui.toml,
AGUIAdapter) and A2A (examples/pydantic-ai-a2a.toml, fasta2a). Neither app has
kstress code in it; their model is the sandbox's mock. Each passes batch under
its declared contract (`barrier`: `!mixedN` included) and sessions; a contract
it does not keep fails by name, and so does its planted shared history
(KSTRESS_EXAMPLE_PLANT=shared-history: every thread / context one history).
A cancel is honoured over AG-UI and ignored by fasta2a, by name.
docs/example-pydantic-ai-agents.md has the measurements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGETS = {"agui": EXAMPLES / "pydantic-ai-agui.toml", "a2a": EXAMPLES / "pydantic-ai-a2a.toml"}
PROTOCOLS = pytest.mark.parametrize("protocol", sorted(TARGETS))


def scenario(cli, *args: str):
    r = cli.run(*args, "--quiet", "--out", str(cli.out), timeout=240)
    out = r.stdout + r.stderr
    run = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: ")) if r.stdout.strip() else None
    return r, out, run


@PROTOCOLS
@pytest.mark.timeout(300)
def test_the_launched_example_passes_batch_and_sessions_and_a_wrong_contract_fails(cli, protocol):
    """One sandbox per protocol (`kstress launch --target`, then scenarios
    against it: the launch is most of the time). batch passes under the
    declared contract (`barrier`, `!mixedN` included); a contract the agent does
    not keep (serial: its parallel-safe calls overlap) fails naming the overlap;
    sessions pass, each on its own thread (AG-UI: the client's history) or
    context (A2A: fasta2a's storage) -- the plant-off side of the next test."""
    # 200 ms mixed sleeps (the mock's, set at launch): each side of the barrier
    # overlaps even when a loaded machine is slow to start the next shell
    r = cli.run("launch", "--target", str(TARGETS[protocol]), "--mixed-ms", "200", timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cli.state()["protocol"] == protocol
    try:
        r, out, run = scenario(cli, "batch", "--n", "2,4", "--rounds", "1")
        assert r.returncode == 0, out[-3000:]
        assert "6/6 turns passed" in r.stdout and "PASS mixed batches ran as barriers" in r.stdout, out[-3000:]
        (t,) = json.loads((run / "run.json").read_text())["meta"]["targets"]
        assert t["contract"]["batch"] == "barrier" and t["contract"]["sessions"] is True, t
        # a run against the detached sandbox records the protocol as a --launch run does
        assert (t["protocol"], t["transport"], t["url"]) == (protocol, "http", cli.state()["url"]), t
        r, out, _ = scenario(cli, "batch", "--contract", "batch=serial", "--kinds", "slowbatch", "--n", "4", "--rounds", "1")
        assert r.returncode == 1, out[-3000:]
        assert "overlap 4>1" in r.stdout, out[-3000:]
        r, out, _ = scenario(cli, "sessions", "--sessions", "4", "--turns", "3")
        assert r.returncode == 0, out[-3000:]
        assert "PASS every session kept its own history" in r.stdout, out[-3000:]
        # an interrupt is a cancel while the turn's tools run (issue 23 item 4):
        # AGUIAdapter cancels the run with its stream; fasta2a's cancel is a
        # no-op that answers `completed` once the task ran to its end
        r, out, _ = scenario(cli, "stress", "--contract", "interrupts=true", "--interrupts", "1", "--conns", "1", "--inputs", "1",
                             "--mix", "text:1", "--no-dedup-probe")
        if protocol == "agui":
            assert r.returncode == 0, out[-3000:]
            assert "1 sent while the turn's tools ran, 1 honoured, 0 ignored" in r.stdout, out[-3000:]
        else:
            assert r.returncode == 1, out[-3000:]
            assert "1 sent while the turn's tools ran, 0 honoured, 1 ignored (cancel_ignored); the cancel request was answered `completed` ×1" in r.stdout, out[-3000:]
    finally:
        r = cli.run("stop", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@PROTOCOLS
@pytest.mark.timeout(300)
def test_the_planted_shared_history_fails_by_name(cli, protocol):
    r, out, _ = scenario(cli, "sessions", "--launch", "--target", str(TARGETS[protocol]), "--env", "KSTRESS_EXAMPLE_PLANT=shared-history",
                         "--sessions", "2", "--turns", "2")
    assert r.returncode == 1, out[-3000:]
    assert "FAIL every session kept its own history — history foreign:" in r.stdout, out[-3000:]
