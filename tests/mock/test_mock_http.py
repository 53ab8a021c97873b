"""The mock's HTTP surface: endpoints, bad requests, the request log, --script,
--tools, pacing, and client disconnects."""

from __future__ import annotations

import http.client
import json
import logging
import socket
import time
from pathlib import Path

import openai
import pytest

from mock import ConfigError, load_catalog, load_script
from mock.markers import build_plan, compose, parse_verdict

# --- endpoints -------------------------------------------------------------------


def test_models(mock_server) -> None:
    reply = mock_server.request("GET", "/v1/models")
    assert reply.status == 200
    assert reply.json()["object"] == "list"
    assert [m["id"] for m in reply.json()["data"]] == ["kstress-mock"]


def test_models_through_the_sdk(client: openai.OpenAI) -> None:
    assert [m.id for m in client.models.list()] == ["kstress-mock"]


@pytest.mark.parametrize("method", ["HEAD", "GET"])
@pytest.mark.parametrize("path", ["/", "/v1", "/v1/", "/health"])
def test_liveness_probes_answer_200(mock_server, method: str, path: str) -> None:
    reply = mock_server.request(method, path)
    assert reply.status == 200
    if method == "GET":
        assert reply.json() == {"status": "ok", "service": "kstress-mock"}
    else:
        assert reply.body == b""


def test_unknown_route_is_an_openai_style_404(mock_server) -> None:
    reply = mock_server.request("GET", "/v1/nowhere")
    assert reply.status == 404
    message = reply.json()["error"]["message"]
    assert "no route GET /v1/nowhere" in message
    for endpoint in ("/v1/chat/completions", "/v1/messages", "/v1/responses"):
        assert f"POST {endpoint}" in message


def test_models_answers_both_vendors_shapes(mock_server) -> None:
    body = mock_server.request("GET", "/v1/models").json()
    (m,) = body["data"]
    assert {"id", "object", "created", "owned_by", "type", "display_name", "created_at"} <= set(m)
    assert body["has_more"] is False and body["first_id"] == body["last_id"] == "kstress-mock"
    assert mock_server.request("GET", "/v1/models/gpt-x").json()["id"] == "gpt-x"


def test_requests_stats_and_reset(start_mock) -> None:
    m = start_mock()
    m.chat(compose(None, "r1"))
    m.chat(compose("!batch2", "r2"), stream=False)
    m.chat(compose("!nosuch", "r3"))
    recent = m.request("GET", "/_mock/requests?n=2").json()["requests"]
    # a refused marker's request still names its nonce: the store tracks it too
    assert [(r.get("nonce"), r["status"]) for r in recent] == [("r2", 200), ("r3", 400)]
    assert recent[0]["plan"] == "batch" and recent[0]["stream"] is False and recent[0]["ms"] >= 0
    assert "unknown marker" in recent[1]["error"]
    assert len(m.request("GET", "/_mock/requests").json()["requests"]) == 3

    stats = m.stats()
    assert stats["requests"] == 3 and stats["bad_requests"] == 1
    assert stats["plans"] == {"text": 1, "batch": 1}
    assert stats["inflight"] == 0 and stats["hanging"] == 0 and stats["nonces_tracked"] == 3

    assert m.request("POST", "/_mock/reset").json() == {"reset": True}
    stats = m.stats()
    assert "requests" not in stats and stats["plans"] == {} and stats["nonces_tracked"] == 0
    assert m.request("GET", "/_mock/requests?n=5").json()["requests"] == []


@pytest.mark.parametrize("n", ["0", "1001", "x", "-1"])
def test_requests_rejects_a_bad_n(mock_server, n: str) -> None:
    reply = mock_server.request("GET", f"/_mock/requests?n={n}")
    assert reply.status == 400
    assert f"n={n!r} is invalid" in reply.json()["error"]["message"]


# --- bad requests ------------------------------------------------------------------

