"""The pure side of tool loops and sessions: the !loop marker and its plan,
the ids that carry the step, the extended verdict and text lines and their
parsers, the session nonce, and the two checks (verdict.check_loop,
verdict.check_session) on hand-made histories, one problem at a time."""

from __future__ import annotations

import json

import pytest

from mock.catalog import DEFAULT_CATALOG
from mock.errors import MarkerError
from mock.markers import (
    HISTORY_PROBLEMS,
    LOOP_PROBLEMS,
    VerdictLine,
    build_plan,
    compose,
    loop_token,
    parse_call_id,
    parse_call_step,
    parse_history,
    parse_history_token,
    parse_loop_token,
    parse_session_nonce,
    parse_text_line,
    parse_text_verdict,
    parse_timestamps,
    parse_verdict,
    session_nonce,
    text_verdict,
)
from mock.verdict import Said, check_loop, check_session, chat_exchanges
from mockhelpers import good_result

# --- the marker and its plan -----------------------------------------------------


def test_loop_plan_is_k_steps_of_n_timed_calls() -> None:
    plan = build_plan(compose("!loop3:2:40", "n_1"))
    assert (plan.kind, plan.steps, plan.calls_per_step, len(plan.calls)) == ("loop", 3, 2, 6)
    assert [c.id for c in plan.step_calls(2)] == ["call_n_1_s2c0", "call_n_1_s2c1"]
    assert [(c.step, c.index, c.stamp) for c in plan.calls] == [(1, 0, 0), (1, 1, 1), (2, 0, 2), (2, 1, 3), (3, 0, 4), (3, 1, 5)]
    assert all(c.role == "slow" and c.name == "cmd_run" and c.sleep_ms == 40 for c in plan.calls)
    # a step's calls carry its stamps in their commands: the KST lines of every step stay apart
    assert "KST-S n_1 3 " in json.loads(plan.step_calls(2)[1].arguments)["command"]
    assert plan.timed_calls == plan.calls and plan.step_calls(0) == plan.step_calls(4) == ()
    assert (plan.serial_ms, plan.concurrent_ms, plan.ideal_speedup) == (240, 120, 2.0)
    assert not plan.serial_required and build_plan("!loop3 #n").serial_required, "one call a step is serial"
    # the defaults: one call of 20 ms a step
    p = build_plan("!loop4 #n")
    assert (p.steps, p.calls_per_step, [c.sleep_ms for c in p.calls]) == (4, 1, [20] * 4)


def test_batch_plans_keep_their_old_shape() -> None:
    plan = build_plan("!slowbatch3:100 #n")
    assert (plan.steps, plan.calls_per_step) == (1, 3)
    assert plan.step_calls(1) == plan.calls and plan.step_calls(2) == ()
    assert [(c.step, c.seq, c.stamp) for c in plan.calls] == [(1, None, 0), (1, None, 1), (1, None, 2)]
    assert build_plan("#n").steps == 0


@pytest.mark.parametrize(
    "token, words",
    [
        ("!loop", "needs a count: !loopK with K from 1 to 64"),
        ("!loop0", "count 0 is out of range; K must be from 1 to 64"),
        ("!loop65", "count 65 is out of range; K must be from 1 to 64"),
        ("!loop3:0", "calls per step '0' must be a whole number from 1 to 64; write !loopK[:N[:MS]]"),
        ("!loop3:65", "calls per step '65'"),
        ("!loop3:x", "calls per step 'x'"),
        ("!loop3:2:0", "duration '0' must be whole milliseconds from 1 to 600000"),
        ("!loop3:2:600001", "duration '600001'"),
        ("!loop3:2:5:1", "takes at most 2 ':' argument(s)"),
    ],
)
def test_bad_loop_markers_name_the_value_and_the_fix(token: str, words: str) -> None:
    with pytest.raises(MarkerError) as info:
        build_plan(f"{token} #n")
    assert words in str(info.value)


def test_ids_carry_nonce_step_and_index_in_every_form() -> None:
    for wire in ("call_a_b-c_s12c3", "toolu_a_b-c_s12c3", "fc_a_b-c_s12c3"):
        assert parse_call_step(wire) == ("a_b-c", 12, 3)
        assert parse_call_id(wire) == ("a_b-c", 3)
    # a batch's ids as before, even with a nonce that looks like a step
    assert parse_call_step("call_x_s3_0") == ("x_s3", 0, 0) and parse_call_id("call_x_s3_0") == ("x_s3", 0)
    assert parse_call_step("call_0") is None and parse_call_step(5) is None


# --- lines and parsers -----------------------------------------------------------------


