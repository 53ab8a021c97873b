"""MockJoin.set_rate_limit (issue 24 item 3): the harness sets and lifts the
mock's provider-wide rate limit at run time, over the mock's unix socket or a
loopback URL, and a mock that refuses or cannot be asked is a clear error.
A real MockServer; instant aiohttp servers play a mock that misbehaves."""

from __future__ import annotations

from pathlib import Path
from typing import Any, AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from harness.errors import InfraError, KstressError, UsageError
from harness.judge import MockJoin
from mock import MockServer, MockSettings

BODY = {"model": "kst-test", "messages": [{"role": "user", "content": "hi #mj{k}"}], "stream": True}


@pytest.fixture
async def mock(tmp_path: Path) -> AsyncIterator[MockServer]:
    async with MockServer(MockSettings(unix_path=tmp_path / "mock.sock")) as server:
        yield server


async def _statuses(m: MockServer, n: int, tag: str) -> list[int]:
    out = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        for k in range(n):
            body = dict(BODY, messages=[{"role": "user", "content": f"hi #{tag}{k}"}])
            async with s.post(m.url + "/v1/chat/completions", json=body) as r:
                await r.read()
                out.append(r.status)
    return out


@pytest.mark.parametrize("via", ["unix", "url"])
async def test_set_then_lift(mock, via: str) -> None:
    address = f"unix:{mock.settings.unix_path}" if via == "unix" else mock.url
    async with MockJoin(address) as mj:
        await mj.set_rate_limit(0.1)  # one token, the next in 10 s
        assert mock.state.bucket is not None and mock.state.bucket.rate == 0.1
        assert await _statuses(mock, 3, f"a{via}") == [200, 429, 429]
        await mj.set_rate_limit(None)
        assert mock.state.bucket is None
        assert await _statuses(mock, 4, f"b{via}") == [200] * 4


@pytest.mark.parametrize("rate", [0, -2.0, 2e6, float("nan"), float("inf")])
async def test_a_refused_value_is_a_usage_error_naming_it(mock, rate: float) -> None:
    async with MockJoin(mock.url) as mj:
        with pytest.raises(UsageError) as info:
            await mj.set_rate_limit(rate)
    msg = str(info.value)
    assert f"rate limit {rate!r}" in msg and "above 0 and at most 1000000" in msg, msg
    assert mock.state.bucket is None


async def _instant(handler: Any) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def _no_route(request: web.Request) -> web.Response:  # a mock older than the endpoint
    return web.json_response({"error": {"message": f"no route {request.method} {request.path}"}}, status=404)


async def _wrong_echo(request: web.Request) -> web.Response:  # says yes, set something else
    return web.json_response({"rate": None})


async def _broken(request: web.Request) -> web.Response:
    return web.Response(status=500, text="boom")


@pytest.mark.parametrize(
    ("handler", "named"),
    [(_no_route, "HTTP 404: no route POST /_mock/rate_limit"), (_wrong_echo, "it should echo"), (_broken, "HTTP 500: boom")],
    ids=["404", "wrong-echo", "500"],
)
async def test_a_misbehaving_mock_is_an_infra_error(handler: Any, named: str) -> None:
    runner, url = await _instant(handler)
    try:
        async with MockJoin(url) as mj:
            with pytest.raises(InfraError, match=named):
                await mj.set_rate_limit(5)
    finally:
        await runner.cleanup()


async def test_an_unreachable_mock_is_an_infra_error(tmp_path: Path) -> None:
    async with MockJoin(f"unix:{tmp_path / 'gone.sock'}") as mj:
        with pytest.raises(InfraError, match="could not set the mock's rate limit to 5 .*still running"):
            await mj.set_rate_limit(5)


async def test_outside_async_with_is_a_bug_named() -> None:
    with pytest.raises(KstressError, match="outside 'async with MockJoin"):
        await MockJoin("http://127.0.0.1:9").set_rate_limit(5)
