"""`kstress batch/stress --url URL --protocol NAME --mock M` against an agent
already running (issue 23): the mock and an instant agent
(tests/harness/agentserver.py) as real processes on loopback, kstress as a
subprocess, as a user types it."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import wait_until

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
AGENT = Path(__file__).with_name("agentserver.py")


def _line(path: Path, prefix: str, proc: subprocess.Popen) -> str:
    def seen():
        if proc.poll() is not None:
            raise AssertionError(f"{path.name}: exited {proc.returncode}: {path.with_suffix('.err').read_text() if path.with_suffix('.err').exists() else ''}")
        for line in path.read_text().splitlines() if path.exists() else ():
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        return None

    return wait_until(seen, 30, f"{prefix!r} in {path}")


@contextlib.contextmanager
def processes(tmp_path: Path):
    procs: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> subprocess.Popen:
        with open(tmp_path / f"{name}.out", "wb") as out, open(tmp_path / f"{name}.err", "wb") as err:
            p = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO)
        procs.append(p)
        return p

    try:
        yield start
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


@pytest.fixture
def mock_url(tmp_path):
    with processes(tmp_path) as start:
        m = start("mock", [sys.executable, "-m", "mock", "--port", "0", "--tool-ms", "50"])
        yield _line(tmp_path / "mock.out", "mock listening on ", m), start


def agent(start, tmp_path: Path, mock: str, protocol: str, fault: str = "none") -> str:
    name = f"agent-{protocol}-{fault}"
    p = start(name, [sys.executable, str(AGENT), "--protocol", protocol, "--llm-url", mock + "/v1", "--fault", fault])
    return _line(tmp_path / f"{name}.out", "agent listening on ", p)


def kstress(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KSTRESS_HOME": str(tmp_path / "home")}
    env.pop("KSTRESS_VERDICT_KEY", None)
    return subprocess.run([sys.executable, "-m", "harness", *args, "--out", str(tmp_path / "runs"), "--quiet", "--tool-ms", "50"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


BATCH = ("batch", "--n", "2,4", "--kinds", "batch,slowbatch", "--rounds", "1", "--contract", "batch=parallel")


@pytest.mark.parametrize("protocol", ["agui", "openai-chat", "openai-responses"])
def test_batch_and_stress_pass_on_a_good_agent(tmp_path, mock_url, protocol):
    mock, start = mock_url
    url = agent(start, tmp_path, mock, protocol)
    r = kstress(tmp_path, *BATCH, "--url", url, "--protocol", protocol, "--mock", mock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4/4 turns passed" in r.stdout
    r = kstress(tmp_path, "stress", "--conns", "3", "--inputs", "3", "--url", url, "--protocol", protocol, "--mock", mock, "--contract", "batch=parallel")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every input passed its verdict — 9/9 passed" in r.stdout


def test_a_missing_tool_result_fails_batch_by_name(tmp_path, mock_url):
    mock, start = mock_url
    url = agent(start, tmp_path, mock, "agui", "no_result")
    r = kstress(tmp_path, *BATCH, "--url", url, "--protocol", "agui", "--mock", mock)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "tool_result_missing" in r.stdout and "FAIL every batch turn passed its verdict" in r.stdout


def test_a_cut_stream_fails_stress_by_name(tmp_path, mock_url):
    mock, start = mock_url
    url = agent(start, tmp_path, mock, "agui", "cut")
    r = kstress(tmp_path, "stress", "--conns", "2", "--inputs", "2", "--url", url, "--protocol", "agui", "--mock", mock, "--contract", "batch=parallel")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error_frame:stream_cut" in r.stdout


def test_bad_urls_are_usage_errors(tmp_path, mock_url):
    mock, start = mock_url
    url = agent(start, tmp_path, mock, "agui")
    base = url.rsplit("/", 1)[0]
    html = agent(start, tmp_path, mock, "agui", "html")
    cases = [
        (["--url", base + "/nope", "--protocol", "agui", "--mock", mock], "HTTP 404 Not Found"),
        (["--url", html, "--protocol", "agui", "--mock", mock], "answered a web page"),
        (["--url", "http://192.0.2.1:80/agui", "--protocol", "agui", "--mock", mock], "is not a loopback address"),
        (["--url", url, "--protocol", "agents-ui", "--mock", mock], "not an agent protocol"),
        (["--url", url, "--mock", mock], "needs --protocol"),
        (["--url", url, "--protocol", "agui"], "without --mock"),
        (["--url", url, "--protocol", "agui", "--mock", mock, "--socket", "tcp:127.0.0.1:9"], "name two systems"),
        (["--socket", "tcp:127.0.0.1:9", "--protocol", "agui", "--mock", mock], "give the agent's URL with --url"),
    ]
    for args, said in cases:
        r = kstress(tmp_path, "batch", "--n", "2", "--kinds", "batch", "--rounds", "1", *args)
        assert r.returncode == 2 and said in r.stderr, (args, r.returncode, r.stdout, r.stderr)


@pytest.mark.parametrize("fault", ["none", "shared_history"])
def test_sessions_over_agui_hold_each_thread_to_its_own_history(tmp_path, mock_url, fault):
    """The client sends each session's whole history (tool exchanges too) on
    its own threadId: a stateless agent passes; one that shares a history
    across threads fails by name."""
    mock, start = mock_url
    url = agent(start, tmp_path, mock, "agui", fault)
    r = kstress(tmp_path, "sessions", "--sessions", "3", "--turns", "3", "--contract", "sessions=true", "--contract", "batch=parallel",
                "--url", url, "--protocol", "agui", "--mock", mock)
    if fault == "none":
        assert r.returncode == 0, r.stdout + r.stderr
        assert "PASS every session kept its own history" in r.stdout
    else:
        assert r.returncode == 1, r.stdout + r.stderr
        assert "FAIL every session kept its own history — history " in r.stdout


def _rows(tmp_path: Path, kind: str) -> list[dict]:
    import json

    (turns,) = (tmp_path / "runs").glob("stress-*/turns.jsonl")
    return [r for r in map(json.loads, turns.read_text().splitlines()) if r.get("kind") == kind]


@pytest.mark.parametrize("fault", ["none", "ignore_cancel"])
def test_an_interrupt_over_agui_is_a_cancel_the_mock_sees_honoured(tmp_path, mock_url, fault):
    """Over AG-UI an interrupt closes the run's stream while its tools run
    (issue 23 item 4): an agent that cancels its run never asks the LLM again;
    one that runs on to its end fails the turn as cancel_ignored."""
    mock, start = mock_url
    url = agent(start, tmp_path, mock, "agui", fault)
    r = kstress(tmp_path, "stress", "--conns", "1", "--inputs", "1", "--mix", "text:1", "--interrupts", "5", "--url", url, "--protocol", "agui",
                "--mock", mock, "--contract", "batch=parallel", "--contract", "interrupts=true")
    (row,) = _rows(tmp_path, "interrupt")
    assert row["outcome"] == "cancelled", row
    if fault == "none":
        assert r.returncode == 0 and row["passed"], (row, r.stdout + r.stderr)
    else:
        assert r.returncode == 1, r.stdout + r.stderr
        assert row["failures"][0].startswith("cancel_ignored (LLM request 2 of the turn arrived"), row
        assert "cancel_ignored" in r.stdout


@pytest.mark.parametrize("cancel", ["honour", "noop"])
def test_an_interrupt_over_a2a_is_tasks_cancel(tmp_path, mock_url, cancel):
    """Over A2A an interrupt is tasks/cancel on a connection of its own: a
    server that cancels the task passes; one whose cancel waits for the task
    to end and answers `completed` (fasta2a's) fails cancel_ignored, and the
    row keeps what the server answered."""
    mock, start = mock_url
    p = start(f"a2a-{cancel}", [sys.executable, str(AGENT.with_name("a2aserver.py")), "--llm-url", mock + "/v1", "--cancel", cancel])
    url = _line(tmp_path / f"a2a-{cancel}.out", "agent listening on ", p)
    r = kstress(tmp_path, "stress", "--conns", "1", "--inputs", "1", "--mix", "text:1", "--interrupts", "5", "--url", url, "--protocol", "a2a",
                "--mock", mock, "--contract", "batch=parallel", "--contract", "interrupts=true")
    (row,) = _rows(tmp_path, "interrupt")
    # the stream may carry the task's end before kstress closes it: the
    # outcome is what was read, the verdict the mock's
    assert row["interrupt"] and row["marker"] == "!slowbatch2:2000:0", row
    if cancel == "honour":
        assert r.returncode == 0 and row["passed"], (row, r.stdout + r.stderr)
        assert row["cancel_answer"] == "canceled", row
    else:
        assert r.returncode == 1, r.stdout + r.stderr
        assert row["failures"][0].startswith("cancel_ignored (LLM request 2 of the turn arrived"), row
        assert row["cancel_answer"] == "completed", row
        assert "Cancels (interrupts over an agent protocol" in r.stdout and "1 sent while the turn's tools ran, 0 honoured, 1 ignored" in r.stdout
        assert "the cancel request was answered `completed` ×1" in r.stdout
