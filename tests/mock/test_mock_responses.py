"""The OpenAI Responses dialect against the pinned official SDK (openai==3.57.0).

Every batch marker through ``client.responses.stream(...).get_final_response()``
and non-stream ``create``; the verdict end to end (results as
``function_call_output`` items); every fault as the SDK's exception; the raw
events; and the Responses quirks, each with its measured effect on the SDK.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import openai
import pytest

from mock.markers import ERR_KINDS, build_plan, compose, parse_text_verdict, parse_verdict, quirks_for
from mockhelpers import MARKER_IDS, SDK_MARKERS, good_result, mutate, want_verdict


def _stream(client: openai.OpenAI, items: list[dict[str, Any]] | str):
    with client.responses.stream(model="kst-test", input=items) as s:
        return s.get_final_response()


def _first_turn(client: openai.OpenAI, text: str):
    items: list[dict[str, Any]] = [{"role": "user", "content": text}]
    final = _stream(client, items)
    # what a kernel keeping its own history sends back: the output items as they came
    items += [o.model_dump(exclude_none=True) for o in final.output]
    return items, final


def _outputs(plan, final, how: str = "ok") -> list[dict[str, Any]]:
    calls = {c.id: c for c in plan.calls}
    out = []
    for k, o in enumerate(final.output):
        content = good_result(plan, calls[o.call_id])
        # both forms the API takes: a string, and a list of input_text parts
        output: Any = content if k % 2 else [{"type": "input_text", "text": content}]
        out.append({"type": "function_call_output", "call_id": o.call_id, "output": output})
    return mutate(out, how)


def _verdict_of(final) -> tuple[Any, str]:
    text = final.output_text
    line = parse_verdict(text)
    assert line is not None, f"no verdict line in {text[:300]!r}"
    assert text.startswith(line.format() + "\n"), "the verdict line must be the reply's first line"
    return line, text


def _want_items(plan) -> list[tuple]:
    return [("function_call", f"fc_{plan.nonce}_{c.index}", f"call_{plan.nonce}_{c.index}", c.name, c.arguments) for c in plan.calls]


def _got_items(output) -> list[tuple]:
    return [(o.type, o.id, o.call_id, o.name, o.arguments) for o in output]


# --- the markers through the SDK ---------------------------------------------------


@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_stream_helper_yields_the_planned_calls(client, marker: str) -> None:
    text = compose(marker, f"r-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    final = _stream(client, [{"role": "user", "content": text}])
    assert final.status == "completed" and final.model == "kst-test" and final.id.startswith("resp_")
    assert _got_items(final.output) == _want_items(plan)
    assert all(json.loads(o.arguments) == json.loads(c.arguments) for o, c in zip(final.output, plan.calls))
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_non_stream_yields_the_planned_calls(client, marker: str) -> None:
    text = compose(marker, f"rn-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    resp = client.responses.create(model="kst-test", input=text)  # input as a plain string
    assert resp.object == "response" and resp.status == "completed"
    assert _got_items(resp.output) == _want_items(plan)


@pytest.mark.parametrize("how", ["ok", "swapped", "missing"])
@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_verdict_on_function_call_outputs(client, mock_server, marker: str, how: str) -> None:
    if how == "swapped" and marker == "!batch1":
        pytest.skip("one call cannot be swapped")
    text = compose(marker, f"rv-{how}-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    items, final = _first_turn(client, text)
    outputs = _outputs(plan, final, how)
    if not outputs:  # a kernel that lost every result still ends its history with one
        outputs = [{"type": "function_call_output", "call_id": "call_none", "output": "error: lost"}]
        want = dict(want_verdict(plan, how), got=1, ids=False, errors=1)
    else:
        want = want_verdict(plan, how)
    line, reply = _verdict_of(_stream(client, items + outputs))
    assert {k: getattr(line, k) for k in want} == want
    assert line.tool_ms is not None and line.tool_ms >= 0
    assert line.all_ok == (how == "ok")
    assert [ln for ln in reply.splitlines() if ln.startswith("--- ")] == [f"--- {o['call_id']}" for o in outputs]
    entry = mock_server.verdicts(plan.nonce)[plan.nonce]
    assert entry["verdict"]["line"] == line.format()
    assert [r["dialect"] for r in entry["records"]] == ["responses", "responses"]


def test_verdict_flags_item_ids_arguments_and_interleaving(client) -> None:
    text = compose("!batch3", "r-faults")
    plan = build_plan(text)
    items, final = _first_turn(client, text)
    outputs = _outputs(plan, final)

    def verdict(history) -> Any:
        return _verdict_of(_stream(client, history))[0]

    # each call listed right before its own output is the same turn, in order
    interleaved = [items[0]] + [x for pair in zip(items[1:], outputs) for x in pair]
    assert verdict(interleaved).all_ok
    # item ids are optional, but one that belongs to another call is caught
    no_ids = [items[0]] + [{k: v for k, v in it.items() if k != "id"} for it in items[1:]] + outputs
    assert verdict(no_ids).all_ok
    swapped = json.loads(json.dumps(items))
    swapped[1]["id"], swapped[2]["id"] = swapped[2]["id"], swapped[1]["id"]
    assert not verdict(swapped + outputs).ids
    # arguments are a JSON string on this wire; an object is not
    as_object = json.loads(json.dumps(items))
    as_object[1]["arguments"] = json.loads(as_object[1]["arguments"])
    line = verdict(as_object + outputs)
    assert not line.args and line.ids


def test_tool_ms_is_measured_from_the_end_of_the_stream(client) -> None:
    text = compose("!batch1", "r-toolms")
    plan = build_plan(text)
    items, final = _first_turn(client, text)
    time.sleep(0.25)  # the delay is the quantity under test, not synchronisation
    line, _ = _verdict_of(_stream(client, items + _outputs(plan, final)))
    assert line.tool_ms is not None and line.tool_ms >= 250


def test_text_reply_through_the_sdk(client, mock_server, parse_sse) -> None:
    text = compose(None, "r-text")
    final = _stream(client, text)
    (msg,) = final.output
    assert msg.type == "message" and msg.id == "msg_r-text" and parse_text_verdict(final.output_text) == "r-text"
    deltas = [json.loads(d) for e, d in parse_sse(mock_server.responses(text).body) if e == "response.output_text.delta"]
    assert len(deltas) == 20 and "".join(d["delta"] for d in deltas) == final.output_text
    assert client.responses.create(model="kst-test", input=text).output_text == final.output_text


# --- faults ---------------------------------------------------------------------------

# kind -> (what the SDK raises for a streamed request, for a non-stream one, HTTP status)
SDK_EFFECTS = {
    "500": (openai.InternalServerError, openai.InternalServerError, 500),
    "429": (openai.RateLimitError, openai.RateLimitError, 429),
    "503": (openai.InternalServerError, openai.InternalServerError, 503),
    # response.failed: the helper yields it as an event and then finds no
    # response.completed
    "midstream": (RuntimeError, openai.InternalServerError, None),
    "disconnect": (openai.APIConnectionError, openai.APIConnectionError, None),
    "malformed": (json.JSONDecodeError, json.JSONDecodeError, None),
}


def test_every_fault_kind_is_covered() -> None:
    assert sorted(SDK_EFFECTS) == sorted(ERR_KINDS)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("kind", ERR_KINDS)
def test_fault_seen_through_the_sdk(client, mock_server, kind: str, stream: bool) -> None:
    exc_stream, exc_plain, status = SDK_EFFECTS[kind]
    want = exc_stream if stream else exc_plain
    text = compose(f"!err:{kind}", f"rf-{kind}-{stream}")
    with pytest.raises(want) as info:
        if stream:
            _stream(client, text)
        else:
            client.responses.create(model="kst-test", input=text)
    assert type(info.value) is want, f"expected exactly {want.__name__}, got {type(info.value).__name__}: {info.value}"
    err = info.value
    if status is not None:
        assert err.status_code == status and err.body["message"].startswith(f"kstress mock: injected HTTP {kind}")
    if kind == "429":
        assert err.response.headers["retry-after"] == "1"
    if kind == "midstream" and stream:
        assert "response.completed" in str(err)
    entry = mock_server.verdicts(f"rf-{kind}-{stream}")[f"rf-{kind}-{stream}"]
    assert entry["fault"] == {"kind": kind, "injected": True}


def test_midstream_is_a_failed_response_event(mock_server, parse_sse) -> None:
    events = parse_sse(mock_server.responses(compose("!err:midstream", "r-mid")).body)
    names = [e for e, _ in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-1] == "response.failed" and "response.completed" not in names
    failed = json.loads(events[-1][1])["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"


# --- the raw events ---------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["!batch1", "!batch4", "!slowbatch3:30", None])
def test_raw_stream_shape(mock_server, parse_sse, marker: str | None) -> None:
    text = compose(marker, "r-raw")
    plan = build_plan(text)
    reply = mock_server.responses(text)
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(reply.body)
    datas = [json.loads(d) for _, d in events]
    assert all(name == d["type"] for (name, _), d in zip(events, datas))
    assert [d["sequence_number"] for d in datas] == list(range(len(datas)))
    types = [d["type"] for d in datas]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    rid = {d["response"]["id"] for d in datas if "response" in d}
    assert len(rid) == 1
    completed = datas[-1]["response"]
    assert completed["status"] == "completed" and completed["model"] == "kst-test"
    assert set(completed["usage"]) >= {"input_tokens", "output_tokens", "total_tokens"}
    if not plan.calls:
        assert [o["type"] for o in completed["output"]] == ["message"]
        return
    assert [(o["id"], o["call_id"], o["arguments"], o["status"]) for o in completed["output"]] == [
        (f"fc_{plan.nonce}_{c.index}", c.id, c.arguments, "completed") for c in plan.calls
    ]
    for call in plan.calls:
        mine = [d for d in datas if d.get("output_index") == call.index]
        kinds = [d["type"] for d in mine]
        assert kinds[0] == "response.output_item.added" and kinds[-2:] == ["response.function_call_arguments.done", "response.output_item.done"]
        assert mine[0]["item"] == {"id": f"fc_{plan.nonce}_{call.index}", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": call.id, "name": call.name}
        pieces = [d["delta"] for d in mine if d["type"] == "response.function_call_arguments.delta"]
        assert all(d["item_id"] == f"fc_{plan.nonce}_{call.index}" for d in mine[1:-1]), "deltas are keyed by item_id"
        assert "".join(pieces) == call.arguments and len(pieces) >= 3 and any(p.endswith("\\") for p in pieces)
    indexes = [d["output_index"] for d in datas if "output_index" in d]
    assert indexes == sorted(indexes), "items one after another"


def test_alias_without_v1(mock_server) -> None:
    reply = mock_server.request("POST", "/responses", {"model": "m", "input": "!batch1 #r-alias"})
    assert reply.status == 200 and reply.json()["output"][0]["call_id"] == "call_r-alias_0"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "m"}, "'input' is missing or empty"),
        ({"input": [{"type": "function_call_output", "call_id": "x", "output": "r"}], "previous_response_id": "resp_1"}, "send the whole input"),
        ({"input": "!batch65 #r-bad"}, "count 65 is out of range"),
    ],
)
def test_bad_request_is_an_openai_style_400(mock_server, body: dict, words: str) -> None:
    reply = mock_server.request("POST", "/v1/responses", body)
    assert reply.status == 400
    err = reply.json()["error"]
    assert err["type"] == "invalid_request_error" and words in err["message"]


# --- quirks ------------------------------------------------------------------------------


def _parses_correctly(final, plan) -> None:
    assert final.status == "completed" and _got_items(final.output) == _want_items(plan)


def _raises(exc: type[BaseException], match: str):
    def check(run, plan) -> None:
        with pytest.raises(exc, match=match) as info:
            run()
        assert type(info.value) is exc, f"expected exactly {exc.__name__}, got {type(info.value).__name__}"

    check.raises = exc  # type: ignore[attr-defined]
    return check


# quirk -> its effect on openai 3.57.0's responses stream helper (docs/wire.md)
EFFECTS = {
    # output items are kept by output_index in a dict, not a list
    "index1_first": _parses_correctly,
    "delta_before_added": _raises(RuntimeError, "Received a content event for output index 0 before receiving its output item"),
    "dup_output_index": _raises(RuntimeError, "Duplicate response output index 0"),
    # the final response is response.completed's own output, which lists the items
    "item_never_done": _parses_correctly,
    "no_completed": _raises(RuntimeError, "Didn't receive a `response.completed` event"),
    "changed_response_id": _raises(RuntimeError, "Lifecycle response identity changed"),
}


def test_every_responses_quirk_has_a_recorded_effect() -> None:
    assert sorted(EFFECTS) == sorted(quirks_for("responses")) == sorted(RAW)


@pytest.mark.parametrize("quirk", quirks_for("responses"))
def test_quirk_effect_on_the_sdk(client, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"rq-{quirk}")
    plan = build_plan(text)
    run = lambda: _stream(client, text)  # noqa: E731
    effect = EFFECTS[quirk]
    if hasattr(effect, "raises"):
        effect(run, plan)
    else:
        effect(run(), plan)


def raw_index1_first(datas, plan):
    assert {d["output_index"] for d in datas if "output_index" in d} == {1, 2, 3}


def raw_delta_before_added(datas, plan):
    for call in plan.calls:
        mine = [d["type"] for d in datas if d.get("output_index") == call.index]
        assert mine[:2] == ["response.function_call_arguments.delta", "response.output_item.added"]


def raw_dup_output_index(datas, plan):
    added = [d for d in datas if d["type"] == "response.output_item.added"]
    assert len(added) == 3 and {d["output_index"] for d in added} == {0}


def raw_item_never_done(datas, plan):
    assert not [d for d in datas if d["type"] == "response.output_item.done"]
    assert len(datas[-1]["response"]["output"]) == 3


def raw_no_completed(datas, plan):
    assert datas[-1]["type"] == "response.output_item.done"


def raw_changed_response_id(datas, plan):
    ids = [d["response"]["id"] for d in datas if "response" in d]
    assert ids[0] == ids[1] != ids[-1]


RAW = {q: globals()[f"raw_{q}"] for q in quirks_for("responses")}


@pytest.mark.parametrize("quirk", quirks_for("responses"))
def test_quirk_raw_events_show_the_deviation(mock_server, parse_sse, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"rqr-{quirk}")
    plan = build_plan(text)
    reply = mock_server.responses(text)
    assert reply.status == 200 and "x-kstress-quirk-skipped" not in reply.headers
    RAW[quirk]([json.loads(d) for _, d in parse_sse(reply.body)], plan)


@pytest.mark.parametrize("quirk", ["noindex", "delta_before_start"])
def test_a_quirk_of_another_dialect_streams_the_batch_unchanged(client, mock_server, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"rqo-{quirk}")
    plan = build_plan(text)
    _parses_correctly(_stream(client, text), plan)
    assert re.fullmatch(rf"{quirk} applies to (chat|anthropic)", mock_server.responses(text).headers["x-kstress-quirk-skipped"])
