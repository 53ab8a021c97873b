"""The three dialects of the kernel's LLM client in-process: the request each
renders from one neutral conversation (exactly), and how each accumulates a
stream, including the deviations the mock has no quirk for. The end-to-end
proof against the real mock is test_rk_markers / test_rk_llm / test_rk_faults;
against the scripted fake (headers, history shapes) the last tests here."""

from __future__ import annotations

import json

import pytest

from refkernel.convo import Assistant, Reply, Result, ToolCall, ToolSpec, User
from refkernel.dialects import ANTHROPIC, BY_NAME, CHAT, RESPONSES
from refkernel.errors import LLMError
from rkfake import Script, session_turn, text
from rkhelpers import run_kernel_cli

SPEC = ToolSpec("lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]})


def conversation() -> list:
    """Two steps and an answer: text with two calls (the second failed), then
    one call whose arguments are not an object, then the answer."""
    a = ToolCall(0, "id_a", "lookup", '{"key": "a"}', item_id="fc_a")
    b = ToolCall(1, "id_b", "cmd_run", '{"command": "false"}', item_id="fc_b")
    c = ToolCall(0, "id_c", "lookup", '{"key": ', item_id="fc_c")
    return [
        User("hi"),
        Assistant("let me look", (a, b), text_id="msg_1"),
        Result(a, True, "found a"),
        Result(b, False, "ERROR: command exited with status 1"),
        Assistant("", (c,)),
        Result(c, False, "ERROR: not valid JSON"),
        Assistant("the answer", (), text_id="msg_2"),
        User("again"),
    ]


def test_chat_request():
    body = CHAT.request("m", "sys", conversation(), [SPEC], True)
    assert body == {
        "model": "m",
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "let me look", "tool_calls": [
                {"id": "id_a", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "a"}'}},
                {"id": "id_b", "type": "function", "function": {"name": "cmd_run", "arguments": '{"command": "false"}'}}]},
            {"role": "tool", "tool_call_id": "id_a", "content": "found a"},
            {"role": "tool", "tool_call_id": "id_b", "content": "ERROR: command exited with status 1"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "id_c", "type": "function", "function": {"name": "lookup", "arguments": '{"key": '}}]},
            {"role": "tool", "tool_call_id": "id_c", "content": "ERROR: not valid JSON"},
            {"role": "assistant", "content": "the answer"},
            {"role": "user", "content": "again"},
        ],
        "tools": [{"type": "function", "function": {"name": "lookup", "description": "Look a key up.", "parameters": SPEC.parameters}}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert "stream_options" not in CHAT.request("m", "", [User("x")], [SPEC], False)
    assert CHAT.headers("k") == {"Authorization": "Bearer k"} and CHAT.path == "/chat/completions"


def test_anthropic_request():
    body = ANTHROPIC.request("m", "sys", conversation(), [SPEC], True)
    assert body == {
        "model": "m",
        "max_tokens": 4096,
        "system": "sys",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "let me look"},
                {"type": "tool_use", "id": "id_a", "name": "lookup", "input": {"key": "a"}},
                {"type": "tool_use", "id": "id_b", "name": "cmd_run", "input": {"command": "false"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "id_a", "content": "found a"},
                {"type": "tool_result", "tool_use_id": "id_b", "content": "ERROR: command exited with status 1", "is_error": True}]},
            # no empty text block (the API refuses them); input an object even when the model's was not
            {"role": "assistant", "content": [{"type": "tool_use", "id": "id_c", "name": "lookup", "input": {}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "id_c", "content": "ERROR: not valid JSON", "is_error": True}]},
            {"role": "assistant", "content": "the answer"},
            {"role": "user", "content": "again"},
        ],
        "tools": [{"name": "lookup", "description": "Look a key up.", "input_schema": SPEC.parameters}],
        "stream": True,
    }
    assert ANTHROPIC.headers("k") == {"x-api-key": "k", "anthropic-version": "2023-06-01"} and ANTHROPIC.path == "/messages"
    # an empty final answer is left out rather than sent as empty content
    assert ANTHROPIC.request("m", "", [User("a"), Assistant(""), User("b")], [], False)["messages"] == [
        {"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def test_responses_request():
    body = RESPONSES.request("m", "sys", conversation(), [SPEC], True)
    assert body == {
        "model": "m",
        "instructions": "sys",
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "let me look", "annotations": []}]},
            {"type": "function_call", "call_id": "id_a", "name": "lookup", "arguments": '{"key": "a"}', "id": "fc_a"},
            {"type": "function_call", "call_id": "id_b", "name": "cmd_run", "arguments": '{"command": "false"}', "id": "fc_b"},
            {"type": "function_call_output", "call_id": "id_a", "output": "found a"},
            {"type": "function_call_output", "call_id": "id_b", "output": "ERROR: command exited with status 1"},
            {"type": "function_call", "call_id": "id_c", "name": "lookup", "arguments": '{"key": ', "id": "fc_c"},
            {"type": "function_call_output", "call_id": "id_c", "output": "ERROR: not valid JSON"},
            {"type": "message", "id": "msg_2", "role": "assistant", "status": "completed",
             "content": [{"type": "output_text", "text": "the answer", "annotations": []}]},
            {"role": "user", "content": "again"},
        ],
        "tools": [{"type": "function", "name": "lookup", "description": "Look a key up.", "parameters": SPEC.parameters}],
        "stream": True,
    }
    assert RESPONSES.headers("k") == {"Authorization": "Bearer k"} and RESPONSES.path == "/responses"
    # without an item id (a server that sent none) the call goes back without one
    items = RESPONSES.request("m", "", [Assistant("t", (ToolCall(0, "c", "f", "{}"),))], [], False)["input"]
    assert items == [{"role": "assistant", "content": "t"}, {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}]