def test_old_lines_are_byte_identical_and_parse_as_before() -> None:
    old = "KST nonce=r1-7 plan=batch expected=4 got=4 ids=ok args=ok order=ok errors=0 tool_ms=3"
    line = parse_verdict(old)
    assert line == VerdictLine("r1-7", "batch", 4, 4, True, True, True, 0, 3)
    assert line.format() == old and (line.steps, line.loop, line.history) == (None, None, None)
    assert text_verdict("n") == "KST nonce=n plan=text ok" and parse_text_verdict("x\nKST nonce=n plan=text ok\n") == "n"


def test_loop_and_history_fields_round_trip() -> None:
    line = VerdictLine("n", "loop", 10, 4, True, True, True, 0, 21, steps=1, steps_total=5, loop="s2:results_missing", history="missing:t1")
    text = line.format()
    assert text == (
        "KST nonce=n plan=loop expected=10 got=4 ids=ok args=ok order=ok errors=0 tool_ms=21 "
        "steps=1/5 loop=s2:results_missing history=missing:t1"
    )
    assert parse_verdict("head\n" + text + "\n--- call_n_s1c0\n") == line
    assert not line.all_ok and not line.history_ok and parse_history(text) == "missing:t1"
    ok = VerdictLine("n", "loop", 2, 2, True, True, True, 0, 5, steps=2, steps_total=2, loop="ok", history="ok")
    assert ok.all_ok and ok.history_ok
    # history is apart from all_ok: a kernel without sessions may show missing:t1 by contract
    assert VerdictLine("n", "batch", 1, 1, True, True, True, 0, 5, history="missing:t1").all_ok


def test_text_lines_of_session_turns() -> None:
    assert text_verdict("r_sA_t2", "ok") == "KST nonce=r_sA_t2 plan=text ok history=ok"
    bad = text_verdict("r_sA_t2", "foreign:r_sB_t1")
    assert bad == "KST nonce=r_sA_t2 plan=text bad history=foreign:r_sB_t1"
    assert parse_text_verdict(text_verdict("r_sA_t2", "ok")) == "r_sA_t2"
    assert parse_text_verdict(bad) is None, "a history problem fails the text turn"
    t = parse_text_line("answer\n" + bad + "\n")
    assert (t.nonce, t.ok, t.history) == ("r_sA_t2", False, "foreign:r_sB_t1") and t.format() == bad
    assert parse_text_line("KST nonce=n plan=text ok").history is None
    assert parse_history(bad) == "foreign:r_sB_t1" and parse_history("KST nonce=n plan=text ok") is None


def test_tokens_parse() -> None:
    assert loop_token(None, None) == "ok" and loop_token(3, "ids_reused") == "s3:ids_reused" and loop_token(None, "past") == "past"
    with pytest.raises(ValueError):
        loop_token(1, "sideways")
    for p in LOOP_PROBLEMS:
        assert parse_loop_token(f"s7:{p}") == (7, p)
    assert parse_loop_token("ok") == (None, "ok") and parse_loop_token("past") == (None, "past")
    assert parse_loop_token("s0:ids") is None and parse_loop_token("s1:sideways") is None
    assert parse_history_token("ok") == ("ok", None) and parse_history_token("order") == ("order", None)
    assert parse_history_token("foreign:r_sB_t1") == ("foreign", "r_sB_t1")
    for p in ("extra", "missing", "exchange", "altered"):
        assert parse_history_token(f"{p}:t12") == (p, 12)
    assert parse_history_token("missing:t2.answer") == ("missing", (2, "answer"))
    assert parse_history_token("missing:t3.exchange") == ("missing", (3, "exchange"))
    assert parse_history_token("unresolved:item_reference") == ("unresolved", "item_reference")
    assert parse_history_token("unresolved:previous_response_id") == ("unresolved", "previous_response_id")
    assert set(HISTORY_PROBLEMS) == {"foreign", "extra", "unresolved", "missing", "order", "exchange", "altered"}
    for bad in ("missing:1", "missing:t2.reply", "extra:t2.answer", "unresolved:anything", "missing:t0.answer"):
        assert parse_history_token(bad) is None, bad


def test_session_nonce_compose_and_parse() -> None:
    n = session_nonce("run7", "A3", 12)
    assert n == "run7_sA3_t12" and parse_session_nonce(n) == ("run7", "A3", 12)
    assert compose(None, n).endswith("#run7_sA3_t12")
    for bad in [("r_1", "A", 1), ("r", "A-b", 1), ("", "A", 1), ("r", "A", 0), ("r", "A", True), ("r", "A", 10**9)]:
        with pytest.raises(ValueError):
            session_nonce(*bad)
    for nonce in ("r_sA_t0", "r_sA_t01", "r_s_t1", "rsAt1", "r_sA_t1x", "a_b_sA_t1", "k12x34ab"):
        assert parse_session_nonce(nonce) is None


# --- check_loop on hand-made chat histories ----------------------------------------------

