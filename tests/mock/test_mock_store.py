"""The verdict store over HTTP (/_mock/verdicts): what it holds per nonce, its
bounds, its bad-input answers, and that an entry is there before the response
bytes that carry its news reach the client."""

from __future__ import annotations

import http.client
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from mock import fastpath
from mock.markers import build_plan, compose, text_verdict
from mock.store import QUERY_LIMIT
from mockhelpers import PATHS, first_body, followup_body

DIALECTS = list(PATHS)


def _post(m, dialect: str, body: dict) -> Any:
    reply = m.request("POST", PATHS[dialect], body)
    assert reply.status == 200, reply.body
    return reply


# --- what an entry holds ---------------------------------------------------------------


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_tool_turn_entry(start_mock, dialect: str, stream: bool) -> None:
    m = start_mock()
    text = compose("!batch2", f"s-{dialect}")
    plan = build_plan(text)
    t0 = time.monotonic()
    _post(m, dialect, first_body(dialect, text, stream))
    _post(m, dialect, followup_body(dialect, plan, text, stream))
    t1 = time.monotonic()
    entry = m.verdicts(plan.nonce)[plan.nonce]
    assert (entry["plan"], entry["marker"], entry["requests"], entry["verdicts"]) == ("batch", "!batch2", 2, 1)
    v = entry["verdict"]
    assert v["line"] == f"KST nonce={plan.nonce} plan=batch expected=2 got=2 ids=ok args=ok order=ok errors=0 tool_ms={v['tool_ms']}"
    assert (v["expected"], v["got"], v["ids"], v["args"], v["order"], v["errors"], v["all_ok"]) == (2, 2, True, True, True, 0, True)
    assert entry["text_verdict"] is None and entry["fault"] is None and entry["hung"] is False and entry["error"] is None
    first, follow = entry["records"]
    assert (first["followup"], follow["followup"]) == (False, True)
    assert {r["dialect"] for r in entry["records"]} == {dialect} and {r["stream"] for r in entry["records"]} == {stream}
    assert {r["status"] for r in entry["records"]} == {200}
    # one clock, the test's own: time.monotonic() (same process here; test_mock_cli checks another)
    for r in entry["records"]:
        assert t0 <= r["arrival"] <= r["first_byte"] <= r["last_byte"] <= t1
    assert first["last_byte"] == entry["tool_stream_end"] <= follow["arrival"]
    assert v["tool_ms"] == int((follow["arrival"] - entry["tool_stream_end"]) * 1000)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_text_fault_hang_and_refused_entries(start_mock, dialect: str) -> None:
    m = start_mock()
    _post(m, dialect, first_body(dialect, compose(None, "s-text"), True))
    m.request("POST", PATHS[dialect], first_body(dialect, compose("!err:429", "s-err"), False))
    _post(m, dialect, first_body(dialect, compose("!hang:10", "s-hang"), True))
    assert m.request("POST", PATHS[dialect], first_body(dialect, compose("!batch99", "s-bad"), True)).status == 400
    got = m.verdicts("s-text", "s-err", "s-hang", "s-bad", "s-never")
    assert got["s-never"] is None
    assert got["s-text"]["text_verdict"] == text_verdict("s-text") and got["s-text"]["plan"] == "text"
    assert got["s-err"]["fault"] == {"kind": "429", "injected": True} and got["s-err"]["records"][0]["status"] == 429
    assert got["s-hang"]["hung"] is True and got["s-hang"]["text_verdict"] == text_verdict("s-hang")
    assert "count 99 is out of range" in got["s-bad"]["error"] and got["s-bad"]["plan"] is None
    assert got["s-bad"]["records"][0]["status"] == 400


def test_post_answers_large_batches_and_keeps_the_asked_order(start_mock) -> None:
    m = start_mock()
    m.chat(compose("!batch1", "big-0"))
    nonces = [f"big-{k}" for k in range(QUERY_LIMIT)]
    reply = m.request("POST", "/_mock/verdicts", {"nonces": nonces})
    assert reply.status == 200
    verdicts = reply.json()["verdicts"]
    assert list(verdicts) == nonces and verdicts["big-0"]["plan"] == "batch"
    assert sum(v is not None for v in verdicts.values()) == 1


