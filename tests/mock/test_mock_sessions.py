"""Session turns through the official SDKs on every dialect: the history a
request carries is checked against the session nonce of its input, and the
token goes on every verdict (text and tool), into the store and the log."""

from __future__ import annotations

import json

import pytest

from kernelsim import DIALECTS, SDKKernel, TurnRecord, run_turn
from mock.markers import build_plan, compose, parse_history, parse_text_line, parse_text_verdict, parse_verdict, session_nonce

# a session of four turns: text, a batch, a tool loop, text
MARKERS = [None, "!batch2", "!loop2:2", None]


@pytest.fixture(scope="module")
def kernels(mock_server, client, anthropic_client):
    return lambda dialect: SDKKernel(dialect, client, anthropic_client)


def _session(k: SDKKernel, run: str, last_mangle=None, session: str = "A") -> list[TurnRecord]:
    turns: list[TurnRecord] = []
    for t, marker in enumerate(MARKERS, 1):
        text = compose(marker, session_nonce(run, session, t))
        turns.append(run_turn(k, turns, text, build_plan(text), last_mangle if t == len(MARKERS) else None))
    return turns


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_correct_history_is_ok_on_every_verdict(kernels, mock_server, dialect: str) -> None:
    run = f"ok{dialect[:3]}"
    turns = _session(kernels(dialect), run)
    assert [parse_history(t.answer) for t in turns] == ["ok"] * 4
    # the text turns pass the old parser too; the tool turns' lines carry it at the end
    assert parse_text_verdict(turns[0].answer) == session_nonce(run, "A", 1)
    assert parse_verdict(turns[1].answer).history == "ok" and parse_verdict(turns[1].answer).all_ok
    loop = parse_verdict(turns[2].answer)
    assert (loop.loop, loop.steps, loop.history) == ("ok", 2, "ok")
    entries = mock_server.verdicts(*(session_nonce(run, "A", t) for t in range(1, 5)))
    assert [e["history"] for e in entries.values()] == ["ok"] * 4
    assert entries[session_nonce(run, "A", 4)]["text_verdict"] == f"KST nonce={run}_sA_t4 plan=text ok history=ok"


def _foreign(run: str):
    def mangle(turns: list[TurnRecord]) -> list[TurnRecord]:
        other = TurnRecord(compose(None, session_nonce(run, "B", 1)), [], "an answer in session B")
        return turns[:1] + [other] + turns[1:]

    return mangle


# bug -> (mangle of the earlier turns at turn 4, the token named)
BUGS = {
    "foreign": (_foreign, "foreign:{run}_sB_t1"),
    "missing": (lambda run: lambda ts: ts[1:], "missing:t1"),
    "reordered": (lambda run: lambda ts: [ts[1], ts[0], ts[2]], "order"),
    # the inputs and tool exchanges kept, the model's answers dropped (issue 22: a LangGraph kernel)
    "noanswers": (lambda run: lambda ts: [TurnRecord(t.text, t.steps, "") for t in ts], "missing:t1.answer"),
    "loopanswer": (lambda run: lambda ts: [*ts[:2], TurnRecord(ts[2].text, ts[2].steps, "")], "missing:t3.answer"),
    "batchexchange": (lambda run: lambda ts: [ts[0], TurnRecord(ts[1].text, [], ts[1].answer), ts[2]], "missing:t2.exchange"),
}


@pytest.mark.parametrize("bug", sorted(BUGS))
@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_wrong_history_is_named_and_still_answered(kernels, mock_server, dialect: str, bug: str) -> None:
    run = f"{bug[:4]}{dialect[:3]}"
    make, want = BUGS[bug]
    turns = _session(kernels(dialect), run, make(run))
    token = want.format(run=run)
    assert [parse_history(t.answer) for t in turns] == ["ok", "ok", "ok", token]
    line = parse_text_line(turns[-1].answer)
    assert line is not None and not line.ok and line.history == token
    assert parse_text_verdict(turns[-1].answer) is None, "a history problem fails the text turn"
    assert mock_server.verdicts(session_nonce(run, "A", 4))[session_nonce(run, "A", 4)]["history"] == token