PLAN = build_plan(compose("!loop3:2", "L"))


def _step(s: int, ids=None, results="all", args_of=None) -> list[dict]:
    calls = PLAN.step_calls(s)
    ids = ids or [c.id for c in calls]
    msgs = [{"role": "assistant", "content": None, "tool_calls": [
        {"id": i, "type": "function", "function": {"name": c.name, "arguments": (args_of or c).arguments}} for i, c in zip(ids, calls)
    ]}]  # fmt: skip
    order = list(range(len(calls))) if results == "all" else results
    msgs += [{"role": "tool", "tool_call_id": ids[j], "content": good_result(PLAN, calls[j])} for j in order]
    return msgs


def _check(*steps: list[dict], answered: bool = False):
    messages = [{"role": "user", "content": "x !loop3:2 #L"}] + [m for s in steps for m in s]
    if answered:
        messages.append({"role": "assistant", "content": "the verdict"})
    exchanges, ans = chat_exchanges(messages, 0)
    return check_loop(PLAN, exchanges, ans, DEFAULT_CATALOG)


def test_check_loop_asks_for_the_next_step_then_answers() -> None:
    first = _check()
    assert (first.step, first.next_step, first.problem) == (0, 1, None)
    c = _check(_step(1))
    assert (c.step, c.next_step, c.problem, c.done) == (1, 2, None, 1)
    c = _check(_step(1), _step(2), _step(3))
    assert (c.step, c.next_step, c.token, c.done, c.got, c.errors) == (3, None, "ok", 3, 6, 0)
    assert sorted(parse_timestamps("\n".join(t for _, t in c.echoes), "L")) == list(range(6))
    line = c.line(PLAN, 12, "ok")
    assert line.format() == "KST nonce=L plan=loop expected=6 got=6 ids=ok args=ok order=ok errors=0 tool_ms=12 steps=3/3 loop=ok history=ok"


@pytest.mark.parametrize(
    "steps, token, done",
    [
        (lambda: [_step(2)], "s1:missing", 1),
        (lambda: [_step(2), _step(1)], "s1:steps_order", 1),
        (lambda: [_step(1)[1:]], "s1:calls_missing", 0),
        (lambda: [_step(1, ids=["call_0", "call_1"])], "s1:ids", 0),
        (lambda: [_step(1, ids=["call_L_s1c0", "call_L_s1c0"], results=[0])], "s1:ids", 0),
        (lambda: [_step(1), _step(2, ids=["call_L_s1c0", "call_L_s1c1"])], "s2:ids_reused", 1),
        (lambda: [_step(1), _step(2, args_of=PLAN.calls[0])], "s2:args", 1),
        (lambda: [_step(1), _step(2, results=[0])], "s2:results_missing", 1),
        (lambda: [_step(1, results=[])], "s1:results_missing", 0),
        (lambda: [_step(1, results=[0, 1, 1])], "s1:results_extra", 0),
        (lambda: [_step(1), _step(2, results=[1, 0])], "s2:results_order", 1),
        (lambda: [_step(1, results=[]), _step(2)], "s1:results_missing", 1),
    ],
)
def test_check_loop_names_the_first_wrong_step(steps, token: str, done: int) -> None:
    c = _check(*steps())
    assert (c.token, c.done, c.next_step) == (token, done, None)
    line = c.line(PLAN, 1)
    assert not line.all_ok and line.loop == token and line.steps == done


def test_check_loop_results_bad_and_past() -> None:
    step1 = _step(1)
    step1[1]["content"] = "error: sandbox said no"
    c = _check(step1)
    assert c.token == "s1:results_bad" and c.errors == 1
    past = _check(_step(1), _step(2), _step(3), answered=True)
    assert (past.token, past.done, past.answered, past.next_step) == ("past", 3, True, None)
    # a broken step is named again when the kernel asks on after the verdict
    assert _check(_step(2), answered=True).token == "s1:missing"
    assert _check(answered=True).token == "s1:missing"


# --- check_session ---------------------------------------------------------------------


def _user(run: str, k: int, session: str = "A", marker: str | None = None) -> Said:
    return Said(True, compose(marker, session_nonce(run, session, k)))


def _answer(k: int, run: str = "r") -> Said:
    return Said(False, f"text\nKST nonce={run}_sA_t{k} plan=text ok history=ok")


