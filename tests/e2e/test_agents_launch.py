"""`--launch --target FILE` of an agent served over AG-UI (issue 23): the
target file's `protocol` and `url` keys, readiness when the URL answers
through the sandbox's connector, and a run mixing it with a protocol v1
kernel in one sandbox. The agent is tests/harness/agentserver.py (no kstress
code in it; its LLM is the sandbox's mock)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
AGENT = Path(__file__).resolve().parents[1] / "harness" / "agentserver.py"


def agent_toml(tmp_path: Path, path: str = "/agui", fault: str = "none") -> Path:
    f = tmp_path / f"agent{path.replace('/', '-')}-{fault}.toml"
    f.write_text(f"""
[target]
name = "instant-agui"
bin = "{AGENT}"
argv = ["{sys.executable}", "{{bin}}", "--protocol", "agui", "--llm-url", "{{llm_url}}", "--port", "{{port}}", "--fault", "{fault}"]
listen = "tcp"
protocol = "agui"
url = "http://127.0.0.1:{{port}}{path}"
start_timeout_s = 60

[contract]
batch = "parallel"
""")
    return f


def test_batch_launches_an_agui_agent_and_passes(cli, tmp_path):
    r = cli.run("batch", "--launch", "--target", str(agent_toml(tmp_path)), "--n", "2,4", "--kinds", "batch,slowbatch", "--rounds", "1",
                "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    (t,) = json.loads((run_dir / "run.json").read_text())["meta"]["targets"]
    assert t["protocol"] == "agui" and t["transport"] == "http" and t["url"].endswith("/agui")


def test_a_planted_missing_tool_result_fails_by_name(cli, tmp_path):
    r = cli.run("batch", "--launch", "--target", str(agent_toml(tmp_path, fault="no_result")), "--n", "2", "--kinds", "batch", "--rounds", "1",
                "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 1 and "tool_result_missing" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]


def test_a_url_that_answers_404_is_a_usage_error(cli, tmp_path):
    r = cli.run("batch", "--launch", "--target", str(agent_toml(tmp_path, path="/nope")), "--n", "2", "--kinds", "batch", "--rounds", "1",
                "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 2 and "HTTP 404 Not Found" in r.stderr and "/nope" in r.stderr, r.stdout[-3000:] + r.stderr[-3000:]


def test_stress_mixes_a_protocol_v1_kernel_and_an_agui_agent(cli, tmp_path):
    rk = tmp_path / "rk.toml"
    rk.write_text('[target]\nbin = "refkernel"\n')
    r = cli.run("stress", "--launch", "--target", str(agent_toml(tmp_path)), "--target", str(rk), "--conns", "4", "--inputs", "3",
                "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "every input to instant-agui passed its verdict — 6/6 passed" in r.stdout
    assert "every input to refkernel passed its verdict — 6/6 passed" in r.stdout


def test_a_detached_agent_sandbox_serves_status_and_scenarios(cli, tmp_path):
    r = cli.run("launch", "--target", str(agent_toml(tmp_path)), timeout=180)
    assert r.returncode == 0, r.stdout + r.stderr
    assert cli.state()["url"].endswith("/agui") and cli.state()["protocol"] == "agui"
    r = cli.run("status")
    assert r.returncode == 0 and "(agui) healthy" in r.stdout, r.stdout + r.stderr
    r = cli.run("batch", "--n", "2", "--kinds", "batch,slowbatch", "--rounds", "1", "--quiet", "--out", str(cli.out), timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    r = cli.run("kcli", "send", "!batch2")
    assert r.returncode == 0 and "TOOL_CALL_RESULT" in r.stdout and "verdict: ok" in r.stdout, r.stdout + r.stderr
    r = cli.run("stop", timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