# --- parsing ------------------------------------------------------------------------


def sse(*events: dict, named: bool = True) -> list[tuple[str | None, bytes]]:
    return [(e["type"] if named else None, json.dumps(e).encode()) for e in events]


def run(dialect, events, naive: bool = False) -> tuple[Reply, list[str]]:
    deltas: list[str] = []
    p = dialect.parser(deltas.append, naive)
    for name, payload in events:
        if p.feed(name, payload):
            break
    return p.end(), deltas


def calls(reply: Reply) -> list[tuple[str, str, str]]:
    return [(c.id, c.name, c.arguments) for c in reply.tool_calls]


def a_start(i, id_=None, name="f", input_=None, kind="tool_use"):
    block = {"type": kind, "id": id_ or f"t{i}", "name": name, "input": {} if input_ is None else input_} if kind == "tool_use" else {"type": "text", "text": ""}
    return {"type": "content_block_start", "index": i, "content_block": block}


def a_json(i, piece):
    return {"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": piece}}


A_HEAD = {"type": "message_start", "message": {"id": "msg_x", "content": []}}
A_END = [{"type": "message_delta", "delta": {"stop_reason": "tool_use"}}, {"type": "message_stop"}]


def test_anthropic_blocks_by_index_interleaved_reordered_and_from_1():
    events = sse(A_HEAD, a_start(1), a_start(2), {"type": "ping"}, a_json(2, '{"k":'), a_json(1, ""), a_json(1, '{"k":1}'),
                 a_json(3, '{"k":'), a_json(2, "2}"), a_start(3), a_json(3, "3}"),
                 {"type": "content_block_stop", "index": 1}, *A_END)
    reply, _ = run(ANTHROPIC, events)
    assert calls(reply) == [("t1", "f", '{"k":1}'), ("t2", "f", '{"k":2}'), ("t3", "f", '{"k":3}')]
    assert reply.finish_reason == "tool_use"


def test_anthropic_text_and_a_whole_input_at_the_start():
    text = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hel"}}
    text2 = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}
    events = sse(A_HEAD, a_start(0, kind="text"), text, text2, a_start(1, input_={"k": 1}), *A_END, named=False)
    reply, deltas = run(ANTHROPIC, events)
    assert (reply.content, deltas) == ("hello", ["hel", "lo"])
    assert calls(reply) == [("t1", "f", '{"k": 1}')]  # a gateway's whole input, no pieces


@pytest.mark.parametrize("events, says", [
    ([A_HEAD, a_start(0), a_json(0, "{}")], "ended before message_stop"),
    ([A_HEAD, a_start(0), a_json(0, "{}"), A_END[0]], "ended before message_stop (it had sent stop_reason 'tool_use')"),
    ([A_HEAD, a_start(0), {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}], "mid-stream: overloaded_error: busy"),
    ([a_start(0), a_json(0, "{}"), *A_END], "before message_start"),
    ([A_HEAD, a_start(0), a_json(0, "{}"), a_json(5, "{}"), *A_END], "block(s) [5] that never started"),
    ([A_HEAD, a_start(0), *A_END], "no input_json_delta and an empty input"),
    ([A_HEAD, {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}}], "without an integer index"),
])
def test_anthropic_incomplete_streams_are_llm_errors(events, says):
    with pytest.raises(LLMError, match=says.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]")):
        run(ANTHROPIC, sse(*events))


def test_anthropic_naive_glues_every_block_into_the_first():
    events = sse(A_HEAD, a_start(0), a_json(0, '{"k":0}'), a_start(1), a_json(1, '{"k":1}'), *A_END)
    assert calls(run(ANTHROPIC, events)[0]) == [("t0", "f", '{"k":0}'), ("t1", "f", '{"k":1}')]
    assert calls(run(ANTHROPIC, events, naive=True)[0]) == [("t0", "f", '{"k":0}{"k":1}')]