def test_responses_item_references_are_named_unresolved(kernels, mock_server, client) -> None:
    """A Responses kernel that sends earlier answers as item references (or
    leans on previous_response_id): the stateless mock cannot see what they
    stand for, so the history is not ok, and says why."""
    k = kernels("responses")
    run = "iref"
    turns = _session(k, run)[:3]
    assert [parse_history(t.answer) for t in turns] == ["ok"] * 3
    items = []
    for t in turns:
        for m in k.turn_messages(t):
            is_answer = m.get("role") == "assistant" and m.get("type") == "message"
            items.append({"type": "item_reference", "id": f"msg_{run}{len(items)}"} if is_answer else m)
    text = compose(None, session_nonce(run, "A", 4))
    reply = client.responses.create(model="kst-test", input=[*items, k.user(text)])
    assert parse_history(reply.output_text) == "unresolved:item_reference"
    line = parse_text_line(reply.output_text)
    assert line is not None and not line.ok
    # the same references without a type, as the API also takes them
    bare = [{"id": i["id"]} if i.get("type") == "item_reference" else i for i in items]
    reply = client.responses.create(model="kst-test", input=[*bare, k.user(text)])
    assert parse_history(reply.output_text) == "unresolved:item_reference"
    # a kernel that keeps its history on the API side: only the new input, and the previous response's id
    text = compose(None, session_nonce(run, "B", 2))
    reply = client.responses.create(model="kst-test", previous_response_id="resp_0123", input=[k.user(text)])
    assert parse_history(reply.output_text) == "unresolved:previous_response_id"


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_tool_turn_names_its_history_on_its_verdict_line(kernels, mock_server, dialect: str) -> None:
    """A batch turn whose request lacks turn 1: the tool verdict is fine, its history is not."""
    k = kernels(dialect)
    run = f"tool{dialect[:3]}"
    first = compose(None, session_nonce(run, "A", 1))
    turns = [run_turn(k, [], first, build_plan(first))]
    text = compose("!batch3", session_nonce(run, "A", 2))
    rec = run_turn(k, turns, text, build_plan(text), lambda ts: [])
    line = parse_verdict(rec.answer)
    assert line.all_ok and line.history == "missing:t1" and not line.history_ok
    assert line.format().endswith(" history=missing:t1")


def test_a_kernel_without_sessions_is_answered_normally(mock_server, client) -> None:
    """A kernel that keeps no history: every turn after the first says so, and is answered as usual."""
    for t in (1, 2, 3):
        text = compose(None, session_nonce("nohist", "A", t))
        reply = client.chat.completions.create(model="kst-test", messages=[{"role": "user", "content": text}])
        want = "ok" if t == 1 else "missing:t1"
        assert parse_history(reply.choices[0].message.content) == want
        assert reply.choices[0].finish_reason == "stop"


def test_the_log_and_stats_carry_the_history(start_mock, tmp_path) -> None:
    log = tmp_path / "mock.jsonl"
    m = start_mock(log_path=log)
    t1, t2 = (compose(None, session_nonce("lg", "A", t)) for t in (1, 2))
    m.chat(t1, stream=False)
    m.request("POST", "/v1/chat/completions", {"model": "x", "messages": [{"role": "user", "content": t2}]})
    lines = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert [ln["history"] for ln in lines] == ["ok", "missing:t1"]
    assert lines[1]["text_verdict"] == "KST nonce=lg_sA_t2 plan=text bad history=missing:t1"
    stats = m.stats()
    assert stats["history_ok"] == 1 and stats["history_bad"] == 1
    # a non-session input has no history anywhere
    m.chat(compose(None, "plain1"), stream=False)
    assert "history" not in json.loads(log.read_text().splitlines()[-1])
    assert m.verdicts("plain1")["plain1"]["history"] is None
