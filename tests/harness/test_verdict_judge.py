"""harness.judge.verdict.judge: every way a turn can fail has a name; a turn whose
tools did not run is never a pass and never a timing sample."""

import functools
import json

from harness.wire.client import Turn
from harness.judge.verdict import judge as judge_authenticated

# hand-made replies and replies of a mock without a verdict key: the line is
# read as given here; tests/harness/test_verdict_auth.py holds authentication
judge = functools.partial(judge_authenticated, authenticate=False)
from mock import DEFAULT_CATALOG
from mock.markers import build_plan, compose
from mock.verdict import check, verdict_text


def _reply(text: str, mutate=None, outputs=None, order=None) -> str:
    """The mock's real follow-up text for a history a kernel could have sent."""
    plan = build_plan(text)
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls]
    results = []
    for c in plan.calls:
        if outputs is not None:
            content = outputs(c)
        elif c.role == "slow":
            content = f"KST-S {plan.nonce} {c.index} {1000 + c.index}\nKST-E {plan.nonce} {c.index} {5000 + c.index}\n"
        elif c.expect_error:
            content = "ERROR: no model loaded"
        else:
            content = " ".join(c.expect) + " done"
        results.append({"role": "tool", "tool_call_id": c.id, "content": content})
    if order:
        results = [results[i] for i in order]
    if mutate:
        calls, results = mutate(calls, results)
    history = [{"role": "user", "content": text}, {"role": "assistant", "content": None, "tool_calls": calls}, *results]
    line, echoes = check(plan, history, 0, DEFAULT_CATALOG, 42)
    return verdict_text(line, echoes)


def _turn(text: str, reply: str | None = None, outcome: str = "response", **kw) -> Turn:
    nonce = text.rsplit("#", 1)[1]
    t = Turn(input_id=nonce, text=text, nonce=nonce, outcome=outcome, **kw)
    t.t_sent, t.t_first, t.t_done = 1.0, 1.1, 1.5
    t.response_text = reply
    return t


def test_correct_batch_passes_with_overlap():
    text = compose("!slowbatch4", "n1")
    v = judge(_turn(text, _reply(text)), build_plan(text))
    assert v.passed, v.failures
    assert v.overlap == 4 and v.expected == v.got == 4 and v.tools_ran


def test_each_failure_is_named():
    text = compose("!batch4", "n2")
    plan = build_plan(text)
    dropped = _reply(text, mutate=lambda c, r: (c, r[:-1]))
    assert judge(_turn(text, dropped), plan).failures == ("count 3/4",)
    swapped = _reply(text, order=[1, 0, 2, 3])
    assert judge(_turn(text, swapped), plan).failures == ("order",)

    def splice(calls, results):
        a, b = calls[0]["function"], calls[1]["function"]
        a["arguments"], b["arguments"] = a["arguments"][:10] + b["arguments"][10:], b["arguments"][:10] + a["arguments"][10:]
        return calls, results

    assert "args" in judge(_turn(text, _reply(text, mutate=splice)), plan).failures
    errors = _reply(text, outputs=lambda c: "ERROR: boom")
    assert judge(_turn(text, errors), plan).failures == ("errors 4/0",)
    assert judge(_turn(text, "no verdict here"), plan).failures == ("missing_verdict",)
    other = compose("!batch4", "zz")
    assert judge(_turn(text, _reply(other)), plan).failures[0].startswith("wrong_nonce")
    assert judge(_turn(text, None, outcome="timeout"), plan).failures == ("timeout",)
    err = _turn(text, None, outcome="error", error_code="busy")
    assert judge(err, plan).failures == ("error_frame:busy",)
    dup = _turn(text, "", duplicate=True)
    assert judge(dup, plan).failure.startswith("duplicate")


def test_serial_batch_that_overlapped_fails():
    text = compose("!mixed3", "m1")
    plan = build_plan(text)

    def overlapping(c):
        if c.role == "slow":
            return f"KST-S {plan.nonce} {c.index} 1000\nKST-E {plan.nonce} {c.index} 9000\n"
        return " ".join(c.expect)

    v = judge(_turn(text, _reply(text, outputs=overlapping)), plan)
    assert not v.passed and v.failure.startswith("overlap 2>1")


def test_img_expects_a_tool_error_and_err_expects_an_error_frame():
    text = compose("!img", "i1")
    plan = build_plan(text)
    assert judge(_turn(text, _reply(text)), plan).passed
    swallowed = _reply(text, outputs=lambda c: "described: a cat")
    assert judge(_turn(text, swallowed), plan).failures == ("errors 0/1",)
    text = compose("!err:500", "e1")
    plan = build_plan(text)
    assert judge(_turn(text, None, outcome="error", error_code="llm_error"), plan).passed
    hidden = judge(_turn(text, ""), plan)
    assert hidden.failure.startswith("missing_verdict")


def test_text_turn_and_expected_duplicate():
    text = compose(None, "t1")
    plan = build_plan(text)
    assert judge(_turn(text, "hello\nKST nonce=t1 plan=text ok"), plan).passed
    assert not judge(_turn(text, "hello\nKST nonce=t1 plan=text ok"), plan, expect_duplicate=True).passed
    assert judge(_turn(text, "", duplicate=True), plan, expect_duplicate=True).passed


def test_verdict_json_round_trip():
    text = compose("!slowbatch2", "j1")
    v = judge(_turn(text, _reply(text)), build_plan(text))
    assert json.loads(json.dumps(v.to_json()))["overlap"] == 2


def test_to_json_has_every_field_of_the_verdict():
    """Every field of the verdict, in order, failures as a list (turns.jsonl)."""
    from harness.judge.verdict import TurnVerdict

    v = TurnVerdict(input_id="i", nonce="n", marker="!batch2", plan="batch", passed=False, failures=("count 1/2",), outcome="response",
                    latency_s=0.1, first_frame_s=0.05, expected=2, got=1, errors=0, tool_ms=3, overlap=None, tool_span_ms=None)
    d = v.to_json()
    assert list(d) == list(TurnVerdict._fields) and len(d) == 27
    assert d == {**v._asdict(), "failures": ["count 1/2"]} and d["marker"] == "!batch2" and d["scheduled_s"] is None