BAD = {
    "invalid_json": (b'{"messages": [', "the request body is not valid JSON"),
    "not_an_object": (b"[1, 2]", "must be a JSON object"),
    "no_messages": ({"model": "m"}, "'messages' is missing or empty"),
    "empty_messages": ({"model": "m", "messages": []}, "'messages' is missing or empty"),
    "no_user_message": ({"messages": [{"role": "system", "content": "x"}]}, "holds no user message"),
    "unknown_marker": ("hi !bogus #b1", "unknown marker '!bogus'"),
    "n_zero": ("hi !batch0 #b2", "count 0 is out of range"),
    "n_65": ("hi !batch65 #b3", "count 65 is out of range"),
    "two_markers": ("!batch2 and !slowbatch3 #b4", "holds 2 markers (!batch2, !slowbatch3)"),
    "unknown_quirk": ("!quirk:sideways #b5", "unknown quirk 'sideways'"),
    "unknown_err_kind": ("!err:418 #b6", "unknown fault '418'"),
    "missing_count": ("!batch #b7", "needs a count"),
    "bad_ms": ("!slowbatch2:fast #b8", "duration 'fast' must be whole milliseconds"),
    "mixed_one": ("!mixed1 #b9", "a mixed batch needs N >= 2"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_request_is_a_400_naming_the_problem(mock_server, case: str) -> None:
    body, words = BAD[case]
    if isinstance(body, str):
        body = {"model": "m", "messages": [{"role": "user", "content": body}], "stream": True}
    reply = mock_server.request("POST", "/v1/chat/completions", body)
    assert reply.status == 400
    assert reply.headers["content-type"].startswith("application/json")
    error = reply.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["type"] == "invalid_request_error"
    assert words in error["message"]


def test_bad_marker_through_the_sdk(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="count 65 is out of range") as info:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "!batch65 #sdk"}])
    assert info.value.code == "kstress_marker"


# --- client disconnects --------------------------------------------------------------


def _post_raw(port: int, body: dict) -> socket.socket:
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    return sock


def test_disconnect_mid_stream_is_counted_not_logged(start_mock, caplog: pytest.LogCaptureFixture) -> None:
    m = start_mock(chunk_delay_ms=50)
    caplog.set_level(logging.DEBUG)
    sock = _post_raw(m.port, {"model": "m", "stream": True, "messages": [{"role": "user", "content": "!batch8 #gone"}]})
    with sock:
        got = b""
        deadline = time.monotonic() + 5
        while b"call_gone_0" not in got:  # the stream has really started
            assert time.monotonic() < deadline, f"no stream within 5 s: {got!r}"
            got += sock.recv(65536)
    stats = m.wait_stats(lambda s: s.get("disconnects", 0) >= 1 and s["inflight"] == 0, "the disconnect to be counted")
    assert stats["disconnects"] == 1
    (rec,) = m.request("GET", "/_mock/requests?n=1").json()["requests"]
    assert rec["nonce"] == "gone" and (rec["status"] == 499 or rec.get("client_gone"))
    noisy = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert noisy == [], [f"{r.name}: {r.getMessage()}" for r in noisy]


# --- --log FILE -------------------------------------------------------------------------


def test_log_writes_one_json_line_per_request(start_mock, tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    m = start_mock(log_path=log)
    m.chat(compose(None, "l1"))
    m.chat(compose("!batch3", "l2"), stream=False)
    m.chat("!bogus #l3")
    m.request("GET", "/health")  # not a chat request: not logged
    m.close()  # the log is buffered; closing the mock flushes it
    lines = log.read_text().splitlines()
    recs = [json.loads(ln) for ln in lines]
    assert [(r.get("nonce"), r["status"], r["path"]) for r in recs] == [
        ("l1", 200, "/v1/chat/completions"),
        ("l2", 200, "/v1/chat/completions"),
        ("l3", 400, "/v1/chat/completions"),
    ]
    assert recs[1]["plan"] == "batch" and recs[1]["marker"] == "!batch3" and recs[1]["stream"] is False
    assert all({"ts", "ms", "status", "path"} <= set(r) for r in recs)


def test_log_to_an_unwritable_path_is_a_config_error(tmp_path: Path) -> None:
    from mock import MockServer, MockSettings
    import asyncio

    async def start() -> None:
        async with MockServer(MockSettings(log_path=tmp_path / "no" / "such" / "dir.jsonl")):
            pass

    with pytest.raises(ConfigError, match="cannot open it for appending"):
        asyncio.run(start())


# --- --script FILE ----------------------------------------------------------------------

SCRIPT = [
    {"text": "hello from the script"},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}, {"name": "cmd_run", "arguments": '{"command": "true"}'}]},
    {"error": {"status": 429, "message": "slow down"}},
]


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_script_cycles_text_tools_and_errors(start_mock, tmp_path: Path, fmt: str) -> None:
    path = tmp_path / f"script.{fmt}"
    if fmt == "json":
        path.write_text(json.dumps(SCRIPT, indent=2))
    else:
        path.write_text("\n".join(json.dumps(e) for e in SCRIPT) + "\n\n")
    m = start_mock(script=load_script(path))
    client = m.client()
    try:
        msgs = [{"role": "user", "content": "markers are ignored here !batch4 #s1"}]
        for _ in range(2):  # twice round: the script wraps
            with client.chat.completions.stream(model="m", messages=msgs) as s:
                first = s.get_final_completion().choices[0]
            assert first.message.content == "hello from the script" and first.finish_reason == "stop"

            second = client.chat.completions.create(model="m", messages=msgs).choices[0]
            assert second.finish_reason == "tool_calls"
            assert [(c.id, c.function.name, json.loads(c.function.arguments)) for c in second.message.tool_calls] == [
                ("call_script1_0", "lookup", {"key": "a"}),
                ("call_script1_1", "cmd_run", {"command": "true"}),
            ]
            with pytest.raises(openai.RateLimitError, match="slow down"):
                client.chat.completions.create(model="m", messages=msgs)
        # reset rewinds the script
        client.chat.completions.create(model="m", messages=msgs)
        m.reset()
        assert client.chat.completions.create(model="m", messages=msgs).choices[0].message.content == "hello from the script"
    finally:
        client.close()
    assert m.stats()["plans"] == {"script:text": 1}


