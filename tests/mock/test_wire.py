"""The wire format, byte for byte: argument splitting, chunk bytes, whole replies."""

from __future__ import annotations

import json
import random

import pytest

from mock import wire
from mock.markers import CHAT_QUIRKS, build_plan


@pytest.mark.parametrize(
    "args",
    ['{"a": 1}', '{"q": "say \\"hi\\""}', "ab", '{"x": "\\n"}', build_plan("!slowbatch1 #s").calls[0].arguments],
)
def test_split_arguments_rejoins_exactly(args: str) -> None:
    pieces = wire.split_arguments(args)
    assert "".join(pieces) == args
    assert all(pieces) and len(pieces) >= 2


def test_split_arguments_cuts_mid_token_and_mid_escape() -> None:
    args = '{"query": "item 0 of \\"n\\"\\tbatch"}'
    pieces = wire.split_arguments(args)
    assert pieces[0] == '{"q'  # inside the first key
    backslash = args.index("\\")
    assert any(sum(len(p) for p in pieces[: k + 1]) == backslash + 1 for k in range(len(pieces)))
    assert any(p.endswith("\\") for p in pieces[:-1])
    assert len(pieces) >= 3


def test_split_arguments_edge_cases() -> None:
    assert wire.split_arguments("") == [""]
    assert wire.split_arguments("{") == ["{"]
    assert wire.split_arguments("{}") == ["{", "}"]
    # a backslash as the last character cannot be cut after
    assert "".join(wire.split_arguments('{"a":"\\')) == '{"a":"\\'


def test_default_catalog_arguments_split_in_at_least_3_pieces_with_a_backslash_cut() -> None:
    for marker in ("!batch1", "!slowbatch1", "!serialbatch1", "!img", "!ocr", "!resident", "!notify"):
        for call in build_plan(f"{marker} #some-nonce").calls:
            pieces = wire.split_arguments(call.arguments)
            assert len(pieces) >= 3, (marker, pieces)
            if "\\" in call.arguments[:-1]:
                assert any(p.endswith("\\") for p in pieces[:-1]), (marker, pieces)


def test_split_text() -> None:
    assert wire.split_text("abcdefghij", 3) == ["abcd", "efg", "hij"]
    assert wire.split_text("ab", 20) == ["a", "b"]
    assert wire.split_text("abc", 1) == ["abc"]
    assert wire.split_text("", 5) == [""]


def _renderer(**kw) -> wire.Renderer:
    return wire.Renderer(model="m-1", id="chatcmpl-x", created=1700000000, **kw)


def test_chunk_bytes_exactly() -> None:
    r = _renderer()
    assert r.role() == (
        b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1700000000,"model":"m-1",'
        b'"system_fingerprint":"fp_kstress","choices":[{"index":0,"delta":{"role":"assistant","content":null},'
        b'"logprobs":null,"finish_reason":null}]}\n\n'
    )
    assert r.chunk({}, "tool_calls").endswith(b'"delta":{},"logprobs":null,"finish_reason":"tool_calls"}]}\n\n')
    assert _renderer(include_usage=True).chunk({"content": "x"}).endswith(b'"finish_reason":null}],"usage":null}\n\n')
    assert r.usage_chunk({"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}) == (
        b'data: {"id":"chatcmpl-x","object":"chat.completion.chunk","created":1700000000,"model":"m-1",'
        b'"system_fingerprint":"fp_kstress","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2,"total_tokens":3}}\n\n'
    )
    assert wire.DONE == b"data: [DONE]\n\n"


def test_chunks_are_compact_json_and_keep_unicode() -> None:
    ev = _renderer().chunk({"content": 'é "q"\n'})
    assert ev.startswith(b"data: ") and ev.endswith(b"\n\n")
    body = ev[6:-2].decode()
    assert json.loads(body)["choices"][0]["delta"]["content"] == 'é "q"\n'
    assert "é" in body and ": " not in body.replace('é "q"', "")


def test_renderer_defaults_give_fresh_ids() -> None:
    a, b = wire.Renderer(model="m"), wire.Renderer(model="m")
    assert a.id != b.id and a.id.startswith("chatcmpl-") and len(a.id) == len("chatcmpl-") + 24
    assert a.created > 1_600_000_000


def _parse(events: list[bytes]) -> list:
    out = []
    for ev in events:
        assert ev.startswith(b"data: ") and ev.endswith(b"\n\n") and ev.count(b"\n\n") == 1
        data = ev[6:-2].decode()
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_text_events() -> None:
    events = _parse(_renderer(include_usage=True).text_events("hello world", 4, {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
    assert events[-1] == "[DONE]"
    role, *texts, finish, usage, _ = events
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "".join(t["choices"][0]["delta"]["content"] for t in texts) == "hello world" and len(texts) == 4
    assert finish["choices"][0]["finish_reason"] == "stop"
    assert usage["choices"] == [] and usage["usage"]["total_tokens"] == 2
    no_usage = _parse(_renderer().text_events("hi", 2, {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}))
    assert len(no_usage) == 1 + 2 + 1 + 1  # include_usage off: no usage chunk even when usage is given


def test_tool_events_fragment_sequence() -> None:
    plan = build_plan("!batch2 #w")
    events = _parse(_renderer().tool_events(plan.calls, None))
    frags = [e["choices"][0]["delta"]["tool_calls"] for e in events[1:-2]]
    assert all(len(f) == 1 for f in frags)
    frags = [f[0] for f in frags]
    assert frags == wire.fragments(plan.calls)
    headers = [f for f in frags if "id" in f]
    assert headers == [
        {"index": c.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}} for c in plan.calls
    ]
    assert events[-2]["choices"][0]["finish_reason"] == "tool_calls" and events[-1] == "[DONE]"


@pytest.mark.parametrize("quirk", CHAT_QUIRKS)
def test_every_quirk_renders(quirk: str) -> None:
    plan = build_plan(f"!quirk:{quirk} #qq")
    r = _renderer(per_chunk_id=quirk == "per_chunk_id", event_line="message" if quirk == "event_line" else None)
    events = r.tool_events(plan.calls, None, quirk)
    assert events and all(ev.endswith(b"\n\n") for ev in events)
    normal = _renderer().tool_events(plan.calls, None)
    assert events != normal, f"quirk {quirk} renders the normal stream"


def test_unknown_quirk_is_refused() -> None:
    with pytest.raises(ValueError, match="has no renderer"):
        _renderer().tool_events(build_plan("!batch1 #u").calls, None, "nonesuch")


def test_event_line_names_every_event_including_done() -> None:
    events = _renderer(event_line="message").tool_events(build_plan("!batch1 #e").calls, None, "event_line")
    assert all(ev.startswith(b"event: message\ndata: ") for ev in events)
    assert events[-1] == b"event: message\ndata: [DONE]\n\n"


def test_completion_object() -> None:
    plan = build_plan("!batch2 #c")
    obj = wire.completion("m-1", None, plan.calls, {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3})
    assert obj["object"] == "chat.completion" and obj["model"] == "m-1"
    (choice,) = obj["choices"]
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls
    ]
    text = wire.completion("m-1", "hi")
    assert text["choices"][0]["finish_reason"] == "stop" and "tool_calls" not in text["choices"][0]["message"]
    assert wire.completion("m", None, plan.calls, finish_reason="stop")["choices"][0]["finish_reason"] == "stop"


def test_error_body_and_event() -> None:
    assert wire.error_body("bad", code="c", param="messages") == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "messages", "code": "c"}
    }
    ev = wire.error_event("boom", code="internal_error")
    assert json.loads(ev[6:-2]) == {"error": {"message": "boom", "type": "server_error", "param": None, "code": "internal_error"}}


