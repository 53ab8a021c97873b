"""The agno example (examples/agno_agent.py: agno's own AG-UI router, no
kstress code in it) driven as a user would, `--launch --target
examples/agno.toml` (issue 23 item 6; docs/example-agno.md has the numbers):
batch passes under the declared contract and fails under a wrong one naming
the violation; sessions passes, and with the app's planted shared history
fails naming another session's turn. Small runs, and two launches: the
agent takes seconds to import."""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGET = EXAMPLES / "agno.toml"


def run(cli, *args: str):
    r = cli.run(*args, "--quiet", "--out", str(cli.out), timeout=240)
    return r, r.stdout[-3000:] + r.stderr[-3000:]


def planted(tmp_path: Path, plant: str) -> Path:
    """examples/agno.toml with the app's planted bug switched on (its bin made absolute)."""
    text = TARGET.read_text()
    text = text.replace('bin = "./agno_agent.py"', f'bin = "{EXAMPLES / "agno_agent.py"}"')
    text = text.replace("[target.env]\n", f'[target.env]\nKSTRESS_EXAMPLE_PLANT = "{plant}"\n')
    assert "KSTRESS_EXAMPLE_PLANT" in text and "./agno_agent.py" not in text, text
    f = tmp_path / f"agno-{plant}.toml"
    f.write_text(text)
    return f


@pytest.mark.timeout(400)
def test_agno_passes_batch_and_sessions_and_a_wrong_contract_fails(cli):
    # one detached sandbox for the three runs: the agent takes seconds to import
    r = cli.run("launch", "--target", str(TARGET), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    r, out = run(cli, "batch", "--kinds", "batch,slowbatch,mixed", "--n", "2,4", "--rounds", "1")
    assert r.returncode == 0, out
    # agno gathers the not-parallel-safe writer with the sleeps: batch=parallel's promise
    assert "PASS mixed batches ran concurrently (contract batch=parallel)" in r.stdout, out
    r, out = run(cli, "batch", "--kinds", "slowbatch", "--n", "2", "--rounds", "1", "--contract", "batch=serial")
    assert r.returncode == 1, out
    assert "overlap 2>1" in r.stdout and "contract batch=serial" in r.stdout, out
    r, out = run(cli, "sessions", "--sessions", "4", "--turns", "3")
    assert r.returncode == 0, out
    assert "PASS every session kept its own history" in r.stdout, out
    r = cli.run("stop", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(300)
def test_agno_planted_shared_history_fails_by_name(cli, tmp_path):
    r, out = run(cli, "sessions", "--launch", "--target", str(planted(tmp_path, "shared-history")), "--sessions", "4", "--turns", "3")
    assert r.returncode == 1, out
    assert "FAIL every session kept its own history — history foreign:" in r.stdout, out
