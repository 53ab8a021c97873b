"""The LangGraph example (examples/langgraph_agui.py: langchain's create_agent
served over AG-UI by ag-ui-langgraph, no kstress code in it), launched from
its target files as a user would (issue 23 item 6; docs/example-langgraph-agui.md):
batch passes under its declared contract and fails by name under a wrong one,
sessions pass on a server that keeps each thread's history itself, and the
app's planted shared history fails by name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TARGET = EXAMPLES / "langgraph-agui.toml"


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def planted(tmp_path: Path) -> Path:
    """The example's target file with the app's planted bug switched on."""
    text = TARGET.read_text().replace('bin = "./langgraph_agui.py"', f'bin = "{EXAMPLES / "langgraph_agui.py"}"')
    text = text.replace('[target.env]\n', '[target.env]\nKSTRESS_EXAMPLE_PLANT = "shared-history"\n')
    assert "KSTRESS_EXAMPLE_PLANT" in text and str(EXAMPLES) in text
    f = tmp_path / "langgraph-agui-planted.toml"
    f.write_text(text)
    return f


@pytest.mark.timeout(300)
def test_batch_passes_a_wrong_contract_fails_and_sessions_pass(cli):
    """One sandbox for three runs (`kstress launch --target`, the same launch
    as `--launch --target`): the app's imports alone take seconds of CPU, and
    CI's whole run has a budget."""
    r = cli.run("launch", "--target", str(TARGET), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cli.state()["protocol"] == "agui" and cli.state()["url"].endswith("/agui")
    try:
        r = cli.run("batch", "--n", "4", "--kinds", "batch,slowbatch", "--rounds", "1", "--quiet", "--out", str(cli.out), timeout=240)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        turns = [json.loads(line) for line in (run_dir(r) / "turns.jsonl").read_text().splitlines() if line.strip()]
        slow = [row for row in turns if row["batch_kind"] == "slowbatch"]
        # ToolNode's calls ran at once (batch=parallel), every one shown and answered once
        assert len(turns) == 2 and all(row["passed"] for row in turns) and [row["overlap"] for row in slow] == [4], turns

        r = cli.run("batch", "--contract", "batch=serial", "--n", "2", "--kinds", "slowbatch", "--rounds", "1",
                    "--quiet", "--out", str(cli.out), timeout=240)
        assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
        assert "overlap 2>1" in r.stdout and "contract batch=serial" in r.stdout, r.stdout[-3000:]

        r = cli.run("sessions", "--sessions", "4", "--turns", "3", "--quiet", "--out", str(cli.out), timeout=240)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "PASS every session kept its own history" in r.stdout, r.stdout[-3000:]
    finally:
        r = cli.run("stop", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.timeout(300)
def test_the_planted_shared_history_fails_by_name(cli, tmp_path):
    r = cli.run("sessions", "--launch", "--target", str(planted(tmp_path)), "--sessions", "3", "--turns", "2",
                "--quiet", "--out", str(cli.out), timeout=280)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-3000:]
    assert "FAIL every session kept its own history — history foreign:" in r.stdout, r.stdout[-3000:]
    # the framework said nothing on stderr: no deprecation (create_react_agent is one), no traceback
    err = (run_dir(r) / "logs" / "target.err").read_text()
    assert "Warning" not in err and "Traceback" not in err, err