# --- --tools FILE ---------------------------------------------------------------------

CATALOG_TOML = """
error_pattern = '(?i)^(error|failed)\\b'

[roles.fast]
name = "search_docs"
arguments = { q = "{nonce}-{i}", limit = 3 }
expect = ["{nonce}-{i}"]

[roles.slow]
name = "shell"
arguments = { cmd = "{sleep_cmd}", timeout_s = 30 }

[roles.writer]
name = "memory_write"
arguments = { key = "kst-{nonce}-{i}", value = "x" }
expect = ["stored"]
"""


def test_custom_catalog_renames_tools_and_the_verdict_works(start_mock, tmp_path: Path) -> None:
    path = tmp_path / "tools.toml"
    path.write_text(CATALOG_TOML)
    catalog = load_catalog(path)
    m = start_mock(catalog=catalog)
    client = m.client()
    try:
        text = compose("!serialbatch2:20", "cat1")
        plan = build_plan(text, catalog, tool_ms=200)
        messages = [{"role": "user", "content": text}]
        with client.chat.completions.stream(model="m", messages=messages) as s:
            calls = s.get_final_completion().choices[0].message.tool_calls
        assert [c.function.name for c in calls] == ["shell", "shell", "memory_write"]
        assert [c.function.arguments for c in calls] == [c.arguments for c in plan.calls]
        assert json.loads(calls[2].function.arguments) == {"key": "kst-cat1-2", "value": "x"}
        assert json.loads(calls[0].function.arguments)["timeout_s"] == 30

        messages.append(
            {"role": "assistant", "tool_calls": [{"id": c.id, "type": "function", "function": c.function.model_dump()} for c in calls]}
        )
        ns = time.time_ns()
        results = [f"KST-S cat1 {i} {ns}\nKST-E cat1 {i} {ns + 20_000_000}\n" for i in range(2)] + ["stored kst-cat1-2"]
        ok = messages + [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results)]
        line = parse_verdict(client.chat.completions.create(model="m", messages=ok).choices[0].message.content)
        assert line is not None and line.all_ok and line.errors == 0 and line.plan == "serialbatch"

        # the catalog's own error pattern and expect list decide what an error is
        results[2] = "failed: disk full"
        bad = messages + [{"role": "tool", "tool_call_id": c.id, "content": r} for c, r in zip(calls, results)]
        line = parse_verdict(client.chat.completions.create(model="m", messages=bad).choices[0].message.content)
        assert line is not None and line.errors == 1 and line.args
    finally:
        client.close()


# --- pacing ---------------------------------------------------------------------------


