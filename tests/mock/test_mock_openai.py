"""Conformance with the pinned official openai SDK (pyproject pins openai==3.57.0).

For every batch marker and N in 1, 2, 4, 8, 16, 64 the SDK must yield exactly
the planned calls, through the stream helper, through create(stream=True) plus
the SDK's own accumulator (ChatCompletionStreamState: openai.lib.streaming has
no other public accumulator for raw chunks), and non-stream. The raw bytes are
checked too, for what the SDK would hide (usage null, one fragment per chunk).
Then the verdict end to end: a follow-up request carrying tool results.
"""

from __future__ import annotations

import json
import subprocess
import time

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from mock import markers
from mock.markers import build_plan, compose

BATCH_CASES = [
    (name, n)
    for name in ("batch", "mixed", "slowbatch", "serialbatch")
    for n in (1, 2, 4, 8, 16, 64)
    if not (name == "mixed" and n < 2)
]
CASE_IDS = [f"{name}{n}" for name, n in BATCH_CASES]


def _text(name: str, n: int, tag: str) -> str:
    return compose(f"!{name}{n}", f"{tag}-{name}{n}")


@pytest.mark.parametrize(("name", "n"), BATCH_CASES, ids=CASE_IDS)
def test_stream_helper_yields_the_planned_calls(client: openai.OpenAI, calls_match, name: str, n: int) -> None:
    text = _text(name, n, "helper")
    plan = build_plan(text)
    assert len(plan.calls) == (n + 1 if name == "serialbatch" else n)
    with client.chat.completions.stream(model="kst-test", messages=[{"role": "user", "content": text}]) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls_match(choice.message.tool_calls, plan)


