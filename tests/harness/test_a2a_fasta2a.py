"""A real framework's A2A server through the A2A driver: a pydantic-ai agent
served by fasta2a 2.1.1 (examples/pydantic_ai_a2a.py, uvicorn, no kstress code
in it), its model the mock in this process. What kstress must find there
(research doc, section 2): its answers pass; its worker runs one task at a
time (the mock sees the LLM requests of four concurrent turns one after
another, where the instant A2A agent, the control, overlaps all four); and
its cancel is a no-op (it answers `completed` after the task ran to its end,
and the mock saw the LLM request finish, not aborted)."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from harness.judge.contract import OTHER, merged
from harness.judge.verdict import judge
from harness.wire.a2a import A2ADriver
from harness.wire.agents import HttpAgentClient, agent_driver
from harness.wire.client import Turn, new_nonce
from mock.markers import build_plan, compose
from mock.server import MockServer, MockSettings

from a2aserver import A2AAgent
from waiting import await_until, wait_until

pytest.importorskip("fasta2a")
pytestmark = pytest.mark.slow

AGENT = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai_a2a.py"
PARALLEL = merged(OTHER, None, ("batch=parallel",))


@pytest.fixture
async def mock():
    server = MockServer(MockSettings(tool_ms=50))
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


@pytest.fixture
def fasta2a(tmp_path, mock):
    out = tmp_path / "agent.out"
    with open(out, "wb") as o, open(tmp_path / "agent.err", "wb") as e:
        p = subprocess.Popen([sys.executable, str(AGENT), "--llm-url", mock.url + "/v1", "--data-dir", str(tmp_path)], stdout=o, stderr=e)
    try:
        def line():
            if p.poll() is not None:
                raise AssertionError(f"pydantic_ai_a2a.py exited {p.returncode}: {(tmp_path / 'agent.err').read_text()}")
            for s in out.read_text().splitlines():
                if s.startswith("agent listening on "):
                    return s.split(" on ", 1)[1].strip()
            return None
        yield wait_until(line, 30, "pydantic_ai_a2a.py's ready line")
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def ready(url: str) -> None:
    """uvicorn prints nothing when it accepts: the card answering is ready."""
    async def card() -> bool:
        try:
            async with aiohttp.ClientSession() as s, s.get(url + "/.well-known/agent-card.json") as r:
                return r.status == 200
        except aiohttp.ClientError:
            return False
    await await_until(card, 30, f"{url}'s agent card")


def max_overlap(mock: MockServer, nonces: set[str]) -> int:
    """The most LLM requests of these turns the mock had in flight at once."""
    spans = [(r["t_arrival"], r["t_last_byte"] or r["t_arrival"]) for r in mock.state.recent if r.get("nonce") in nonces]
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    most = now = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


async def test_fasta2a_answers_pass_through_the_driver(mock, fasta2a):
    await ready(fasta2a)
    async with HttpAgentClient(agent_driver("a2a", fasta2a)) as c:
        await c.prepare(10)
        ep = c.driver.endpoint
        assert (ep.version, ep.streaming, ep.rpc_url) == ("1.0", True, fasta2a)
        turns = [await c.turn(m, 30) for m in ("!batch4", "hello")]
        assert c.http.connector.dials == 1  # card, probe and both streams on one kept-alive connection
    for t in turns:
        assert t.outcome == "response", (t.outcome, t.error_code, t.error_message, t.conn_error)
        assert t.reply.count(f"KST nonce={t.nonce} ") == 1, "fasta2a's full copy is not added to the chunks"
        assert judge(t, build_plan(t.text, tool_ms=50), contract=PARALLEL, authenticate=False).failures == ()
    assert len(turns[0].deltas) > 1  # streamed in chunks


async def concurrent_hangs(url: str, n: int = 4) -> list[Turn]:
    async def one() -> Turn:
        async with HttpAgentClient(agent_driver("a2a", url)) as c:
            await c.prepare(10)
            return await c.turn("!hang:500", 60)
    return await asyncio.gather(*(one() for _ in range(n)))


async def test_fasta2a_runs_one_task_at_a_time_and_the_instant_agent_does_not(mock, fasta2a):
    await ready(fasta2a)
    turns = await concurrent_hangs(fasta2a)
    assert [t.outcome for t in turns] == ["response"] * 4, [(t.outcome, t.error_code, t.error_message) for t in turns]
    assert max_overlap(mock, {t.nonce for t in turns}) == 1, "fasta2a's worker awaits one task at a time"
    async with A2AAgent(mock.url) as control:
        turns = await concurrent_hangs(control.url)
    assert [t.outcome for t in turns] == ["response"] * 4
    assert max_overlap(mock, {t.nonce for t in turns}) == 4, "the control overlaps all four"


async def test_fasta2a_cancel_is_a_no_op_found_by_name(mock, fasta2a):
    """CancelTask answers `completed` after the task ran to its end, and the
    mock saw its LLM request finish (200), not aborted (499). The control is
    the instant agent's honoured cancel (test_a2a_driver.py): `canceled`, 499."""
    await ready(fasta2a)
    async with aiohttp.ClientSession() as http:  # a connection for the stream, one for the cancel
        d = A2ADriver(fasta2a)
        await d.prepare(http, 10)
        nonce = new_nonce("c")
        t = Turn(input_id=nonce, text=compose("!hang:1500", nonce), nonce=nonce)

        class Sink:
            ends: list = []
            def frame(self, e, n): pass
            def delta(self, s): pass
            def tool(self, *a, **k): pass
            def done(self, text): self.ends.append(("done", text))
            def error(self, code, message): self.ends.append(("error", code))

        sink = Sink()
        running = asyncio.ensure_future(d.run_turn(http, t, sink, session=None, history=None))
        try:
            await await_until(lambda: mock.state.inflight >= 1, 20, "the turn's LLM request at the mock")
            said = await asyncio.wait_for(d.cancel(http, t), 30)
            await asyncio.wait_for(running, 30)
        finally:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
    assert said == "completed", said
    assert sink.ends and sink.ends[0][0] == "done", sink.ends
    statuses = [r.get("status") for r in mock.state.recent if r.get("nonce") == nonce]
    assert statuses and 499 not in statuses and statuses[0] == 200, statuses
