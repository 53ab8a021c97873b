"""Every malformed request gets a JSON 400 naming the problem, on every
dialect's endpoint and on /_mock/verdicts: never a plain-text 500, never a
traceback in the log."""

from __future__ import annotations

import copy
import json
import logging

import pytest

from mock.markers import build_plan, compose, session_nonce
from mockhelpers import PATHS, first_body, followup_body

DEEP = 100_000


def _no_tracebacks(caplog) -> None:
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, f"the server logged {errors[0].getMessage()!r}"


def _is_json_400(reply, *words: str) -> None:
    assert reply.status == 400, (reply.status, reply.body[:200])
    assert reply.headers["content-type"].startswith("application/json")
    text = json.dumps(reply.json())
    for w in words:
        assert w in text, text


@pytest.mark.parametrize("path", [*PATHS.values(), "/_mock/verdicts"])
def test_a_body_nested_100000_deep_is_a_json_400(mock_server, caplog, path: str) -> None:
    caplog.set_level(logging.ERROR)
    reply = mock_server.request("POST", path, b"[" * DEEP + b"]" * DEEP)
    _is_json_400(reply, "nests too deeply")
    _no_tracebacks(caplog)


@pytest.mark.parametrize("dialect", sorted(PATHS))
def test_deep_but_parseable_parts_are_a_json_400_or_read(mock_server, caplog, dialect: str) -> None:
    """Nesting the JSON reader accepts but the checks cannot walk: in a
    message's content, and in a tool call's arguments."""
    caplog.set_level(logging.ERROR)
    deep: object = 1
    for _ in range(900):
        deep = {"a": deep}
    text = compose("!batch1", f"deep{dialect}")
    plan = build_plan(text)
    body = followup_body(dialect, plan, text, False)
    if dialect == "chat":
        body["messages"][1]["tool_calls"][0]["function"]["arguments"] = json.dumps(deep)
    elif dialect == "anthropic":
        body["messages"][1]["content"][0]["input"] = deep
    else:
        body["input"][1]["arguments"] = json.dumps(deep)
    reply = mock_server.request("POST", PATHS[dialect], json.dumps(body).encode())
    if reply.status == 200:
        assert "args=bad" in json.dumps(reply.json())
    else:
        _is_json_400(reply, "nests too deeply")
    content = first_body(dialect, text, False)
    if dialect == "responses":
        content["input"] = [{"role": "user", "content": deep}]
    else:
        content["messages"][0]["content"] = deep
    reply = mock_server.request("POST", PATHS[dialect], json.dumps(content).encode())
    assert reply.status in (200, 400) and reply.headers["content-type"].split(";")[0] in ("application/json", "text/event-stream")
    _no_tracebacks(caplog)


def test_chat_tool_calls_that_are_not_a_list_are_named(mock_server, caplog) -> None:
    caplog.set_level(logging.ERROR)
    text = compose("!batch2", "tcnotlist")
    body = followup_body("chat", build_plan(text), text, True)
    for bad in (5, True, "call", {"id": "x"}):
        body["messages"][1]["tool_calls"] = bad
        reply = mock_server.request("POST", "/v1/chat/completions", json.dumps(body).encode())
        _is_json_400(reply, "messages[1].tool_calls is a", "must be a list of tool calls")
    assert mock_server.verdicts("tcnotlist")["tcnotlist"]["error"].startswith("messages[1].tool_calls")
    _no_tracebacks(caplog)


REPLACEMENTS = [5, "x", None, [], {}, [5], {"a": 1}, True, [[[]]], {"role": "user"}, 1.5]


def _paths(o, p=()):
    yield p
    if isinstance(o, dict):
        for k, v in o.items():
            yield from _paths(v, p + (k,))
    elif isinstance(o, list):
        for i, v in enumerate(o):
            yield from _paths(v, p + (i,))


def _set(o, path, value):
    if not path:
        return value
    o = copy.deepcopy(o)
    cur = o
    for k in path[:-1]:
        cur = cur[k]
    cur[path[-1]] = value
    return o


@pytest.mark.parametrize("dialect", sorted(PATHS))
def test_every_field_of_a_request_replaced_by_junk(mock_server, caplog, dialect: str) -> None:
    """Each node of a follow-up (a batch, a tool loop, a session turn) and of a
    first request swapped for each of a few junk values: 200 or a JSON 400."""
    caplog.set_level(logging.ERROR)
    bases = []
    for marker, nonce in (("!batch2", "fz1"), ("!loop2:1", "fz2"), (None, session_nonce("fz", "A", 2))):
        text = compose(marker, nonce)
        bases += [followup_body(dialect, build_plan(text), text, True), first_body(dialect, text, False)]
    seen = 0
    for base in bases:
        for path in _paths(base):
            for value in REPLACEMENTS:
                reply = mock_server.request("POST", PATHS[dialect], json.dumps(_set(base, path, value)).encode())
                seen += 1
                assert reply.status in (200, 400), (path, value, reply.status, reply.body[:200])
                if reply.status == 400:
                    assert reply.headers["content-type"].startswith("application/json"), (path, value)
    assert seen > 500
    _no_tracebacks(caplog)


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16", "utf-32-le"])
def test_bodies_in_other_json_encodings_are_read_as_before(mock_server, encoding: str) -> None:
    """The body goes to the JSON decoder as UTF-8 first (the fast path); one
    that is not plain UTF-8 is read as json.loads(bytes) reads it."""
    body = json.dumps(first_body("chat", compose(None, f"enc{encoding.replace('-', '')}"), False)).encode(encoding)
    reply = mock_server.request("POST", "/v1/chat/completions", body)
    assert reply.status == 200 and "plan=text ok" in reply.json()["choices"][0]["message"]["content"]
    bad = mock_server.request("POST", "/v1/chat/completions", b"\xff\xfe{")
    _is_json_400(bad, "not valid JSON")
