"""The provider-wide rate limit set at run time (issue 24 item 3): POST
/_mock/rate_limit {"rate": N} puts a fresh token bucket in front of every
request, {"rate": null} lifts it, GET reads it. A real aiohttp client against
MockServer on loopback, as test_mock_schedules.py's --rate-limit tests."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from mock import MockServer, MockSettings
from mock.markers import DIALECTS, compose

from mockhelpers import PATHS, first_body

RATE = 0.1  # one token, the next in 10 s: the test's requests come far sooner


async def _post(s: aiohttp.ClientSession, m: MockServer, dialect: str, nonce: str) -> tuple[int, Any, bytes]:
    # streamed text: the shape the fast path answers when no limit is set
    async with s.post(m.url + PATHS[dialect], json=first_body(dialect, compose(None, nonce), True)) as r:
        return r.status, r.headers, await r.read()


async def _set(s: aiohttp.ClientSession, m: MockServer, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with s.post(m.url + "/_mock/rate_limit", data=data, headers={"Content-Type": "application/json"}) as r:
        return r.status, await r.json()


async def _get(s: aiohttp.ClientSession, m: MockServer) -> Any:
    async with s.get(m.url + "/_mock/rate_limit") as r:
        assert r.status == 200
        return (await r.json())["rate"]


async def _stats(s: aiohttp.ClientSession, m: MockServer) -> dict[str, Any]:
    async with s.get(m.url + "/_mock/stats") as r:
        return await r.json()


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_set_limits_then_clear_lifts(mock, session, dialect: str) -> None:
    assert await _get(session, mock) is None
    assert await _set(session, mock, {"rate": RATE}) == (200, {"rate": RATE})
    assert await _get(session, mock) == RATE
    status, _, _ = await _post(session, mock, dialect, "rt1")
    assert status == 200  # the bucket's one token
    for k in (2, 3):
        status, headers, body = await _post(session, mock, dialect, f"rt{k}")
        assert status == 429, body[:200]
        ms = int(headers["retry-after-ms"])
        assert 0 < ms <= 1000 / RATE
        assert b"/_mock/rate_limit" in body  # the message says where the limit came from
    assert (await _stats(session, mock))["rate_limited"] == 2

    assert await _set(session, mock, {"rate": None}) == (200, {"rate": None})
    assert await _get(session, mock) is None
    fast = (await _stats(session, mock)).get("fast_path", 0)
    for k in range(4, 9):
        status, _, body = await _post(session, mock, dialect, f"rt{k}")
        assert status == 200, body[:200]
    stats = await _stats(session, mock)
    assert stats["rate_limited"] == 2
    # lifted, the fast path answers again: the limit costs nothing once gone
    assert stats.get("fast_path", 0) > fast


async def test_a_start_up_limit_can_be_lifted(session) -> None:
    async with MockServer(MockSettings(rate_limit=RATE)) as m:
        assert await _get(session, m) == RATE
        assert (await _post(session, m, "chat", "su1"))[0] == 200
        assert (await _post(session, m, "chat", "su2"))[0] == 429
        assert await _set(session, m, {"rate": None}) == (200, {"rate": None})
        for k in range(3, 7):
            assert (await _post(session, m, "chat", f"su{k}"))[0] == 200
        # the fast path was there all along, idle while the limit held
        assert (await _stats(session, m)).get("fast_path", 0) > 0


async def test_each_set_is_a_fresh_full_bucket(mock, session) -> None:
    assert (await _set(session, mock, {"rate": RATE}))[0] == 200
    assert (await _post(session, mock, "chat", "fb1"))[0] == 200
    assert (await _post(session, mock, "chat", "fb2"))[0] == 429
    # a new rate (here the same) starts full, not from the old bucket's debt
    assert (await _set(session, mock, {"rate": 3}))[1] == {"rate": 3.0}
    statuses = [(await _post(session, mock, "chat", f"fb{k}"))[0] for k in range(3, 7)]
    # 3 tokens, and by the 4th request at most a sliver of one more: 3 pass
    # (a 4th only if the loaded machine took a third of a second over them)
    assert statuses[:3] == [200, 200, 200]


async def test_reset_keeps_the_limit(mock, session) -> None:
    assert (await _set(session, mock, {"rate": RATE}))[0] == 200
    async with session.post(mock.url + "/_mock/reset") as r:
        assert r.status == 200
    assert await _get(session, mock) == RATE


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"rate": 0}, "rate=0 is invalid"),
        ({"rate": -1}, "rate=-1 is invalid"),
        ({"rate": 1e7}, "rate=10000000.0 is invalid"),
        ({"rate": "5/s"}, 'rate="5/s" is invalid'),
        ({"rate": True}, "rate=true is invalid"),
        ({"rate": [5]}, "rate=[5] is invalid"),
        (b'{"rate": NaN}', "rate=NaN is invalid"),
        (b'{"rate": Infinity}', "rate=Infinity is invalid"),
        ({}, "the body is {}"),
        ({"rate": 5, "burst": 2}, "the one key 'rate'"),
        ([5], "the body is [5]"),
        (b"fast please", "not valid JSON"),
        (b"[" * 100_000, "nests too deeply"),
    ],
    ids=["zero", "negative", "too-high", "string", "bool", "list", "nan", "inf", "no-key", "extra-key", "not-object", "not-json", "deep"],
)
async def test_bad_values_are_400_naming_value_rule_and_fix(mock, session, body: Any, named: str) -> None:
    assert (await _set(session, mock, {"rate": RATE}))[0] == 200
    status, answer = await _set(session, mock, body)
    msg = answer["error"]["message"]
    assert status == 400 and named in msg, msg
    assert "above 0 and at most 1000000" in msg and '{"rate": null} for no limit' in msg
    assert await _get(session, mock) == RATE  # a refused value changes nothing