def r_added(i, n, index=None):
    return {"type": "response.output_item.added", "output_index": i if index is None else index,
            "item": {"id": f"fc_{n}", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": f"call_{n}", "name": "f"}}


def r_delta(n, piece, index=0):
    return {"type": "response.function_call_arguments.delta", "item_id": f"fc_{n}", "output_index": index, "delta": piece}


def r_done(i, n, args):
    return {"type": "response.output_item.done", "output_index": i,
            "item": {"id": f"fc_{n}", "type": "function_call", "status": "completed", "arguments": args, "call_id": f"call_{n}", "name": "f"}}


R_HEAD = {"type": "response.created", "response": {"id": "resp_1", "output": []}}


def r_completed(output=None):
    return {"type": "response.completed", "response": {"id": "resp_2", "status": "completed", "output": output or []}}


def test_responses_items_by_id_whatever_their_index():
    # every item at output_index 0, a delta before its item, no done events, another response id at the end
    events = sse(R_HEAD, r_added(0, "a"), r_delta("b", '{"k":'), r_delta("a", '{"k":'), r_added(0, "b", index=0),
                 r_delta("a", "1}"), r_delta("b", "2}"), r_completed())
    reply, _ = run(RESPONSES, events)
    assert [(c.id, c.item_id, c.arguments) for c in reply.tool_calls] == [("call_a", "fc_a", '{"k":1}'), ("call_b", "fc_b", '{"k":2}')]
    assert reply.finish_reason == "completed"


def test_responses_the_final_output_has_the_last_word():
    events = sse(R_HEAD, r_added(0, "a"), r_delta("a", '{"k":'), r_done(0, "a", '{"k":1}'),
                 r_completed([r_done(0, "a", '{"k":10}')["item"]]))
    assert calls(run(RESPONSES, events)[0]) == [("call_a", "f", '{"k":10}')]
    # ... and the naive accumulator (the fault) reads none of it
    assert calls(run(RESPONSES, events, naive=True)[0]) == [("call_a", "f", '{"k":')]


def test_responses_text_item_and_its_id():
    msg = {"type": "response.output_item.added", "output_index": 0, "item": {"id": "msg_9", "type": "message", "content": []}}
    d = {"type": "response.output_text.delta", "item_id": "msg_9", "output_index": 0, "content_index": 0, "delta": "hi"}
    reply, deltas = run(RESPONSES, sse(R_HEAD, msg, d, r_completed()))
    assert (reply.content, reply.text_id, deltas) == ("hi", "msg_9", ["hi"])


@pytest.mark.parametrize("events, says", [
    ([R_HEAD, r_added(0, "a"), r_delta("a", "{}")], "ended before response.completed"),
    ([R_HEAD, r_added(0, "a"), {"type": "response.failed", "response": {"status": "failed", "error": {"code": "server_error", "message": "boom"}}}],
     "the response failed: server_error: boom"),
    ([R_HEAD, {"type": "error", "code": "rate_limit_exceeded", "message": "slow down", "param": None}], "mid-stream: rate_limit_exceeded: slow down"),
    ([r_added(0, "a"), r_completed()], "before response.created"),
    ([R_HEAD, r_added(0, "a"), r_delta("zz", "{}"), r_completed()], "never added"),
    ([R_HEAD, r_added(0, "a"), r_added(1, "a"), r_completed()], "added output item 'fc_a' twice"),
])
def test_responses_incomplete_streams_are_llm_errors(events, says):
    with pytest.raises(LLMError, match=says):
        run(RESPONSES, sse(*events))


@pytest.mark.parametrize("api", list(BY_NAME))
def test_a_frame_that_is_not_json_is_an_llm_error(api):
    with pytest.raises(LLMError, match="malformed stream chunk"):
        BY_NAME[api].parser(lambda t: None, False).feed(None, b'{"type": "message_start", "mess')


def test_whole_replies_use_the_same_accumulator_and_fault():
    msg = {"type": "message", "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "id": "t0", "name": "f", "input": {"k": 0}},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"k": 1}}], "stop_reason": "tool_use"}
    deltas: list[str] = []
    assert calls(ANTHROPIC.whole(msg, deltas.append, False)) == [("t0", "f", '{"k": 0}'), ("t1", "f", '{"k": 1}')]
    assert deltas == ["ok"]
    assert calls(ANTHROPIC.whole(msg, deltas.append, True)) == [("t0", "f", '{"k": 0}{"k": 1}')]
    resp = {"id": "r", "status": "completed", "error": None, "output": [r_done(0, "a", '{"k":0}')["item"], r_done(1, "b", '{"k":1}')["item"]]}
    assert calls(RESPONSES.whole(resp, deltas.append, False)) == [("call_a", "f", '{"k":0}'), ("call_b", "f", '{"k":1}')]
    assert calls(RESPONSES.whole(resp, deltas.append, True)) == [("call_a", "f", '{"k":0}{"k":1}')]
    with pytest.raises(LLMError, match="failed: server_error: x"):
        RESPONSES.whole({"status": "failed", "error": {"code": "server_error", "message": "x"}, "output": []}, deltas.append, False)
    with pytest.raises(LLMError, match="unreadable message"):
        ANTHROPIC.whole({"type": "message"}, deltas.append, False)


# --- on the real kernel, against the scripted fake ------------------------------------


@pytest.mark.parametrize("api, want", [
    ("chat", {"authorization": "Bearer sk-test"}),
    ("responses", {"authorization": "Bearer sk-test"}),
    ("anthropic", {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}),
])
async def test_endpoint_headers_and_the_stats(llm, rk, api, want):
    k = await rk("--llm-api", api, "--llm-api-key", "sk-test", llm_url=llm.url + "/v1")
    conn = await k.connect()
    await session_turn(conn, None, loop=1)
    rec = llm.requests[-1]
    assert rec.dialect == api
    headers = {h.lower(): v for h, v in (rec.headers or {}).items()}
    assert {h: headers.get(h) for h in want} == want
    assert headers["accept"] == "text/event-stream"
    assert rec.body["stream"] is True and rec.body["model"] == "kstress-refkernel"
    assert (await conn.stats())["llm_api"] == api


async def test_responses_history_repeats_the_items_under_their_ids(llm, rk):
    # the answer's message item and every function_call item go back with the ids the model gave them
    k = await rk("--llm-api", "responses", llm_url=llm.url + "/v1")
    conn = await k.connect()
    a1 = await session_turn(conn, "A", loop=1, calls=2)
    a2 = await session_turn(conn, "A")
    n1 = Script.parse(a1).nonce
    items = llm.recorded_for(Script.parse(a2).nonce)[0].body["input"]
    assert [(i.get("type", "message"), i.get("id"), i.get("role")) for i in items] == [
        ("message", None, "user"),
        ("function_call", f"fc_{n1}_0_0", None), ("function_call", f"fc_{n1}_0_1", None),
        ("function_call_output", None, None), ("function_call_output", None, None),
        ("message", f"msg_{n1}", "assistant"),
        ("message", None, "user"),
    ]
    assert llm.unreadable == []


async def test_anthropic_history_is_blocks_and_failed_tools_say_so(llm, rk):
    k = await rk("--llm-api", "anthropic", llm_url=llm.url + "/v1")
    conn = await k.connect()
    await session_turn(conn, "A", loop=1, calls=2)
    t, n = text(loop=1, calls=3, broken=True)  # the third call fails
    turn = await conn.turn(t, session="A")
    assert turn.kind == "response" and [f["ok"] for f in turn.tools if f["phase"] == "end"] == [True, True, False]
    msgs = llm.recorded_for(n)[-1].body["messages"]
    shape = [(m["role"], "text" if isinstance(m["content"], str) else [b["type"] for b in m["content"]]) for m in msgs]
    assert shape == [
        ("user", "text"), ("assistant", ["tool_use", "tool_use"]), ("user", ["tool_result", "tool_result"]), ("assistant", "text"),
        ("user", "text"), ("assistant", ["tool_use", "tool_use", "tool_use"]), ("user", ["tool_result"] * 3)]
    assert [b.get("is_error") for b in msgs[-1]["content"]] == [None, None, True]
    assert msgs[-1]["content"][2]["content"].startswith("ERROR: argument 'key' must be a string")
    assert [b["input"] for b in msgs[-2]["content"]][2] == {"key": 0, "query": "a key that is not a string"}
    assert llm.unreadable == []


async def test_a_bad_llm_api_exits_2(tmp_path):
    rc, out = await run_kernel_cli(["--listen", "tcp:127.0.0.1:0", "--llm-url", "http://127.0.0.1:9/v1",
                                    "--data-dir", str(tmp_path / "d"), "--llm-api", "gemini"])
    assert rc == 2 and "--llm-api" in out and "anthropic" in out, out


@pytest.mark.parametrize("chunk", [
    {"choices": True},
    {"choices": 7},
    {"choices": [{"index": 0, "delta": {"tool_calls": 1.5}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": {"index": 0}}}]},
])
def test_chat_chunks_of_the_wrong_shape_are_llm_errors(chunk):
    # found by fuzzing the parsers with the mock's own streams, fields swapped for other types
    with pytest.raises(LLMError, match="malformed stream chunk"):
        CHAT.parser(lambda t: None, False).feed(None, json.dumps(chunk).encode())
