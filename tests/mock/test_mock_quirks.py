"""Every wire quirk is real: its raw bytes show the deviation, and the pinned
openai SDK (3.57.0) reacts to it exactly as recorded in docs/wire.md.

Two SDK paths are checked for each quirk: the stream helper
(``client.chat.completions.stream``) and ``create(stream=True)`` fed to the
SDK's accumulator (``ChatCompletionStreamState``). They share the accumulator
code, and the tests hold them to the same effect.
"""

from __future__ import annotations

import json
from typing import Any, Callable

import openai
import pytest
from openai.lib.streaming.chat import ChatCompletionStreamState

from mock.markers import CHAT_QUIRKS as QUIRKS, Plan, build_plan, compose
from mock.wire import split_arguments

N = 3  # !quirk:NAME streams a 3-call batch by default


def _plan(quirk: str, mode: str = "") -> tuple[str, Plan]:
    text = compose(f"!quirk:{quirk}", f"q-{quirk}{mode}")
    return text, build_plan(text)


def _via_helper(client: openai.OpenAI, text: str):
    with client.chat.completions.stream(model="kst-test", messages=[{"role": "user", "content": text}]) as stream:
        return stream.get_final_completion()


def _via_state(client: openai.OpenAI, text: str):
    state = ChatCompletionStreamState()
    for chunk in client.chat.completions.create(
        model="kst-test", messages=[{"role": "user", "content": text}], stream=True
    ):
        state.handle_chunk(chunk)
    return state.get_final_completion()


PATHS = {"helper": _via_helper, "state": _via_state}


def assert_calls_match(tool_calls: Any, plan: Plan) -> None:
    got = [(c.id, c.function.name, c.function.arguments) for c in tool_calls or []]
    assert got == [(c.id, c.name, c.arguments) for c in plan.calls]
    assert all(json.loads(c.function.arguments) == json.loads(p.arguments) for c, p in zip(tool_calls, plan.calls))


def _parses_correctly(final, plan: Plan) -> None:
    assert final.choices[0].finish_reason == "tool_calls"
    assert_calls_match(final.choices[0].message.tool_calls, plan)


def _index0_all(final, plan: Plan) -> None:
    (call,) = final.choices[0].message.tool_calls  # ONE call: the others were folded in
    assert call.id == "".join(c.id for c in plan.calls)
    assert call.function.name == plan.calls[0].name * N
    assert call.function.arguments == "".join(c.arguments for c in plan.calls)
    with pytest.raises(json.JSONDecodeError, match="Extra data"):
        json.loads(call.function.arguments)


def _repeat_name(final, plan: Plan) -> None:
    calls = final.choices[0].message.tool_calls
    assert [c.id for c in calls] == [c.id for c in plan.calls]
    for got, want in zip(calls, plan.calls):
        # the name arrives on the header and on every argument piece; the SDK
        # concatenates them all
        fragments = 1 + len(_pieces(want.arguments))
        assert got.function.name == want.name * fragments
        assert got.function.arguments == want.arguments


def _placeholder_args(final, plan: Plan) -> None:
    calls = final.choices[0].message.tool_calls
    assert [c.function.arguments for c in calls] == ["{}" + c.arguments for c in plan.calls]
    assert [c.function.name for c in calls] == [c.name for c in plan.calls]


def _args_object(final, plan: Plan) -> None:
    calls = final.choices[0].message.tool_calls
    # the SDK keeps the object as it came: a dict where the type says str
    assert [c.function.arguments for c in calls] == [json.loads(c.arguments) for c in plan.calls]
    with pytest.raises(TypeError, match="must be str, bytes or bytearray, not dict"):
        json.loads(calls[0].function.arguments)


def _finish_stop(final, plan: Plan) -> None:
    assert final.choices[0].finish_reason == "stop"
    assert_calls_match(final.choices[0].message.tool_calls, plan)


def _raises(exc: type[BaseException], match: str) -> Callable:
    def check(run: Callable[[], Any], plan: Plan) -> None:
        with pytest.raises(exc, match=match) as info:
            run()
        assert type(info.value) is exc, f"expected exactly {exc.__name__}, got {type(info.value).__name__}"

    check.raises = exc  # type: ignore[attr-defined]
    return check


# quirk -> its effect on openai 3.57.0: either a check of the final completion,
# or an exception the SDK raises while accumulating.
EFFECTS: dict[str, Callable] = {
    "noindex": _raises(TypeError, "list indices must be integers or slices, not NoneType"),
    "noindex_whole": _raises(TypeError, "list indices must be integers or slices, not NoneType"),
    "index1_first": _raises(IndexError, "list index out of range"),
    "index0_all": _index0_all,
    "onechunk": _parses_correctly,
    "cont_first": _parses_correctly,
    "repeat_name": _repeat_name,
    "empty_id_name": _parses_correctly,
    "nullargs": _parses_correctly,
    "placeholder_args": _placeholder_args,
    "args_object": _args_object,
    "finish_stop": _finish_stop,
    "midstream_error": _raises(openai.APIError, r"upstream provider error \(kstress quirk midstream_error\)"),
    "azure_prefilter": _parses_correctly,
    "per_chunk_id": _parses_correctly,
    "event_line": _parses_correctly,
    "nodone": _parses_correctly,
}