def test_check_session_ok_and_each_problem() -> None:
    parts = ("r", "A", 4)
    u1, u3 = _user("r", 1), _user("r", 3)
    u2 = _user("r", 2, marker="!batch1")  # a tool turn: its exchange is part of its history
    a1, a2, a3 = (_answer(k) for k in (1, 2, 3))
    tools = lambda k: Said(False, "", (f"call_r_sA_t{k}_0",))  # noqa: E731
    results = lambda k: Said(False, "", (f"call_r_sA_t{k}_0",), results=True)  # noqa: E731
    good = [u1, a1, u2, tools(2), results(2), a2, u3, a3]
    assert check_session(parts, good) == "ok"
    assert check_session(("r", "A", 1), []) == "ok"
    assert check_session(parts, [u1, a1, _user("r", 1, "B"), u2, u3]) == "foreign:r_sB_t1"
    assert check_session(parts, [u1, _user("q", 1), u2, u3]) == "foreign:q_sA_t1"
    assert check_session(parts, [Said(True, "no nonce here"), *good]).startswith("foreign:h")
    assert check_session(parts, [u1, Said(False, "", ("toolu_r_sB_t2_0",)), u2, u3]) == "foreign:r_sB_t2"
    assert check_session(parts, [*good, u1]) == "extra:t1"
    assert check_session(parts, [*good, _user("r", 4)]) == "extra:t4"
    assert check_session(parts, [u2, u3]) == "missing:t1"
    assert check_session(parts, [u1, a1, u3, a3]) == "missing:t2"
    assert check_session(parts, [u2, tools(2), results(2), a2, u1, a1, u3, a3]) == "order"
    assert check_session(parts, [u1, tools(2), a1, u2, tools(2), results(2), a2, u3, a3]) == "exchange:t1"
    assert check_session(parts, [u1, Said(False, "KST nonce=r_sA_t3 plan=text ok history=ok"), u2, u3]) == "exchange:t1"
    # priority: foreign before missing before order
    assert check_session(parts, [u2, _user("r", 1, "B")]) == "foreign:r_sB_t1"
    assert check_session(parts, [u3, u2]) == "missing:t1"
    # altered: compared with the text the mock saw first, when it knows it
    first = {u.text.rsplit("#", 1)[1]: u.text for u in (u1, u2, u3)}
    changed = Said(True, u1.text.replace("kstress", "[10:02] kstress"))
    assert check_session(parts, [changed, *good[1:]], first.get) == "altered:t1"
    assert check_session(parts, [changed, *good[1:]], lambda n: None) == "ok"


def test_check_session_names_a_missing_answer_or_exchange() -> None:
    """Every earlier turn's answer, and its tool exchange where it had one, is
    part of its history: a kernel that keeps the inputs and drops the rest is named."""
    parts = ("r", "A", 4)
    u1, u3 = _user("r", 1), _user("r", 3)
    u2 = _user("r", 2, marker="!batch2")
    a1, a2, a3 = (_answer(k) for k in (1, 2, 3))
    calls = Said(False, "", ("call_r_sA_t2_0", "call_r_sA_t2_1"))
    results = Said(False, "", ("call_r_sA_t2_0", "call_r_sA_t2_1"), results=True)
    assert check_session(parts, [u1, a1, u2, calls, results, a2, u3, a3]) == "ok"
    # the inputs and the tool exchanges, no answers: the LangGraph kernel of issue 22
    assert check_session(parts, [u1, u2, calls, results, u3]) == "missing:t1.answer"
    assert check_session(parts, [u1, a1, u2, calls, results, u3, a3]) == "missing:t2.answer"
    assert check_session(parts, [u1, a1, u2, calls, results, a2, u3]) == "missing:t3.answer"
    # an answer that is there but reworded, its verdict line gone, is no answer of that turn
    assert check_session(parts, [u1, Said(False, "the model said hello"), u2, calls, results, a2, u3, a3]) == "missing:t1.answer"
    # the exchange: all of it, calls and results, before the answer is looked at
    assert check_session(parts, [u1, a1, u2, a2, u3, a3]) == "missing:t2.exchange"
    assert check_session(parts, [u1, a1, u2, calls, a2, u3, a3]) == "missing:t2.exchange"
    half = Said(False, "", ("call_r_sA_t2_0",), results=True)
    assert check_session(parts, [u1, a1, u2, calls, half, a2, u3, a3]) == "missing:t2.exchange"
    assert check_session(parts, [u1, u2, u3]) == "missing:t1.answer"  # input-only: the lowest turn's first part
    # a missing input is named before a missing part, a misplaced nonce too
    assert check_session(parts, [u1, u3, a3]) == "missing:t2"
    assert check_session(parts, [u1, Said(False, "KST nonce=r_sA_t3 plan=text ok"), u2, u3]) == "exchange:t1"
    # what the mock cannot see into: named, before what it makes look missing
    ref = Said(False, unresolved="item_reference")
    assert check_session(parts, [u1, ref, u2, calls, results, ref, u3, ref]) == "unresolved:item_reference"
    assert check_session(parts, [Said(False, unresolved="previous_response_id"), u3]) == "unresolved:previous_response_id"
    assert check_session(parts, [u1, _user("r", 1, "B"), ref]) == "foreign:r_sB_t1"
