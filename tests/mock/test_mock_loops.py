"""Tool loops (!loopK[:N[:MS]]) through the official SDKs on every dialect.

A client loop (tests/mock/kernelsim.py) sends each step's calls and results back
the way a kernel does; a correct one ends with `steps=K/K loop=ok`, and each
known bug, switched on by name, ends with the step and the problem named.
"""

from __future__ import annotations

import pytest

from kernelsim import DIALECTS, SDKKernel, run_loop
from mock.markers import build_plan, compose, parse_call_step, parse_timestamps, parse_verdict, wire_id


@pytest.fixture(scope="module")
def kernels(mock_server, client, anthropic_client):
    return lambda dialect, stream=True: SDKKernel(dialect, client, anthropic_client, stream)


def _nonce(*parts: str) -> str:
    return "lp" + "".join(p.replace("_", "").replace(":", "").replace("!", "") for p in parts)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("marker", ["!loop5:2", "!loop10:1:1"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_correct_loop_gets_every_step_then_the_verdict(kernels, mock_server, dialect: str, marker: str, stream: bool) -> None:
    nonce = _nonce(dialect, marker, str(stream))
    text = compose(marker, nonce)
    plan = build_plan(text)
    final, steps, requests = run_loop(kernels(dialect, stream), plan, text)
    k, n = plan.steps, plan.calls_per_step
    assert requests == k + 1, "one request per step, then the one answered with the verdict"
    # step s asked for exactly step s's calls, under ids that name the step
    for s, step in enumerate(steps, 1):
        assert [c[0] for c in step.calls] == [wire_id(c.id, dialect) for c in plan.step_calls(s)]
        assert [parse_call_step(c[0]) for c in step.calls] == [(nonce, s, i) for i in range(n)]
    assert len({c[0] for step in steps for c in step.calls}) == k * n, "call ids are distinct across steps"
    line = parse_verdict(final)
    assert line is not None and final.startswith(line.format() + "\n")
    assert (line.plan, line.expected, line.got, line.errors) == ("loop", k * n, k * n, 0)
    assert (line.steps, line.steps_total, line.loop, line.history) == (k, k, "ok", None)
    assert line.all_ok
    # every step's KST lines come back, apart (their stamps)
    stamps = parse_timestamps(final, nonce)
    assert sorted(stamps) == list(range(k * n)) and all(s and e for s, e in stamps.values())
    entry = mock_server.verdicts(nonce)[nonce]
    assert entry["verdict"]["line"] == line.format() and entry["verdict"]["loop"] == "ok"
    assert entry["loop_step"] == k and entry["past_final"] == 0 and entry["requests"] == k + 1
    assert len(entry["step_tool_ms"]) == k and all(isinstance(t, int) and t >= 0 for t in entry["step_tool_ms"])
    assert line.tool_ms == entry["step_tool_ms"][-1], "tool_ms is the last step's tool time"


# bug -> (loop token, steps done) for !loop5:2
BUGS = {
    "drop_results_s1": ("s1:results_missing", 1),  # at step 3 step 1's results are gone, its calls kept
    "drop_step_s1": ("s1:missing", 1),  # at step 3 step 1's whole exchange is gone
    "own_ids": ("s1:ids", 0),  # the kernel's own ids call_0.. at every step: not the mock's, already at step 1
    "reuse_s1_ids": ("s2:ids_reused", 1),  # step 2 sent back under step 1's ids
    "past": ("past", 5),  # asks again after the final verdict
}


@pytest.mark.parametrize("bug", sorted(BUGS))
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_broken_loop_is_answered_at_once_naming_the_step(kernels, mock_server, dialect: str, bug: str) -> None:
    nonce = _nonce(dialect, bug)
    text = compose("!loop5:2", nonce)
    plan = build_plan(text)
    final, steps, requests = run_loop(kernels(dialect), plan, text, bug)
    token, done = BUGS[bug]
    line = parse_verdict(final)
    assert line is not None, final
    assert (line.loop, line.steps, line.steps_total) == (token, done, 5)
    assert not line.all_ok
    entry = mock_server.verdicts(nonce)[nonce]
    assert entry["verdict"]["loop"] == token and entry["verdict"]["all_ok"] is False
    if bug == "past":
        # the kernel ran past the answer: the loop itself was fine, the extra request is named
        assert requests == 7 and entry["past_final"] == 1 and line.got == line.expected == 10
        assert entry["verdicts"] == 2
    else:
        # the turn ended at the broken step: no further step was asked for
        assert len(steps) == done + 1 and entry["loop_step"] == done + 1 and entry["past_final"] == 0
    if bug == "own_ids" or bug == "reuse_s1_ids":
        assert not line.ids


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_kernel_that_stops_early_leaves_no_verdict(kernels, mock_server, dialect: str) -> None:
    """The mock cannot see a kernel that gives up: the harness sees no verdict,
    and the store says which step was asked for last."""
    nonce = _nonce(dialect, "stop")
    text = compose("!loop5:2", nonce)
    final, steps, _ = run_loop(kernels(dialect), build_plan(text), text, "stop_after_2")
    assert final is None and len(steps) == 2
    entry = mock_server.verdicts(nonce)[nonce]
    assert entry["verdict"] is None and entry["verdicts"] == 0
    assert entry["loop_step"] == 3 and entry["step_tool_ms"][:2] == [t for t in entry["step_tool_ms"][:2] if t is not None]
    assert entry["step_tool_ms"][2:] == [None, None, None]


def test_loop_log_lines_name_each_step(start_mock, tmp_path) -> None:
    log = tmp_path / "mock.jsonl"
    m = start_mock(log_path=log)
    import json

    c, a = m.client(), m.anthropic_client()
    try:
        text = compose("!loop3:1:1", "lplog")
        final, _, _ = run_loop(SDKKernel("chat", c, a), build_plan(text), text)
    finally:
        c.close()
        a.close()
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [ln.get("step") for ln in lines] == [1, 2, 3, None]
    assert lines[-1]["check"]["loop"] == "ok" and lines[-1]["check"]["steps"] == 3 and lines[-1]["verdict"] == parse_verdict(final).format()
    stats = m.stats()
    assert stats["plans"]["loop:step"] == 3 and stats["plans"]["loop:verdict"] == 1 and stats["verdicts_ok"] == 1
