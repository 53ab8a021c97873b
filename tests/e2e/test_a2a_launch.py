"""`--launch --target FILE` of an agent served over A2A (issue 23): the
target file's `protocol = "a2a"` and `url` (the agent's base URL: its card is
read through the sandbox's connector, the RPC URL taken from it), for the
instant A2A agent (tests/harness/a2aserver.py: no kstress code in it; its LLM
is the sandbox's mock). A real framework's, pydantic-ai served by fasta2a, is
launched from its example target file in
tests/e2e/test_example_pydantic_ai_agents.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
HARNESS = Path(__file__).resolve().parents[1] / "harness"


def a2a_toml(tmp_path: Path, name: str, script: str, *args: str) -> Path:
    f = tmp_path / f"{name}.toml"
    extra = "".join(f', "{a}"' for a in args)
    f.write_text(f"""
[target]
name = "{name}"
bin = "{HARNESS / script}"
argv = ["{sys.executable}", "{{bin}}", "--llm-url", "{{llm_url}}", "--port", "{{port}}"{extra}]
listen = "tcp"
protocol = "a2a"
url = "http://127.0.0.1:{{port}}"
start_timeout_s = 60

[contract]
batch = "parallel"
""")
    return f


def run_batch(cli, target: Path):
    return cli.run("batch", "--launch", "--target", str(target), "--n", "2,4", "--kinds", "batch", "--rounds", "1",
                   "--quiet", "--out", str(cli.out), timeout=300)


def test_batch_launches_the_instant_a2a_agent_and_passes(cli, tmp_path):
    """0.3 names, message/send answered `submitted` and polled: the run's
    driver is not the one the readiness probe prepared, and reads the card itself."""
    r = run_batch(cli, a2a_toml(tmp_path, "instant-a2a", "a2aserver.py", "--version", "0.3", "--mode", "submit"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    (t,) = json.loads((run_dir / "run.json").read_text())["meta"]["targets"]
    assert t["protocol"] == "a2a" and t["transport"] == "http"


def test_a_launched_agent_whose_tasks_fail_fails_by_name(cli, tmp_path):
    r = run_batch(cli, a2a_toml(tmp_path, "failing-a2a", "a2aserver.py", "--end", "failed"))
    assert r.returncode == 1 and "task_failed" in r.stdout, r.stdout[-3000:] + r.stderr[-3000:]