@pytest.mark.parametrize(
    ("method", "target", "body", "words"),
    [
        ("GET", "/_mock/verdicts", None, "no nonce given"),
        ("GET", "/_mock/verdicts?nonces=a", None, "unknown query parameter(s) ['nonces']"),
        ("POST", "/_mock/verdicts", b"{nope", "the body is not valid JSON"),
        ("POST", "/_mock/verdicts", {"nonce": ["a"]}, "a JSON object with a 'nonces' list"),
        ("POST", "/_mock/verdicts", {"nonces": "a"}, "a JSON object with a 'nonces' list"),
        ("POST", "/_mock/verdicts", {"nonces": []}, "'nonces' is empty"),
        ("POST", "/_mock/verdicts", {"nonces": ["a", 7]}, "nonces[1] is 7"),
        ("POST", "/_mock/verdicts", {"nonces": ["a", ""]}, "nonces[1] is ''"),
        ("POST", "/_mock/verdicts", {"nonces": ["n"] * (QUERY_LIMIT + 1)}, f"the limit is {QUERY_LIMIT}"),
    ],
)
def test_bad_queries_are_400s_naming_the_problem(mock_server, method: str, target: str, body: Any, words: str) -> None:
    reply = mock_server.request(method, target, body)
    assert reply.status == 400 and reply.headers["content-type"].startswith("application/json")
    assert words in reply.json()["error"]["message"]


def test_the_store_is_bounded_oldest_dropped_first(start_mock) -> None:
    m = start_mock(store_capacity=3)
    for k in range(5):
        m.chat(compose("!batch1", f"ev-{k}"))
    got = m.verdicts(*(f"ev-{k}" for k in range(5)))
    assert [k for k, v in got.items() if v is not None] == ["ev-2", "ev-3", "ev-4"]
    stats = m.stats()
    assert stats["nonces_tracked"] == 3 and stats["nonces_evicted"] == 2
    # an evicted nonce's follow-up is judged all the same, without a tool_ms
    plan = build_plan(compose("!batch1", "ev-0"))
    reply = m.request("POST", "/v1/chat/completions", followup_body("chat", plan, compose("!batch1", "ev-0"), False))
    assert "tool_ms=na" in reply.json()["choices"][0]["message"]["content"]


def test_records_per_nonce_are_bounded(start_mock) -> None:
    m = start_mock()
    text = compose(None, "rec")
    for _ in range(70):
        m.chat(text, stream=False)
    entry = m.verdicts("rec")["rec"]
    assert entry["requests"] == 70 and len(entry["records"]) == 64 and entry["records_dropped"] == 6


def test_reset_clears_the_store(start_mock) -> None:
    m = start_mock()
    m.chat(compose("!batch1", "rs"))
    assert m.stats()["nonces_tracked"] == 1 and m.verdicts("rs")["rs"] is not None
    m.reset()
    assert m.stats()["nonces_tracked"] == 0 and m.verdicts("rs")["rs"] is None