def _timed_stream(port: int, text: str) -> tuple[float, float, bytes]:
    """(seconds to the first body byte, seconds to the end, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        body = json.dumps({"model": "kst-test", "stream": True, "messages": [{"role": "user", "content": text}]})
        t0 = time.monotonic()
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        first = resp.read(1)
        t_first = time.monotonic() - t0
        rest = resp.read()
        return t_first, time.monotonic() - t0, first + rest
    finally:
        conn.close()


def _strip_ids(raw: bytes, parse_sse) -> list[dict]:
    out = []
    for _, data in parse_sse(raw):
        if data != "[DONE]":
            obj = json.loads(data)
            obj.pop("id"), obj.pop("created")
            out.append(obj)
    return out


def test_ttft_delays_the_first_byte(start_mock) -> None:
    m = start_mock(ttft_ms=300)
    t_first, _, body = _timed_stream(m.port, compose("!batch2", "ttft"))
    assert t_first >= 0.3
    assert b"call_ttft_1" in body


def test_chunk_delay_paces_the_stream_without_changing_it(start_mock, mock_server, parse_sse) -> None:
    m = start_mock(chunk_delay_ms=20)
    text = compose(None, "paced")
    _, total, body = _timed_stream(m.port, text)
    # role + 20 text pieces + finish + [DONE]: 23 events, 22 gaps
    assert body.count(b"data: ") == 23
    assert total >= 22 * 0.020
    unpaced = mock_server.chat(text).body
    assert _strip_ids(body, parse_sse) == _strip_ids(unpaced, parse_sse)


def test_text_chunks_setting(start_mock) -> None:
    m = start_mock(text_chunks=5)
    chunks = m.chat(compose(None, "five")).chunks()
    assert len(chunks) == 1 + 5 + 1


# --- the templated hot path gives the same bytes as the general path ------------------

SHAPE_TEXTS = [
    "plain text #t1",
    "!batch1 #n",
    "run !batch4 now #abcdefgh",
    "!batch64 #Z9_-long-nonce-0123456789",
    "!mixed5 #mx1",
    "!slowbatch3:40 #s-1",
    "!serialbatch2:30:0 #sb",
    "!img #i1",
    "!ocr #o1",
    "!resident #r1",
    "!notify #nt",
]


def _normalised(raw: bytes) -> bytes:
    import re

    return re.sub(rb'"created":\d+', b'"created":0', re.sub(rb"chatcmpl-[0-9a-f]{24}", b"chatcmpl-X", raw))


@pytest.mark.parametrize("include_usage", [False, True], ids=["plain", "usage"])
def test_templated_replies_equal_the_general_path(start_mock, include_usage: bool) -> None:
    fast = start_mock()  # unpaced: first streamed replies come from the per-shape template
    general = start_mock(chunk_delay_ms=1)  # paced: always rendered the general way
    for text in SHAPE_TEXTS:
        a = fast.chat(text, include_usage=include_usage)
        b = general.chat(text, include_usage=include_usage)
        assert a.status == b.status == 200
        assert _normalised(a.body) == _normalised(b.body), text
    # a second nonce of the same length reuses the shape; the first built it
    cached = fast.stats()["shapes_cached"]
    assert cached == len(SHAPE_TEXTS)
    assert _normalised(fast.chat("run !batch4 now #zyxwvuts").body) == _normalised(general.chat("run !batch4 now #zyxwvuts").body)
    assert fast.stats()["shapes_cached"] == cached
    assert general.stats()["shapes_cached"] == 0



def _normalised_dialect(raw: bytes) -> bytes:
    import re

    raw = re.sub(rb"(msg|resp)_[0-9a-f]{24}", rb"\1_X", raw)
    return re.sub(rb'"created_at":\d+', b'"created_at":0', raw)


@pytest.mark.parametrize("dialect", ["anthropic", "responses"])
def test_templated_replies_equal_the_general_path_on_the_other_dialects(start_mock, dialect: str) -> None:
    from mockhelpers import PATHS, first_body

    fast = start_mock()
    general = start_mock(chunk_delay_ms=1)
    for text in SHAPE_TEXTS:
        a = fast.request("POST", PATHS[dialect], first_body(dialect, text, True))
        b = general.request("POST", PATHS[dialect], first_body(dialect, text, True))
        assert a.status == b.status == 200
        assert _normalised_dialect(a.body) == _normalised_dialect(b.body), text
    assert fast.stats()["shapes_cached"] == len(SHAPE_TEXTS)
    assert general.stats()["shapes_cached"] == 0
    # the frames around the items (message_start; the response object) are cached per model and size with a
    # stand-in for the id: another setting, and a model whose name holds the stand-in, come out as the general
    # path writes them
    for extra in ({"parallel_tool_calls": False}, {"model": "resp_\x00 model"}, {"model": "msg_\x00 model"}):
        body = {**first_body(dialect, "!batch4 #pq1", True), **extra}
        a, b = fast.request("POST", PATHS[dialect], body), general.request("POST", PATHS[dialect], body)
        assert a.status == b.status == 200 and _normalised_dialect(a.body) == _normalised_dialect(b.body), extra
