"""mock/verdict.py: each field of the verdict line flags its own fault."""

from __future__ import annotations

import json
import time

import pytest

from mock.catalog import DEFAULT_CATALOG
from mock.markers import Plan, build_plan
from mock.verdict import ECHO_LIMIT, StreamClock, check, latest_user_index, message_text, tool_exchange, verdict_text


def _history(plan: Plan, text: str, results: list[tuple[str, str]] | None = None, calls: list[dict] | None = None) -> list[dict]:
    if calls is None:
        calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls]
    if results is None:
        results = [(c.id, _good(plan, c.index)) for c in plan.calls]
    return [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": text},
        {"role": "assistant", "content": None, "tool_calls": calls},
        *({"role": "tool", "tool_call_id": i, "content": out} for i, out in results),
    ]


def _good(plan: Plan, i: int) -> str:
    call = plan.calls[i]
    if call.role == "slow":
        return f"KST-S {plan.nonce} {i} 1000\nKST-E {plan.nonce} {i} 2000\n"
    return " ".join(call.expect) + " done"


def _verdict(plan: Plan, messages: list[dict], tool_ms: int | None = 7):
    return check(plan, messages, latest_user_index(messages), DEFAULT_CATALOG, tool_ms)


def test_correct_history_is_all_ok() -> None:
    for text in ("!batch4 #v", "!slowbatch3:10 #v", "!mixed4 #v", "!serialbatch2 #v", "!resident #v"):
        plan = build_plan(text)
        line, echoes = _verdict(plan, _history(plan, text))
        assert (line.expected, line.got, line.ids, line.args, line.order, line.errors) == (len(plan.calls), len(plan.calls), True, True, True, 0), text
        assert line.all_ok and line.plan == plan.kind and line.nonce == "v" and line.tool_ms == 7
        assert [i for i, _ in echoes] == [c.id for c in plan.calls]


def test_img_and_ocr_expect_an_error_result() -> None:
    plan = build_plan("!img #v")
    line, _ = _verdict(plan, _history(plan, "!img #v", [(plan.calls[0].id, "error: no model loaded")]))
    assert line.errors == 1 and plan.expected_errors == 1 and line.all_ok


TEXT = "!batch3 #f"
PLAN = build_plan(TEXT)


def _ids(k: int) -> str:
    return PLAN.calls[k].id


def test_missing_result() -> None:
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, [(_ids(0), _good(PLAN, 0)), (_ids(1), _good(PLAN, 1))]))
    assert line.got == 2 < line.expected and line.ids and line.args and line.order and not line.all_ok


def test_extra_result_with_a_repeated_id() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls] + [(_ids(2), _good(PLAN, 2))]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results))
    assert line.got == 4 and not line.ids and not line.order


def test_extra_result_with_an_unknown_id() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls] + [("call_made_up", "x")]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results))
    assert line.got == 4 and not line.ids and line.order and line.errors == 0


def test_swapped_results() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls]
    results[0], results[2] = results[2], results[0]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results))
    assert not line.order and line.ids and line.args and line.errors == 0 and line.got == 3


def test_completion_order_is_flagged_for_slowbatch() -> None:
    text = "!slowbatch4 #c"
    plan = build_plan(text)
    # concurrent completion order: reverse of declared order (durations decrease)
    results = [(c.id, _good(plan, c.index)) for c in reversed(plan.calls)]
    line, _ = _verdict(plan, _history(plan, text, results))
    assert not line.order


def test_spliced_arguments() -> None:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in PLAN.calls]
    calls[0]["function"]["arguments"] = PLAN.calls[0].arguments + PLAN.calls[1].arguments
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, calls=calls))
    assert not line.args and line.ids and line.order


def test_swapped_arguments() -> None:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in PLAN.calls]
    calls[0]["function"]["arguments"], calls[1]["function"]["arguments"] = PLAN.calls[1].arguments, PLAN.calls[0].arguments
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, calls=calls))
    assert not line.args