def test_the_log_carries_what_the_store_holds(start_mock, tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    m = start_mock(log_path=log)
    text = compose("!batch2", "lg")
    plan = build_plan(text)
    m.request("POST", "/v1/messages", first_body("anthropic", text, True))
    m.request("POST", "/v1/messages", followup_body("anthropic", plan, text, True))
    entry = m.verdicts("lg")["lg"]
    # line-buffered and written before the response: on disk now, mock still running
    first, follow = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert (first["dialect"], first["plan"], first["nonce"], first["followup"]) == ("anthropic", "batch", "lg", False)
    assert follow["verdict"] == entry["verdict"]["line"]
    assert follow["check"] == {k: v for k, v in entry["verdict"].items() if k != "line"}
    for line, rec in zip((first, follow), entry["records"]):
        assert (line["t_arrival"], line["t_first_byte"], line["t_last_byte"], line["status"]) == (
            rec["arrival"], rec["first_byte"], rec["last_byte"], rec["status"],
        )  # fmt: skip


# --- before the bytes: the ordering proofs ----------------------------------------------------


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_follow_up_is_in_the_store_before_its_first_byte_reaches_the_client(start_mock, dialect: str) -> None:
    """Paced, so the reply is still being written when its first byte arrives:
    the verdict is already queryable then, while the request's own record is
    not committed yet (it is committed right before the last byte)."""
    m = start_mock(chunk_delay_ms=50)
    text = compose("!batch2", f"ord-{dialect}")
    plan = build_plan(text)
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
    try:
        body = json.dumps(followup_body(dialect, plan, text, True))
        conn.request("POST", PATHS[dialect], body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.read(1)
        during = m.verdicts(plan.nonce)[plan.nonce]
        rest = resp.read()
    finally:
        conn.close()
    assert during is not None and during["verdict"]["all_ok"], during
    assert during["records"][-1]["last_byte"] is None and during["records"][-1]["status"] == 0, "the stream had not ended"
    assert rest.count(b"\n\n") >= 20, "most of the reply came after the query"
    after = m.verdicts(plan.nonce)[plan.nonce]
    assert after["records"][-1]["status"] == 200 and after["records"][-1]["last_byte"] is not None


@pytest.mark.parametrize("paced", [False, True], ids=["unpaced", "paced"])
@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_write_finds_the_entry_and_the_last_finds_the_log_line(
    start_mock, monkeypatch, tmp_path: Path, dialect: str, stream: bool, paced: bool
) -> None:
    """White-box at the one seam that matters: every write of response bytes
    is intercepted (on the mock's own loop) and looks at the store and the log
    at that instant."""
    log = tmp_path / "mock.jsonl"
    m = start_mock(log_path=log, chunk_delay_ms=20 if paced else 0)
    state = m._server.state  # noqa: SLF001 - the seam under test
    text = compose("!batch2", f"seam-{dialect}")
    plan = build_plan(text)
    seen: list[tuple[dict | None, int]] = []

    def look(data: bytes) -> None:
        if data:
            entry = state.store.query([plan.nonce])[plan.nonce]
            lines = log.read_text().count("\n") if log.exists() else 0
            seen.append((entry, lines))

    write, write_eof = web.StreamResponse.write, web.StreamResponse.write_eof

    async def spy_write(self, data):
        look(bytes(data))
        return await write(self, data)

    async def spy_eof(self, data=b""):
        look(bytes(data))
        return await write_eof(self, data)

    monkeypatch.setattr(web.StreamResponse, "write", spy_write)
    monkeypatch.setattr(web.StreamResponse, "write_eof", spy_eof)
    fast_write = fastpath._FastHandler._write_reply  # noqa: SLF001 - the fast path's one write

    def spy_fast(self, data):
        look(bytes(data))
        return fast_write(self, data)

    monkeypatch.setattr(fastpath._FastHandler, "_write_reply", spy_fast)

    for n_request, body in enumerate((first_body(dialect, text, stream), followup_body(dialect, plan, text, stream)), 1):
        seen.clear()
        _post(m, dialect, body)
        assert seen, "no write was intercepted"
        (first_entry, _), (last_entry, last_lines) = seen[0], seen[-1]
        # before the first byte: the entry and its news
        assert first_entry is not None and first_entry["requests"] == n_request
        if n_request == 2:
            assert first_entry["verdict"] is not None and first_entry["verdict"]["all_ok"]
        # before the last byte: the record committed and the log line on disk
        rec = last_entry["records"][-1]
        assert rec["status"] == 200 and rec["last_byte"] is not None, rec
        assert last_lines == n_request, f"the log had {last_lines} lines at the last write of request {n_request}"
        if n_request == 1:
            assert last_entry["tool_stream_end"] == rec["last_byte"]


def test_the_store_keeps_the_slow_tools_timestamps(mock_server):
    """A kernel that rewords the answer does not echo the KST lines: the
    harness judges the schedule by the stamps the mock saw in the results."""
    from mock.markers import build_plan

    plan = build_plan("!slowbatch2 #st1")
    results = [{"role": "tool", "tool_call_id": c.id, "content": f"KST-S st1 {c.index} {1000 + c.index}\nKST-E st1 {c.index} {5000 + c.index}\n"} for c in plan.calls]
    body = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "!slowbatch2 #st1"},
            {"role": "assistant", "content": None, "tool_calls": [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls]},
            *results,
        ],
    }
    assert mock_server.request("POST", "/v1/chat/completions", body).status == 200
    entry = json.loads(mock_server.request("GET", "/_mock/verdicts?nonce=st1").body)["verdicts"]["st1"]
    assert entry["stamps"] == {"0": [1000, 5000], "1": [1001, 5001]}
    assert entry["verdict"]["all_ok"]