@pytest.mark.parametrize(("name", "n"), BATCH_CASES, ids=CASE_IDS)
def test_create_stream_with_the_sdk_accumulator(client: openai.OpenAI, calls_match, name: str, n: int) -> None:
    text = _text(name, n, "create")
    plan = build_plan(text)
    state = ChatCompletionStreamState()
    chunks = list(
        client.chat.completions.create(
            model="kst-test",
            messages=[{"role": "user", "content": text}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    for chunk in chunks:
        state.handle_chunk(chunk)
    final = state.get_final_completion()
    assert final.choices[0].finish_reason == "tool_calls"
    calls_match(final.choices[0].message.tool_calls, plan)

    # include_usage: the last chunk carries usage and no choices; no other does.
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert len({(c.id, c.created, c.model) for c in chunks}) == 1


@pytest.mark.parametrize(("name", "n"), BATCH_CASES, ids=CASE_IDS)
def test_non_stream_yields_the_planned_calls(client: openai.OpenAI, calls_match, name: str, n: int) -> None:
    text = _text(name, n, "nonstream")
    plan = build_plan(text)
    completion = client.chat.completions.create(model="kst-test", messages=[{"role": "user", "content": text}])
    assert completion.object == "chat.completion"
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    calls_match(choice.message.tool_calls, plan)
    assert completion.usage is not None and completion.usage.total_tokens > 0


# --- the raw stream: what the SDK's accumulator would forgive ----------------------


@pytest.mark.parametrize(("name", "n"), [c for c in BATCH_CASES if c[1] in (1, 4, 64)], ids=lambda v: str(v))
def test_raw_stream_shape(mock_server, name: str, n: int) -> None:
    text = _text(name, n, "raw")
    plan = build_plan(text)
    reply = mock_server.chat(text, include_usage=True)
    assert reply.status == 200
    assert reply.headers["content-type"].startswith("text/event-stream")
    events = reply.events()
    assert events[-1] == (None, "[DONE]")
    assert all(name is None for name, _ in events), "a correct stream has no event: lines"
    chunks = reply.chunks()

    # id / created / model / object identical across the chunks of the response
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[0]["model"] == "kst-test"
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}

    # usage: null on every chunk but the last, which has choices [] and the usage
    *body, usage = chunks
    assert usage["choices"] == [] and set(usage["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    assert all("usage" in c and c["usage"] is None for c in body)

    assert body[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert body[-1]["choices"][0] == {"index": 0, "delta": {}, "logprobs": None, "finish_reason": "tool_calls"}
    frags = []
    for c in body[1:-1]:
        (choice,) = c["choices"]
        assert choice["finish_reason"] is None
        assert set(choice["delta"]) == {"tool_calls"}
        assert len(choice["delta"]["tool_calls"]) == 1, "one tool_calls element per chunk"
        frags.append(choice["delta"]["tool_calls"][0])

    # per call: a named header fragment, then >= 3 index-only argument pieces,
    # one cut right after a backslash (mid-escape); calls one after another
    pos = 0
    for call in plan.calls:
        header = frags[pos]
        assert header == {
            "index": call.index,
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        pos += 1
        pieces = []
        while pos < len(frags) and "id" not in frags[pos]:
            assert set(frags[pos]) == {"index", "function"} and frags[pos]["index"] == call.index
            assert set(frags[pos]["function"]) == {"arguments"}
            pieces.append(frags[pos]["function"]["arguments"])
            pos += 1
        assert "".join(pieces) == call.arguments
        assert len(pieces) >= 3, pieces
        assert any(p.endswith("\\") for p in pieces[:-1]), f"no cut right after a backslash: {pieces}"
    assert pos == len(frags)


def test_no_usage_key_without_include_usage(mock_server) -> None:
    chunks = mock_server.chat(compose("!batch2", "nousage")).chunks()
    assert all("usage" not in c for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_text_reply_through_the_sdk(client: openai.OpenAI, mock_server) -> None:
    text = compose(None, "plaintext")
    with client.chat.completions.stream(model="kst-test", messages=[{"role": "user", "content": text}]) as stream:
        final = stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "stop" and not choice.message.tool_calls
    assert markers.parse_text_verdict(choice.message.content) == "plaintext"
    chunks = mock_server.chat(text).chunks()
    contents = [c["choices"][0]["delta"]["content"] for c in chunks[1:-1]]
    assert len(contents) == 20, "--text-chunks defaults to 20 pieces"
    assert "".join(contents) == choice.message.content


# --- the verdict, end to end ---------------------------------------------------


def _first_turn(client: openai.OpenAI, text: str):
    messages = [{"role": "user", "content": text}]
    with client.chat.completions.stream(model="kst-test", messages=messages) as stream:
        calls = stream.get_final_completion().choices[0].message.tool_calls
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": c.function.arguments}}
                for c in calls
            ],
        }
    )
    return messages, calls


def _follow_up(client: openai.OpenAI, messages) -> tuple[markers.VerdictLine, str]:
    reply = client.chat.completions.create(model="kst-test", messages=messages).choices[0].message.content
    line = markers.parse_verdict(reply)
    assert line is not None, f"no verdict line in {reply[:300]!r}"
    assert reply.startswith(line.format() + "\n"), "the verdict line must be the reply's first line"
    return line, reply


def _lookup_result(call) -> str:
    return f"lookup {json.loads(call.function.arguments)['key']}: found"


def test_verdict_ok_for_a_correct_batch(client: openai.OpenAI) -> None:
    messages, calls = _first_turn(client, compose("!batch4", "vok"))
    messages += [{"role": "tool", "tool_call_id": c.id, "content": _lookup_result(c)} for c in calls]
    line, reply = _follow_up(client, messages)
    assert (line.nonce, line.plan, line.expected, line.got) == ("vok", "batch", 4, 4)
    assert line.ids and line.args and line.order and line.errors == 0 and line.all_ok
    # the results are echoed in the order received
    assert [ln for ln in reply.splitlines() if ln.startswith("--- ")] == [f"--- {c.id}" for c in calls]


def _bad_follow_up(client: openai.OpenAI, nonce: str, how: str) -> markers.VerdictLine:
    messages, calls = _first_turn(client, compose("!batch3", nonce))
    results = [{"role": "tool", "tool_call_id": c.id, "content": _lookup_result(c)} for c in calls]
    assistant = messages[-1]["tool_calls"]
    if how == "missing":
        results.pop()
    elif how == "extra":
        results.append(dict(results[-1]))
    elif how == "swapped":
        results[0], results[1] = results[1], results[0]
    elif how == "spliced":
        a0, a1 = assistant[0]["function"]["arguments"], assistant[1]["function"]["arguments"]
        assistant[0]["function"]["arguments"] = a0 + a1
        assistant[1]["function"]["arguments"] = "{}"
    elif how == "wrong_id":
        assistant[2]["id"] = results[2]["tool_call_id"] = "call_forged_2"
    elif how == "error":
        results[1]["content"] = "error: lookup failed (no such key)"
    return _follow_up(client, messages + results)[0]


@pytest.mark.parametrize(
    ("how", "want"),
    [
        ("missing", dict(got=2, ids=True, args=True, order=True, errors=0)),
        ("extra", dict(got=4, ids=False, args=True, order=False, errors=0)),
        ("swapped", dict(got=3, ids=True, args=True, order=False, errors=0)),
        ("spliced", dict(got=3, ids=True, args=False, order=True, errors=0)),
        ("wrong_id", dict(got=3, ids=False, args=True, order=True, errors=0)),
        ("error", dict(got=3, ids=True, args=True, order=True, errors=1)),
    ],
)
def test_verdict_flags_each_fault(client: openai.OpenAI, how: str, want: dict) -> None:
    line = _bad_follow_up(client, f"vbad-{how}", how)
    assert line.expected == 3
    assert {k: getattr(line, k) for k in want} == want
    assert not (line.all_ok and line.errors == 0)


def test_verdict_runs_the_real_slow_commands(client: openai.OpenAI) -> None:
    """The slow tools' commands really print their KST-S/KST-E lines under sh;
    dropping those lines from a result is counted as an error."""
    messages, calls = _first_turn(client, compose("!slowbatch2:50", "vslow"))
    outputs = []
    for c in calls:
        done = subprocess.run(
            ["/bin/sh", "-c", json.loads(c.function.arguments)["command"]], capture_output=True, text=True, timeout=10
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    stamps = markers.parse_timestamps("\n".join(outputs), "vslow")
    assert set(stamps) == {0, 1} and all(s is not None and e is not None and e > s for s, e in stamps.values())

    good = messages + [{"role": "tool", "tool_call_id": c.id, "content": o} for c, o in zip(calls, outputs)]
    line, _ = _follow_up(client, good)
    assert line.all_ok and line.errors == 0 and line.plan == "slowbatch"

    # call 1's output without its KST-E line, and call 0's carrying another nonce
    outputs[1] = "\n".join(ln for ln in outputs[1].splitlines() if not ln.startswith("KST-E"))
    outputs[0] = outputs[0].replace("vslow", "other")
    bad = messages + [{"role": "tool", "tool_call_id": c.id, "content": o} for c, o in zip(calls, outputs)]
    line, _ = _follow_up(client, bad)
    assert line.errors == 2 and line.got == 2 and line.ids and line.args and line.order


def test_tool_ms_is_measured_from_the_end_of_the_stream(client: openai.OpenAI) -> None:
    messages, calls = _first_turn(client, compose("!batch1", "vtoolms"))
    # the delay is the quantity under test, not synchronisation
    time.sleep(0.25)
    messages += [{"role": "tool", "tool_call_id": c.id, "content": _lookup_result(c)} for c in calls]
    line, _ = _follow_up(client, messages)
    assert line.tool_ms is not None and line.tool_ms >= 250


def test_tool_ms_is_na_for_an_unknown_nonce(client: openai.OpenAI) -> None:
    text = compose("!batch1", "never-streamed")
    call = build_plan(text).calls[0]
    messages = [
        {"role": "user", "content": text},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}],
        },
        {"role": "tool", "tool_call_id": call.id, "content": f"lookup {json.loads(call.arguments)['key']}"},
    ]
    line, _ = _follow_up(client, messages)
    assert line.tool_ms is None and line.all_ok
    assert "tool_ms=na" in line.format()