@pytest.mark.parametrize(
    "mutate",
    [
        lambda f: f.update(name="other_tool"),
        lambda f: f.update(arguments=json.loads(f["arguments"])),  # an object, not a JSON string
        lambda f: f.update(arguments="{not json"),
    ],
    ids=["wrong_name", "object_arguments", "invalid_json"],
)
def test_other_argument_faults(mutate) -> None:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in PLAN.calls]
    mutate(calls[1]["function"])
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, calls=calls))
    assert not line.args


def test_reformatted_arguments_are_still_ok() -> None:
    # same JSON value, different spacing: a kernel may re-serialise the arguments
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(json.loads(c.arguments), indent=1)}} for c in PLAN.calls]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, calls=calls))
    assert line.args and line.all_ok


def test_wrong_id() -> None:
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in PLAN.calls]
    calls[1]["id"] = "call_wrong_1"
    results = [(c["id"], _good(PLAN, k)) for k, c in enumerate(calls)]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results, calls=calls))
    assert not line.ids and line.args  # args matched by position when the id is unknown


def test_result_for_an_id_the_assistant_never_sent() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls]
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in PLAN.calls[:2]]
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results, calls=calls))
    assert not line.ids


def test_error_result() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls]
    results[1] = (_ids(1), "Error: lookup failed")
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results))
    assert line.errors == 1 and line.all_ok  # counts match; the error is its own field


def test_result_lacking_its_expected_content() -> None:
    results = [(c.id, _good(PLAN, c.index)) for c in PLAN.calls]
    results[2] = (_ids(2), "found f/1")  # another call's key
    line, _ = _verdict(PLAN, _history(PLAN, TEXT, results))
    assert line.errors == 1


@pytest.mark.parametrize(
    "output",
    [
        "KST-S s 1 1000\n",  # no end line
        "KST-E s 1 2000\n",  # no start line
        "KST-S s 0 1000\nKST-E s 0 2000\n",  # another call's lines
        "KST-S other 1 1000\nKST-E other 1 2000\n",  # another nonce
        "",
    ],
)
def test_slow_result_without_its_own_timestamps(output: str) -> None:
    text = "!slowbatch2:10 #s"
    plan = build_plan(text)
    results = [(plan.calls[0].id, _good(plan, 0)), (plan.calls[1].id, output)]
    line, _ = _verdict(plan, _history(plan, text, results))
    assert line.errors == 1 and line.got == 2


def test_no_assistant_message_in_the_history() -> None:
    messages = [{"role": "user", "content": TEXT}, *({"role": "tool", "tool_call_id": c.id, "content": _good(PLAN, c.index)} for c in PLAN.calls)]
    line, _ = _verdict(PLAN, messages)
    assert line.got == 3 and not line.ids


def test_only_the_latest_user_turn_counts() -> None:
    old = build_plan("!batch2 #old")
    messages = _history(old, "!batch2 #old") + [{"role": "assistant", "content": "done"}] + _history(PLAN, TEXT)[1:]
    line, _ = _verdict(PLAN, messages)
    assert line.all_ok and line.got == 3 and line.nonce == "f"


def test_message_text_and_tool_exchange() -> None:
    assert message_text(None) == "" and message_text("a") == "a"
    assert message_text([{"type": "text", "text": "a"}, "b", {"type": "image_url"}]) == "ab"
    assert message_text(5) == "5"
    messages = _history(PLAN, TEXT)
    calls, results = tool_exchange(messages, 1)
    assert [c["id"] for c in calls] == [c.id for c in PLAN.calls] and len(results) == 3
    assert latest_user_index([{"role": "assistant"}]) is None


def test_verdict_text_echoes_and_truncates() -> None:
    line, _ = _verdict(PLAN, _history(PLAN, TEXT))
    text = verdict_text(line, [("call_a", "out a"), ("call_b", "x" * (ECHO_LIMIT + 10))])
    lines = text.splitlines()
    assert lines[0] == line.format() and lines[1] == "--- call_a" and lines[2] == "out a" and lines[3] == "--- call_b"
    assert text.endswith("[... 10 more characters not echoed]\n")


