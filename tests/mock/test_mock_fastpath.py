"""The fast path (mock/fastpath.py _FastHandler): first streamed replies answered
from data_received, everything else by aiohttp's handler -- on one connection,
in order, with the same bytes."""

from __future__ import annotations

import http.client
import json
import socket

import pytest

from mock import fastpath
from mock.markers import build_plan, compose
from mockhelpers import PATHS, first_body, followup_body

DIALECTS = ["chat", "anthropic", "responses"]


def _fast_count(m) -> int:
    return m.stats().get("fast_path", 0)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_first_reply_fast_followup_through_aiohttp_on_one_connection(start_mock, dialect: str) -> None:
    m = start_mock()
    text = compose("!batch2", f"fast-{dialect}")
    plan = build_plan(text)
    conn = http.client.HTTPConnection("127.0.0.1", m.port, timeout=10)
    try:
        before = _fast_count(m)
        conn.request("POST", PATHS[dialect], body=json.dumps(first_body(dialect, text, True)), headers={"Content-Type": "application/json"})
        first = conn.getresponse()
        assert first.status == 200 and first.getheader("Transfer-Encoding") == "chunked"
        assert first.read().count(b"\n\n") >= 3
        assert _fast_count(m) == before + 1, "the first streamed request did not take the fast path"
        conn.request("POST", PATHS[dialect], body=json.dumps(followup_body(dialect, plan, text, True)), headers={"Content-Type": "application/json"})
        second = conn.getresponse()
        assert second.status == 200 and second.read().count(b"\n\n") >= 3
        assert _fast_count(m) == before + 1, "a follow-up is aiohttp's"
    finally:
        conn.close()
    entry = m.verdicts(plan.nonce)[plan.nonce]
    assert entry["requests"] == 2 and entry["verdict"]["all_ok"], entry


def test_same_headers_as_aiohttp(start_mock, monkeypatch) -> None:
    text = compose("!batch2", "hdrs")
    fast = start_mock().request("POST", PATHS["chat"], first_body("chat", text, True))
    monkeypatch.setattr(fastpath, "FAST_PATH", False)
    slow_mock = start_mock()
    slow = slow_mock.request("POST", PATHS["chat"], first_body("chat", text, True))
    assert _fast_count(slow_mock) == 0
    drop = {"date"}
    assert {k: v for k, v in fast.headers.items() if k not in drop} == {k: v for k, v in slow.headers.items() if k not in drop}
    assert fast.body.count(b"\n\n") == slow.body.count(b"\n\n")


def test_pipelined_behind_a_hang_stays_in_order(start_mock) -> None:
    """A fast-eligible request queued behind one aiohttp is still serving is
    answered after it: the fast path only answers on an idle connection."""
    m = start_mock()

    def req(text: str) -> bytes:
        body = json.dumps(first_body("chat", text, True)).encode()
        return b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    with socket.create_connection(("127.0.0.1", m.port), timeout=10) as s:
        s.sendall(req(compose("!hang:300", "pipeaaa1")) + req(compose(None, "pipebbb2")))
        data = b""
        while data.count(b"0\r\n\r\n") < 2:
            chunk = s.recv(65536)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
    a, b = data.find(b"pipeaaa1"), data.find(b"pipebbb2")
    assert 0 <= a < b, "the second reply overtook the first"


def test_a_body_in_a_later_write_is_held_then_answered_fast(start_mock) -> None:
    """httpx and http.client write the headers and the body apart: the fast
    path holds such a request until its body is whole, then answers it."""
    m = start_mock()
    text = compose("!batch2", "heldbody")
    body = json.dumps(first_body("chat", text, True)).encode()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    before = m.stats()
    with socket.create_connection(("127.0.0.1", m.port), timeout=10) as s:
        s.sendall(head + body[:20])
        # the stats request is read after the first write (it sat in the socket before the stats connection existed)
        held = m.stats()
        assert held.get("fast_path_held", 0) == before.get("fast_path_held", 0) + 1, held
        assert held.get("requests", 0) == before.get("requests", 0), "nothing is recorded of a held request"
        s.sendall(body[20:])
        data = b""
        while not data.endswith(b"0\r\n\r\n"):
            chunk = s.recv(65536)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
    assert data.startswith(b"HTTP/1.1 200 OK\r\n") and b"heldbody" in data
    assert m.stats().get("fast_path", 0) == before.get("fast_path", 0) + 1