def test_every_quirk_has_a_recorded_effect() -> None:
    assert sorted(EFFECTS) == sorted(QUIRKS)
    assert sorted(RAW) == sorted(QUIRKS)


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("quirk", QUIRKS)
def test_quirk_effect_on_the_sdk(client: openai.OpenAI, quirk: str, path: str) -> None:
    text, plan = _plan(quirk, path)
    effect = EFFECTS[quirk]
    run = lambda: PATHS[path](client, text)  # noqa: E731
    if hasattr(effect, "raises"):
        effect(run, plan)
    elif quirk == "args_object":
        # pydantic warns each time the SDK re-serialises its snapshot with a dict
        # where the model says str; the warning is part of the effect
        with pytest.warns(UserWarning, match="Pydantic serializer warnings"):
            final = run()
        effect(final, plan)
    else:
        effect(run(), plan)


# --- the raw bytes show each deviation ------------------------------------------


def _pieces(args: str) -> list[str]:
    return split_arguments(args)


def _tool_frags(chunks: list[dict]) -> list[list[dict]]:
    """The tool_calls array of every chunk that has one."""
    return [
        c["choices"][0]["delta"]["tool_calls"]
        for c in chunks
        if c.get("choices") and "tool_calls" in c["choices"][0]["delta"]
    ]


def _single(chunks: list[dict]) -> list[dict]:
    frags = _tool_frags(chunks)
    assert all(len(f) == 1 for f in frags)
    return [f[0] for f in frags]


def raw_noindex(events, chunks, plan):
    frags = _single(chunks)
    assert frags and all("index" not in f for f in frags)
    assert sum("id" in f for f in frags) == N


def raw_noindex_whole(events, chunks, plan):
    frags = _single(chunks)
    assert [(f["id"], f["function"]["arguments"]) for f in frags] == [(c.id, c.arguments) for c in plan.calls]
    assert all("index" not in f for f in frags)


def raw_index1_first(events, chunks, plan):
    frags = _single(chunks)
    assert frags[0]["index"] == 1 and {f["index"] for f in frags} == {1, 2, 3}


def raw_index0_all(events, chunks, plan):
    frags = _single(chunks)
    assert {f["index"] for f in frags} == {0} and sum("id" in f for f in frags) == N


def raw_onechunk(events, chunks, plan):
    (frags,) = _tool_frags(chunks)
    assert [(f["index"], f["id"], f["function"]["arguments"]) for f in frags] == [
        (c.index, c.id, c.arguments) for c in plan.calls
    ]


def raw_cont_first(events, chunks, plan):
    frags = _single(chunks)
    firsts = [next(f for f in frags if f["index"] == c.index) for c in plan.calls]
    assert all("id" not in f and set(f["function"]) == {"arguments"} for f in firsts)
    assert all(any(f.get("id") == c.id for f in frags) for c in plan.calls)


def raw_repeat_name(events, chunks, plan):
    frags = _single(chunks)
    assert all(f["function"].get("name") == plan.calls[f["index"]].name for f in frags)


def raw_empty_id_name(events, chunks, plan):
    frags = _single(chunks)
    conts = [f for f in frags if f["function"].get("arguments")]
    assert conts and all(f["id"] == "" and f["function"]["name"] == "" for f in conts)


def raw_nullargs(events, chunks, plan):
    headers = [f for f in _single(chunks) if f.get("id")]
    assert len(headers) == N and all(f["function"]["arguments"] is None for f in headers)


def raw_placeholder_args(events, chunks, plan):
    headers = [f for f in _single(chunks) if f.get("id")]
    assert len(headers) == N and all(f["function"]["arguments"] == "{}" for f in headers)


def raw_args_object(events, chunks, plan):
    frags = _single(chunks)
    assert [f["function"]["arguments"] for f in frags] == [json.loads(c.arguments) for c in plan.calls]


def raw_finish_stop(events, chunks, plan):
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"][0]["finish_reason"]]
    assert finishes == ["stop"] and _tool_frags(chunks)


def raw_midstream_error(events, chunks, plan):
    assert events[-1][1] != "[DONE]"
    last = chunks[-1]
    assert last["error"]["message"].startswith("upstream provider error") and last["error"]["code"] == 502
    assert last["choices"][0]["finish_reason"] == "error"
    assert len(_tool_frags(chunks)) > N  # the calls were streamed before it


def raw_azure_prefilter(events, chunks, plan):
    first = chunks[0]
    assert first["choices"] == [] and first["object"] == "" and first["id"] == "" and first["model"] == ""
    assert first["prompt_filter_results"][0]["prompt_index"] == 0
    assert {c["object"] for c in chunks[1:]} == {"chat.completion.chunk"}


def raw_per_chunk_id(events, chunks, plan):
    ids = [c["id"] for c in chunks]
    assert len(set(ids)) == len(ids) > N


def raw_event_line(events, chunks, plan):
    assert {name for name, _ in events} == {"message"}
    assert events[-1] == ("message", "[DONE]")


def raw_nodone(events, chunks, plan):
    assert all(data != "[DONE]" for _, data in events)
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


RAW = {q: globals()[f"raw_{q}"] for q in QUIRKS if f"raw_{q}" in globals()}


@pytest.mark.parametrize("quirk", QUIRKS)
def test_quirk_raw_bytes_show_the_deviation(mock_server, quirk: str) -> None:
    text, plan = _plan(quirk, "raw")
    reply = mock_server.chat(text)
    assert reply.status == 200
    events = reply.events()
    if quirk not in ("event_line",):
        assert all(name is None for name, _ in events)
    if quirk not in ("nodone", "midstream_error"):
        assert events[-1][1] == "[DONE]"
    RAW[quirk](events, reply.chunks(), plan)


def test_quirk_count_argument(client: openai.OpenAI) -> None:
    text = compose("!quirk:onechunk:7", "q-count")
    plan = build_plan(text)
    assert len(plan.calls) == 7
    _parses_correctly(_via_helper(client, text), plan)