# --- coalescing and the per-shape stream template -------------------------------------


def test_coalesced_events_are_the_same_bytes() -> None:
    calls = build_plan("!batch3 #co").calls
    kw = dict(model="m", id="chatcmpl-x", created=1, include_usage=True)
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
    plain, joined = wire.Renderer(**kw), wire.Renderer(coalesce=True, **kw)
    assert b"".join(plain.tool_events(calls, usage)) == b"".join(joined.tool_events(calls, usage))
    assert len(joined.tool_events(calls, usage)) < len(plain.tool_events(calls, usage))
    assert b"".join(plain.text_events("some text", 7, usage)) == b"".join(joined.text_events("some text", 7, usage))


def _framed(deltas: list[str], head: str = "<H>", tail: str = "<T>") -> str:
    return head + (tail + head).join(deltas) + tail


@pytest.mark.parametrize("marker", ["!batch1", "!batch4", "!mixed5", "!slowbatch3:40", "!serialbatch2", "!img", "!notify"])
@pytest.mark.parametrize("length", [1, 2, 7, 13, 64])
def test_stream_template_fills_like_a_render(marker: str, length: int) -> None:
    render = lambda nonce: wire.tool_deltas(build_plan(f"{marker} #{nonce}").calls)  # noqa: E731
    template = wire.StreamTemplate.build(render, length)
    assert template is not None and template.length == length
    rng = random.Random(length)
    for _ in range(5):
        nonce = "".join(rng.choice(wire.NONCE_ALPHABET) for _ in range(length))
        assert template.fill(nonce, "<H>", "<T>") == _framed(render(nonce))


def test_stream_template_of_a_text_reply() -> None:
    render = lambda nonce: wire.text_deltas(f"answering {nonce}; KST nonce={nonce} plan=text ok", 20)  # noqa: E731
    template = wire.StreamTemplate.build(render, 10)
    assert template is not None
    assert template.fill("abcdefghij", "H", "T") == _framed(render("abcdefghij"), "H", "T")


@pytest.mark.parametrize(
    "render",
    [
        lambda nonce: ['{"content":"' + nonce.upper() + '"}'],  # not a copy of the characters
        lambda nonce: ['{"content":"' + "".join(sorted(nonce)) + '"}'],  # reordered
        lambda nonce: ['{"content":"x"}'] * (2 if nonce[0] == "A" else 3),  # event count depends on it
        lambda nonce: ['{"content":"' + nonce + '\x01"}'],  # a raw control character: not JSON text
    ],
    ids=["upper", "sorted", "count", "control"],
)
def test_stream_template_refuses_what_it_cannot_reproduce(render) -> None:
    assert wire.StreamTemplate.build(render, 6) is None


def test_stream_template_length_limits() -> None:
    render = lambda nonce: ['{"content":"' + nonce + '"}']  # noqa: E731
    assert wire.StreamTemplate.build(render, 0) is None
    assert wire.StreamTemplate.build(render, 65) is None
    assert wire.StreamTemplate.build(render, 64) is not None
