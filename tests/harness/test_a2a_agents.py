"""The A2A driver end to end: through the agent client (HttpAgentClient, one
kept-alive connection, the judge on the mock's verdict) in this process, and
through `kstress batch/stress/sessions --url URL --protocol a2a` as a user
types it, against the instant A2A agent (tests/harness/a2aserver.py) whose
LLM is the real mock. Each failure is seen on the agent that misbehaves on
purpose and not on the same agent behaving."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.judge.contract import OTHER, merged
from harness.judge.verdict import judge
from harness.wire.agents import HttpAgentClient, agent_driver
from harness.wire.client import Turn
from mock.markers import build_plan
from mock.server import MockServer, MockSettings

from a2aserver import A2AAgent, Behaviour
from waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SERVER = Path(__file__).with_name("a2aserver.py")
PARALLEL = merged(OTHER, None, ("batch=parallel",))


@pytest.fixture
async def mock():
    server = MockServer(MockSettings(tool_ms=50))
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


def failures(turn: Turn) -> list[str]:
    return [f.split(" ")[0] for f in judge(turn, build_plan(turn.text, tool_ms=50), contract=PARALLEL, authenticate=False).failures]


@pytest.mark.parametrize("b", [
    pytest.param(Behaviour(version="1.0"), id="1.0-stream"),
    pytest.param(Behaviour(version="0.3", streaming=False), id="0.3-blocking"),
    pytest.param(Behaviour(version="0.3", streaming=False, submit=True), id="0.3-poll"),
])
async def test_a_good_a2a_agent_passes_on_one_kept_alive_connection(mock, b):
    async with A2AAgent(mock.url, b) as agent:
        async with HttpAgentClient(agent_driver("a2a", agent.url)) as c:
            await c.prepare(5)
            turns = [await c.turn(m, 20) for m in ("!batch4", "hello", "!batch2")]
            assert [t.outcome for t in turns] == ["response"] * 3, [(t.outcome, t.error_code, t.error_message, t.conn_error) for t in turns]
            assert [failures(t) for t in turns] == [[], [], []]
            assert c.http.connector.dials == 1  # card, probe, sends and polls on one keep-alive connection
            t = turns[0]
            assert t.t_sent < t.t_first <= t.t_done and t.frames and t.reply.count(f"KST nonce={t.nonce} ") == 1


@pytest.mark.parametrize("b, name", [
    (Behaviour(end="failed"), "task_failed"),
    (Behaviour(end="input-required", streaming=False, submit=True), "input_required"),
    (Behaviour(fault="cut"), "stream_cut"),
    (Behaviour(fault="jsonrpc", streaming=False), "jsonrpc_-32603"),
    (Behaviour(fault="http500"), "http_500"),
])
async def test_a_misbehaving_a2a_agent_fails_by_name(mock, b, name):
    async with A2AAgent(mock.url, b) as agent:
        async with HttpAgentClient(agent_driver("a2a", agent.url)) as c:
            await c.prepare(5)
            t = await c.turn("!batch2", 20)
    assert (t.outcome, t.error_code) == ("error", name), (t.outcome, t.error_code, t.error_message, t.conn_error)
    assert f"error_frame:{name}" in failures(t)


async def test_the_poll_of_a_task_that_never_ends_stops_at_the_turn_deadline(mock):
    """A submitted task is polled until the client's deadline cancels the turn:
    the turn is a timeout, and the connection serves the next turn."""
    async with A2AAgent(mock.url, Behaviour(version="0.3", streaming=False, submit=True)) as agent:
        async with HttpAgentClient(agent_driver("a2a", agent.url)) as c:
            await c.prepare(5)
            t = await c.turn("!hang", 1.0)
            assert t.outcome == "timeout", (t.outcome, t.error_code, t.error_message)
            polls = agent.methods.count("tasks/get")
            assert polls >= 2, agent.methods  # the probe, then at least one poll
            # the next turn on the same connection is served: nothing of the old poll is left on it
            t2 = await c.turn("hello", 20)
            assert t2.outcome == "response", (t2.outcome, t2.error_code, t2.error_message)


async def test_an_event_over_the_frame_limit_is_a_protocol_error(mock):
    async with A2AAgent(mock.url, Behaviour(fault="huge")) as agent:
        async with HttpAgentClient(agent_driver("a2a", agent.url)) as c:
            await c.prepare(5)
            t = await c.turn("hello", 20)
    assert (t.outcome, t.conn_kind) == ("conn_error", "protocol"), (t.outcome, t.conn_kind, t.conn_error, t.error_code)
    assert "frame limit" in t.conn_error


# --- as a user types it -------------------------------------------------------------------------

def _line(path: Path, prefix: str, proc: subprocess.Popen) -> str:
    def seen():
        if proc.poll() is not None:
            raise AssertionError(f"{path.name}: exited {proc.returncode}: {path.with_suffix('.err').read_text() if path.with_suffix('.err').exists() else ''}")
        for line in path.read_text().splitlines() if path.exists() else ():
            if line.startswith(prefix):
                return line[len(prefix):].strip()
        return None

    return wait_until(seen, 30, f"{prefix!r} in {path}")


@pytest.fixture
def procs(tmp_path):
    started: list[subprocess.Popen] = []

    def start(name: str, argv: list[str]) -> str:
        with open(tmp_path / f"{name}.out", "wb") as out, open(tmp_path / f"{name}.err", "wb") as err:
            p = subprocess.Popen(argv, stdout=out, stderr=err, cwd=REPO)
        started.append(p)
        prefix = "mock listening on " if name == "mock" else "agent listening on "
        return _line(tmp_path / f"{name}.out", prefix, p)

    try:
        yield start
    finally:
        for p in reversed(started):
            p.terminate()
        for p in started:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()


def kstress(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "KSTRESS_HOME": str(tmp_path / "home")}
    env.pop("KSTRESS_VERDICT_KEY", None)
    return subprocess.run([sys.executable, "-m", "harness", *args, "--out", str(tmp_path / "runs"), "--quiet", "--tool-ms", "50"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)


def a2a_agent(start, mock: str, *args: str) -> str:
    return start("agent-" + "-".join(a.strip("-") for a in args), [sys.executable, str(SERVER), "--llm-url", mock, *args])


BATCH = ("batch", "--n", "2,4", "--kinds", "batch", "--rounds", "1", "--contract", "batch=parallel")


@pytest.mark.slow
@pytest.mark.parametrize("args", [("--version", "1.0"), ("--version", "0.3", "--mode", "submit")], ids=["1.0-stream", "0.3-poll"])
def test_kstress_batch_and_sessions_pass_on_an_a2a_agent(tmp_path, procs, args):
    mock = procs("mock", [sys.executable, "-m", "mock", "--port", "0", "--tool-ms", "50"])
    url = a2a_agent(procs, mock, *args)
    r = kstress(tmp_path, *BATCH, "--url", url, "--protocol", "a2a", "--mock", mock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "turns passed" in r.stdout
    r = kstress(tmp_path, "sessions", "--sessions", "3", "--turns", "3", "--url", url, "--protocol", "a2a", "--mock", mock, "--contract", "batch=parallel", "--contract", "sessions=true")
    assert r.returncode == 0, r.stdout + r.stderr


@pytest.mark.slow
def test_kstress_names_a_failed_task_and_refuses_a_bad_card(tmp_path, procs):
    mock = procs("mock", [sys.executable, "-m", "mock", "--port", "0", "--tool-ms", "50"])
    failing = a2a_agent(procs, mock, "--end", "failed")
    r = kstress(tmp_path, "stress", "--conns", "2", "--inputs", "2", "--url", failing, "--protocol", "a2a", "--mock", mock, "--contract", "batch=parallel")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "error_frame:task_failed" in r.stdout
    for card, said in (("404", "answered 404"), ("html", "answered HTML"), ("no-rpc", "names no RPC URL"), ("remote-rpc", "not a loopback address")):
        url = a2a_agent(procs, mock, "--card", card)
        r = kstress(tmp_path, *BATCH, "--url", url, "--protocol", "a2a", "--mock", mock)
        assert r.returncode == 2 and said in r.stderr, (card, r.returncode, r.stdout, r.stderr)


@pytest.mark.slow
def test_kstress_sessions_fails_an_a2a_agent_that_shares_one_history(tmp_path, procs):
    """The control of the sessions pass above: isolation is judged from the
    mock, and an agent that keeps one history for every contextId fails it."""
    mock = procs("mock", [sys.executable, "-m", "mock", "--port", "0", "--tool-ms", "50"])
    url = a2a_agent(procs, mock, "--fault", "shared-history")
    r = kstress(tmp_path, "sessions", "--sessions", "3", "--turns", "3", "--url", url, "--protocol", "a2a", "--mock", mock, "--contract", "batch=parallel", "--contract", "sessions=true")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "FAIL every session kept its own history — history foreign:" in r.stdout, r.stdout
