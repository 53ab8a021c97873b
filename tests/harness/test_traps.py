"""The historical traps of this kind of tool, each made impossible and shown
to be: a fake speedup from a serial control that ran concurrently, a pass
rate over 100%, replayed identical inputs, the auth ack taken for an answer,
a "fast" round in which no tool ran."""

from __future__ import annotations

import functools

import socket

import pytest

from harness.wire.client import KernelClient
from harness.wire.protocol import Protocol
from harness.results.rundir import read_jsonl
from harness.scenarios import AbtestSettings, Access, StressSettings, run_abtest, run_stress
from harness.judge.verdict import judge as judge_authenticated

# hand-made replies and replies of a mock without a verdict key: the line is
# read as given here; tests/harness/test_verdict_auth.py holds authentication
judge = functools.partial(judge_authenticated, authenticate=False)
from mock.markers import build_plan

pytestmark = pytest.mark.slow


async def test_serial_control_that_is_not_serial_is_refused(kernel_factory, out_dir):
    # always-parallel ignores parallel-safety: !serialbatchN runs concurrently
    async with kernel_factory("--fault", "always-parallel", tool_ms=100) as k:
        r = await run_abtest(AbtestSettings(ns=(4,), rounds=3, out=out_dir, quiet=True), k.access())
    row = r.summary["rows"][0]
    assert r.exit_code == 1
    assert not row["valid"] and row["speedup"] is None and row["overlap_serial"] == 4
    assert any("serial control ran concurrently" in x for x in row["reasons"])
    assert "speedup refused" in r.report


async def test_round_without_tools_is_never_a_sample(kernel_factory, out_dir):
    # first-tool-only: the "concurrent" arm finishes fast because 3 of 4 tools never ran
    async with kernel_factory("--fault", "first-tool-only", tool_ms=100) as k:
        r = await run_abtest(AbtestSettings(ns=(4,), rounds=3, out=out_dir, quiet=True), k.access())
    row = r.summary["rows"][0]
    assert r.exit_code == 1 and not row["valid"] and row["speedup"] is None
    assert row["valid_rounds"] == {"concurrent": 0, "serial": 0}
    assert all(k.endswith("count 1/4") or k.endswith("count 1/5") for k in row["invalid_rounds"])


async def test_pass_rate_counts_connection_failures_and_never_exceeds_100(tmp_path, out_dir):
    # a socket that listens but never answers: every attempted input is a
    # failure, none is silently dropped
    path = tmp_path / "mute.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(64)
    try:
        s = StressSettings(conns=3, inputs=4, mix="!batch2", dedup_probe=False, connect_timeout_s=0.2, out=out_dir, quiet=True)
        r = await run_stress(s, Access(socket=path, token="x", mock="http://127.0.0.1:9"))
    finally:
        srv.close()
    assert r.exit_code == 1
    assert r.summary["attempted"] == 12 and r.summary["passed"] == 0 and r.summary["pass_rate"] == 0.0
    assert r.summary["failures"] == {"conn_error:timeout": 12}


async def test_pass_rate_is_bounded_by_attempts(kernel_factory, out_dir):
    async with kernel_factory() as k:
        r = await run_stress(StressSettings(conns=4, inputs=3, mix="!batch2:1,text:1", out=out_dir, quiet=True), k.access())
    s = r.summary
    rows = [x for x in read_jsonl(r.dir / "turns.jsonl") if x["kind"] == "load"]
    assert s["attempted"] == len(rows) == 12 and 0 <= s["pass_rate"] <= 1 and s["passed"] <= s["attempted"]


class SkipsAuthAck(Protocol):
    """The historical bug: send auth, do not wait for its ack."""

    async def handshake(self, send, recv, token):
        await send({"type": "auth", "token": token})


async def test_auth_ack_is_never_a_turn(kernel_factory):
    async with kernel_factory() as k:
        async with KernelClient(k.socket, k.token) as c:
            turn = await c.turn("!batch2", 30)
        assert all(f.get("kind") != "auth" for _, f in turn.frames)
        assert judge(turn, build_plan(turn.text)).passed
        # Even a handshake that does not wait for the ack cannot mistake it for
        # the answer: the ack (a `response` frame like a final answer) arrives
        # first on the wire, but a turn only takes frames carrying its own id.
        async with KernelClient(k.socket, k.token, SkipsAuthAck()) as c:
            turn2 = await c.turn("!batch2", 30)
            stray = [f for _, f in c._stash.get("", [])]
        assert [f["type"] for f in stray] == ["response"] and stray[0]["kind"] == "auth"
        assert judge(turn2, build_plan(turn2.text)).passed and turn2.latency_s > 0


async def test_inputs_are_never_identical(kernel_factory):
    async with kernel_factory() as k:
        async with KernelClient(k.socket, k.token) as c:
            turns = [await c.turn("!batch2", 30) for _ in range(5)]
            stats = await c.stats()
    assert len({t.text for t in turns}) == 5
    assert all(not t.duplicate and judge(t, build_plan(t.text)).passed for t in turns)
    assert stats["duplicates"] == 0