def test_stream_clock() -> None:
    clock = StreamClock(capacity=2)
    assert clock.elapsed_ms("n") is None
    clock.mark("a")
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.02:  # let measurable time pass (bounded busy wait)
        pass
    assert clock.elapsed_ms("a") >= 20
    clock.mark("b")
    clock.mark("a")  # re-marking refreshes: "b" is now the oldest
    clock.mark("c")
    assert len(clock) == 2 and clock.elapsed_ms("b") is None and clock.elapsed_ms("a") is not None
    clock.clear()
    assert len(clock) == 0


# --- the neutral history every dialect reads into ----------------------------------

from mock.markers import item_id, wire_id  # noqa: E402
from mock.verdict import BAD_ARGS, SentCall, ToolResult, check_history, json_arguments  # noqa: E402


def _neutral(plan: Plan, dialect: str = "chat"):
    sent = [SentCall(wire_id(c.id, dialect), c.name, json.loads(c.arguments)) for c in plan.calls]
    results = [ToolResult(wire_id(c.id, dialect), _good(plan, c.index)) for c in plan.calls]
    return sent, results


def test_check_history_with_a_dialect_s_own_ids() -> None:
    sent, results = _neutral(PLAN, "anthropic")
    wire = {wire_id(c.id, "anthropic"): c for c in PLAN.calls}
    line, echoes = check_history(PLAN, sent, results, DEFAULT_CATALOG, 3, wire)
    assert line.all_ok and line.errors == 0 and echoes[0][0] == "toolu_f_0"
    # the plan's chat ids are not this dialect's: a kernel that sent them is caught
    line, _ = check_history(PLAN, *_neutral(PLAN, "chat"), DEFAULT_CATALOG, 3, wire)
    assert not line.ids


def test_a_result_the_kernel_marked_failed_is_an_error() -> None:
    sent, results = _neutral(PLAN)
    results[1] = ToolResult(results[1].call_id, results[1].content, is_error=True)
    line, _ = check_history(PLAN, sent, results, DEFAULT_CATALOG, None)
    assert line.errors == 1 and line.all_ok


def test_arguments_in_the_wrong_form_are_bad() -> None:
    sent, results = _neutral(PLAN)
    sent[2] = SentCall(sent[2].id, sent[2].name, BAD_ARGS)
    assert not check_history(PLAN, sent, results, DEFAULT_CATALOG, None)[0].args
    assert json_arguments('{"a": 1}') == {"a": 1}
    assert json_arguments({"a": 1}) is BAD_ARGS and json_arguments("{nope") is BAD_ARGS


def test_responses_item_ids_must_match_their_call_when_sent() -> None:
    sent, results = _neutral(PLAN)
    items = {c.id: item_id(c.id) for c in PLAN.calls}
    with_items = [SentCall(s.id, s.name, s.arguments, items[s.id]) for s in sent]
    assert check_history(PLAN, with_items, results, DEFAULT_CATALOG, None, None, items)[0].ids
    assert check_history(PLAN, sent, results, DEFAULT_CATALOG, None, None, items)[0].ids, "item ids are optional"
    swapped = [with_items[1].__class__(with_items[0].id, with_items[0].name, with_items[0].arguments, items[PLAN.calls[1].id]), *with_items[1:]]
    assert not check_history(PLAN, swapped, results, DEFAULT_CATALOG, None, None, items)[0].ids


def test_unhashable_ids_do_not_crash_the_check() -> None:
    sent, results = _neutral(PLAN)
    sent[0] = SentCall({"id": 1}, sent[0].name, sent[0].arguments)
    results[0] = ToolResult(["x"], "out")
    line, _ = check_history(PLAN, sent, results, DEFAULT_CATALOG, None)
    assert not line.ids and line.got == 3
