"""The Anthropic Messages dialect against the pinned official SDK (anthropic==2.16.0).

Every batch marker through ``client.messages.stream(...).get_final_message()``
and non-stream ``create``; the verdict end to end (results as ``tool_result``
blocks); every fault as the SDK's exception; the raw frames the SDK would
forgive; and the Anthropic quirks, each with its measured effect on the SDK.
"""

from __future__ import annotations

import json
import re
import time
from typing import Any

import anthropic
import httpx2
import pytest

from mock.markers import ERR_KINDS, build_plan, compose, parse_text_verdict, parse_verdict, quirks_for
from mockhelpers import MARKER_IDS, SDK_MARKERS, good_result, mutate, want_verdict


def _stream(client: anthropic.Anthropic, messages: list[dict[str, Any]]):
    with client.messages.stream(model="kst-test", max_tokens=1024, messages=messages) as s:
        return s.get_final_message()


def _first_turn(client: anthropic.Anthropic, text: str):
    messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
    final = _stream(client, messages)
    messages.append({"role": "assistant", "content": [b.model_dump(include={"type", "id", "name", "input"}) for b in final.content]})
    return messages, final


def _tool_results(plan, final, how: str = "ok") -> list[dict[str, Any]]:
    calls = {c.index: c for c in plan.calls}
    blocks = []
    for k, b in enumerate(final.content):
        content = good_result(plan, calls[k])
        # both forms the API takes: a string, and a list of text blocks
        blocks.append({"type": "tool_result", "tool_use_id": b.id, "content": content if k % 2 else [{"type": "text", "text": content}]})
    return mutate(blocks, how)


def _verdict_of(final) -> tuple[Any, str]:
    text = "".join(b.text for b in final.content if b.type == "text")
    line = parse_verdict(text)
    assert line is not None, f"no verdict line in {text[:300]!r}"
    assert text.startswith(line.format() + "\n"), "the verdict line must be the reply's first line"
    return line, text


# --- the markers through the SDK ---------------------------------------------------


@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_stream_helper_yields_the_planned_calls(anthropic_client, marker: str) -> None:
    text = compose(marker, f"a-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    final = _stream(anthropic_client, [{"role": "user", "content": text}])
    assert final.stop_reason == "tool_use" and final.role == "assistant" and final.model == "kst-test"
    got = [(b.type, b.id, b.name, b.input) for b in final.content]
    assert got == [("tool_use", f"toolu_{plan.nonce}_{c.index}", c.name, json.loads(c.arguments)) for c in plan.calls]
    assert final.usage.output_tokens > 1 and final.usage.input_tokens > 0


@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_non_stream_yields_the_planned_calls(anthropic_client, marker: str) -> None:
    text = compose(marker, f"an-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    msg = anthropic_client.messages.create(model="kst-test", max_tokens=1024, messages=[{"role": "user", "content": text}])
    assert msg.type == "message" and msg.stop_reason == "tool_use" and msg.id.startswith("msg_")
    assert [(b.id, b.name, b.input) for b in msg.content] == [(f"toolu_{plan.nonce}_{c.index}", c.name, json.loads(c.arguments)) for c in plan.calls]


@pytest.mark.parametrize("how", ["ok", "swapped", "missing"])
@pytest.mark.parametrize("marker", SDK_MARKERS, ids=MARKER_IDS)
def test_verdict_on_tool_result_blocks(anthropic_client, mock_server, marker: str, how: str) -> None:
    if how == "swapped" and marker == "!batch1":
        pytest.skip("one call cannot be swapped")
    text = compose(marker, f"av-{how}-{marker[1:].replace(':', '-')}")
    plan = build_plan(text)
    messages, final = _first_turn(anthropic_client, text)
    messages.append({"role": "user", "content": _tool_results(plan, final, how)})
    line, reply = _verdict_of(_stream(anthropic_client, messages))
    want = want_verdict(plan, how)
    assert {k: getattr(line, k) for k in want} == want
    assert line.tool_ms is not None and line.tool_ms >= 0
    assert line.all_ok == (how == "ok")
    # the results are echoed in the order received, by their tool_use ids
    ids = [b["tool_use_id"] for b in messages[-1]["content"]]
    assert [ln for ln in reply.splitlines() if ln.startswith("--- ")] == [f"--- {i}" for i in ids]
    # and the store holds the same verdict
    entry = mock_server.verdicts(plan.nonce)[plan.nonce]
    assert entry["verdict"]["line"] == line.format() and entry["verdict"]["all_ok"] == line.all_ok
    assert [r["dialect"] for r in entry["records"]] == ["anthropic", "anthropic"]


def test_verdict_flags_forged_ids_wrong_input_and_is_error(anthropic_client) -> None:
    text = compose("!batch3", "a-faults")
    plan = build_plan(text)
    messages, final = _first_turn(anthropic_client, text)
    results = _tool_results(plan, final)
    base = json.loads(json.dumps(messages))

    def verdict(mutate_history) -> Any:
        history = json.loads(json.dumps(base))
        res = json.loads(json.dumps(results))
        mutate_history(history[-1]["content"], res)
        return _verdict_of(_stream(anthropic_client, history + [{"role": "user", "content": res}]))[0]

    def chat_ids(blocks, res):  # the plan's chat form is not this dialect's id
        for b, r in zip(blocks, res):
            b["id"] = r["tool_use_id"] = b["id"].replace("toolu_", "call_")

    def input_as_string(blocks, res):  # Anthropic input is an object, not a JSON string
        blocks[0]["input"] = json.dumps(blocks[0]["input"])

    def spliced(blocks, res):
        blocks[0]["input"], blocks[1]["input"] = blocks[1]["input"], blocks[0]["input"]

    def is_error(blocks, res):
        res[2]["is_error"] = True

    assert not verdict(chat_ids).ids
    line = verdict(input_as_string)
    assert not line.args and line.ids
    assert not verdict(spliced).args
    line = verdict(is_error)
    assert line.errors == 1 and line.all_ok


def test_tool_ms_is_measured_from_the_end_of_the_stream(anthropic_client) -> None:
    text = compose("!batch1", "a-toolms")
    plan = build_plan(text)
    messages, final = _first_turn(anthropic_client, text)
    time.sleep(0.25)  # the delay is the quantity under test, not synchronisation
    messages.append({"role": "user", "content": _tool_results(plan, final)})
    line, _ = _verdict_of(_stream(anthropic_client, messages))
    assert line.tool_ms is not None and line.tool_ms >= 250


def test_text_reply_through_the_sdk(anthropic_client, mock_server, parse_sse) -> None:
    text = compose(None, "a-text")
    final = _stream(anthropic_client, [{"role": "user", "content": text}])
    assert final.stop_reason == "end_turn" and [b.type for b in final.content] == ["text"]
    assert parse_text_verdict(final.content[0].text) == "a-text"
    deltas = [json.loads(d) for e, d in parse_sse(mock_server.messages(text).body) if e == "content_block_delta"]
    assert len(deltas) == 20 and "".join(d["delta"]["text"] for d in deltas) == final.content[0].text
    msg = anthropic_client.messages.create(model="kst-test", max_tokens=10, messages=[{"role": "user", "content": text}])
    assert msg.content[0].text == final.content[0].text and msg.stop_reason == "end_turn"


# --- faults ---------------------------------------------------------------------------

# kind -> (what the SDK raises for a streamed request, for a non-stream one, HTTP status)
SDK_EFFECTS = {
    "500": (anthropic.InternalServerError, anthropic.InternalServerError, 500),
    "429": (anthropic.RateLimitError, anthropic.RateLimitError, 429),
    "503": (anthropic.OverloadedError, anthropic.OverloadedError, 529),
    # an error frame in a 200 stream: the plain status error class, status 200
    "midstream": (anthropic.APIStatusError, anthropic.InternalServerError, None),
    # the SDK does not wrap a connection lost mid-stream: httpx2's own error escapes
    "disconnect": (httpx2.RemoteProtocolError, anthropic.APIConnectionError, None),
    "malformed": (json.JSONDecodeError, json.JSONDecodeError, None),
}


def test_every_fault_kind_is_covered() -> None:
    assert sorted(SDK_EFFECTS) == sorted(ERR_KINDS)


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("kind", ERR_KINDS)
def test_fault_seen_through_the_sdk(anthropic_client, mock_server, kind: str, stream: bool) -> None:
    exc_stream, exc_plain, status = SDK_EFFECTS[kind]
    want = exc_stream if stream else exc_plain
    text = compose(f"!err:{kind}", f"af-{kind}-{stream}")
    with pytest.raises(want) as info:
        if stream:
            _stream(anthropic_client, [{"role": "user", "content": text}])
        else:
            anthropic_client.messages.create(model="kst-test", max_tokens=10, messages=[{"role": "user", "content": text}])
    assert type(info.value) is want, f"expected exactly {want.__name__}, got {type(info.value).__name__}: {info.value}"
    err = info.value
    if status is not None:
        assert err.status_code == status and err.body["type"] == "error"
        assert err.body["error"]["message"].startswith(f"kstress mock: injected HTTP {status}")
        assert err.type == {500: "api_error", 429: "rate_limit_error", 529: "overloaded_error"}[status]
    if kind == "429":
        assert err.response.headers["retry-after"] == "1"
    if kind == "midstream" and stream:
        assert err.status_code == 200 and err.body == {"type": "error", "error": {"type": "api_error", "message": err.api_message}}
    entry = mock_server.verdicts(f"af-{kind}-{stream}")[f"af-{kind}-{stream}"]
    assert entry["fault"] == {"kind": kind, "injected": True} and entry["plan"] == "err"


# --- the raw frames ---------------------------------------------------------------------


@pytest.mark.parametrize("marker", ["!batch1", "!batch4", "!slowbatch3:30", None])
def test_raw_stream_shape(mock_server, parse_sse, marker: str | None) -> None:
    text = compose(marker, "a-raw")
    plan = build_plan(text)
    reply = mock_server.messages(text)
    assert reply.status == 200 and reply.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(reply.body)
    datas = [json.loads(d) for _, d in events]
    # every frame is named, and the name is its data's type: the SDK drops unnamed frames
    assert all(name == d["type"] for (name, _), d in zip(events, datas))
    kinds = [d["type"] for d in datas]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    assert kinds[2] == "ping" and kinds.count("ping") == 1, "one ping, after the first block's start"
    start = datas[0]["message"]
    assert start["content"] == [] and start["id"].startswith("msg_") and start["model"] == "kst-test"
    assert set(start["usage"]) == {"input_tokens", "output_tokens"}
    blocks: dict[int, list[dict]] = {}
    for d in datas:
        if "index" in d:
            blocks.setdefault(d["index"], []).append(d)
    assert sorted(blocks) == list(range(max(len(plan.calls), 1))), "blocks numbered from 0, one after another"
    if not plan.calls:
        assert datas[-2]["delta"]["stop_reason"] == "end_turn"
        return
    assert datas[-2]["delta"] == {"stop_reason": "tool_use", "stop_sequence": None}
    for call in plan.calls:
        start, *deltas, stop = blocks[call.index]
        assert start["content_block"] == {"type": "tool_use", "id": f"toolu_{plan.nonce}_{call.index}", "name": call.name, "input": {}}
        assert stop["type"] == "content_block_stop"
        pieces = [d["delta"]["partial_json"] for d in deltas]
        assert all(d["delta"]["type"] == "input_json_delta" for d in deltas)
        assert pieces[0] == "" and "".join(pieces) == call.arguments
        assert len(pieces) >= 4 and any(p.endswith("\\") for p in pieces), "cut mid-token and mid-escape"
    # blocks one after another, none overlapping
    order = [d["index"] for d in datas if "index" in d]
    assert order == sorted(order)


def test_auth_headers_and_any_version_are_accepted(mock_server) -> None:
    import http.client

    body = json.dumps({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": compose("!batch1", "a-auth")}]})
    for headers in ({"x-api-key": "k", "anthropic-version": "2023-06-01"}, {"Authorization": "Bearer k", "anthropic-version": "2099-01-01"}, {}):
        conn = http.client.HTTPConnection("127.0.0.1", mock_server.port, timeout=10)
        try:
            conn.request("POST", "/v1/messages", body=body, headers={"Content-Type": "application/json", **headers})
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read())["content"][0]["id"] == "toolu_a-auth_0", headers
        finally:
            conn.close()


def test_alias_without_v1(mock_server) -> None:
    reply = mock_server.request("POST", "/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "!batch1 #a-alias"}]})
    assert reply.status == 200 and reply.json()["content"][0]["id"] == "toolu_a-alias_0"


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"model": "m"}, "'messages' is missing or empty"),
        ({"messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "x", "content": "r"}]}]}, "no user message without tool_result"),
        ({"messages": [{"role": "user", "content": "!batch65 #a-bad"}]}, "count 65 is out of range"),
    ],
)
def test_bad_request_is_an_anthropic_style_400(mock_server, body: dict, words: str) -> None:
    reply = mock_server.request("POST", "/v1/messages", body)
    assert reply.status == 400
    err = reply.json()
    assert err["type"] == "error" and err["error"]["type"] == "invalid_request_error" and words in err["error"]["message"]


def test_bad_marker_through_the_sdk(anthropic_client) -> None:
    with pytest.raises(anthropic.BadRequestError, match="count 65 is out of range"):
        anthropic_client.messages.create(model="m", max_tokens=5, messages=[{"role": "user", "content": "!batch65 #a-sdk"}])


def test_models_list_through_the_sdk(anthropic_client) -> None:
    models = list(anthropic_client.models.list())
    assert [(m.id, m.type) for m in models] == [("kstress-mock", "model")]
    assert anthropic_client.models.retrieve("claude-x").id == "claude-x"


# --- quirks ------------------------------------------------------------------------------

N = 3


def _parses_correctly(final, plan) -> None:
    assert final.stop_reason == "tool_use"
    assert [(b.id, b.input) for b in final.content if b.type == "tool_use"] == [(f"toolu_{plan.nonce}_{c.index}", json.loads(c.arguments)) for c in plan.calls]


def _empty_inputs(final, plan) -> None:
    # the calls arrive, every input empty: a kernel runs each tool without arguments
    assert [(b.id, b.name, b.input) for b in final.content] == [(f"toolu_{plan.nonce}_{c.index}", c.name, {}) for c in plan.calls]


def _text_lost(final, plan) -> None:
    # the text block arrives empty (its deltas were input_json_delta); the calls parse
    assert final.content[0].type == "text" and final.content[0].text == ""
    assert [b.input for b in final.content[1:]] == [json.loads(c.arguments) for c in plan.calls]


def _raises(exc: type[BaseException], match: str):
    def check(run, plan) -> None:
        with pytest.raises(exc, match=match) as info:
            run()
        assert type(info.value) is exc, f"expected exactly {exc.__name__}, got {type(info.value).__name__}"

    check.raises = exc  # type: ignore[attr-defined]
    return check


# quirk -> its effect on anthropic 2.16.0's stream helper (docs/wire.md)
EFFECTS = {
    "index1_first": _raises(IndexError, "list index out of range"),
    "delta_before_start": _raises(IndexError, "list index out of range"),
    "overlap_blocks": _parses_correctly,
    "no_content": _raises(AttributeError, "'NoneType' object has no attribute 'append'"),
    "empty_json_delta": _text_lost,
    "drop_json_delta": _empty_inputs,
    # every frame dropped for want of an event line: the helper never sees
    # message_start and fails its own assertion
    "no_event_line": _raises(AssertionError, "^$"),
}


def test_every_anthropic_quirk_has_a_recorded_effect() -> None:
    assert sorted(EFFECTS) == sorted(quirks_for("anthropic")) == sorted(RAW)


@pytest.mark.parametrize("quirk", quirks_for("anthropic"))
def test_quirk_effect_on_the_sdk(anthropic_client, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"aq-{quirk}")
    plan = build_plan(text)
    run = lambda: _stream(anthropic_client, [{"role": "user", "content": text}])  # noqa: E731
    effect = EFFECTS[quirk]
    if hasattr(effect, "raises"):
        effect(run, plan)
    else:
        effect(run(), plan)


def raw_index1_first(datas, plan):
    assert datas[1]["type"] == "content_block_start" and datas[1]["index"] == 1
    assert {d["index"] for d in datas if "index" in d} == {1, 2, 3}


def raw_delta_before_start(datas, plan):
    for call in plan.calls:
        mine = [d for d in datas if d.get("index") == call.index]
        assert mine[0]["type"] == "content_block_delta" and mine[1]["type"] == "content_block_start"


def raw_overlap_blocks(datas, plan):
    kinds = [(d["type"], d.get("index")) for d in datas if "index" in d]
    starts = [k for k, (t, _) in enumerate(kinds) if t == "content_block_start"]
    stops = [k for k, (t, _) in enumerate(kinds) if t == "content_block_stop"]
    assert max(starts) < min(stops), "every block is opened before any closes"
    deltas = [i for t, i in kinds if t == "content_block_delta"]
    assert deltas[:N] == [0, 1, 2], "deltas interleave across the open blocks"


def raw_no_content(datas, plan):
    assert "content" not in datas[0]["message"]


def raw_empty_json_delta(datas, plan):
    text_block = [d for d in datas if d.get("index") == 0]
    assert text_block[0]["content_block"]["type"] == "text"
    deltas = [d["delta"] for d in text_block if d["type"] == "content_block_delta"]
    assert deltas and all(d == {"type": "input_json_delta", "partial_json": ""} for d in deltas)


def raw_drop_json_delta(datas, plan):
    assert not [d for d in datas if d["type"] == "content_block_delta"]
    assert sum(d["type"] == "content_block_start" for d in datas) == N


def raw_no_event_line(datas, plan):
    pass  # checked on the raw events below: not one event line


RAW = {q: globals()[f"raw_{q}"] for q in quirks_for("anthropic")}


@pytest.mark.parametrize("quirk", quirks_for("anthropic"))
def test_quirk_raw_frames_show_the_deviation(mock_server, parse_sse, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"aqr-{quirk}")
    plan = build_plan(text)
    reply = mock_server.messages(text)
    assert reply.status == 200 and "x-kstress-quirk-skipped" not in reply.headers
    events = parse_sse(reply.body)
    if quirk == "no_event_line":
        assert all(name is None for name, _ in events)
    else:
        assert all(name is not None for name, _ in events)
    RAW[quirk]([json.loads(d) for _, d in events], plan)
    entry = mock_server.verdicts(plan.nonce)[plan.nonce]
    assert (entry["quirk"], entry["quirk_applied"]) == (quirk, True)


@pytest.mark.parametrize("quirk", ["noindex", "dup_output_index"])
def test_a_quirk_of_another_dialect_streams_the_batch_unchanged(anthropic_client, mock_server, quirk: str) -> None:
    text = compose(f"!quirk:{quirk}", f"aqo-{quirk}")
    plan = build_plan(text)
    _parses_correctly(_stream(anthropic_client, [{"role": "user", "content": text}]), plan)
    reply = mock_server.messages(text)
    assert re.fullmatch(rf"{quirk} applies to (chat|responses)", reply.headers["x-kstress-quirk-skipped"])
    entry = mock_server.verdicts(plan.nonce)[plan.nonce]
    assert (entry["quirk"], entry["quirk_applied"]) == (quirk, False)
