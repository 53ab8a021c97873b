"""Fixtures for the mock LLM's integration tests.

The mock runs as a real ``MockServer`` bound to 127.0.0.1 port 0, on its own
event loop in a background thread: sync tests (the openai SDK's sync client)
and async tests (their own pytest-asyncio loop) then talk to it over real
sockets alike, and one server can serve a whole module. Everything a test
checks is read back over HTTP (``/_mock/stats``), never from the server's
objects, so the tests stay black-box.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import threading
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator

import aiohttp
import anthropic
import openai
import pytest

from mock import MockServer, MockSettings
from mock.markers import Plan

START_TIMEOUT_S = 10.0


@dataclass(frozen=True)
class RawReply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[tuple[str | None, str]]:
        return sse_events(self.body)

    def chunks(self) -> list[dict[str, Any]]:
        """The JSON objects of a stream's data events ([DONE] left out)."""
        return [json.loads(data) for _, data in self.events() if data != "[DONE]"]


def sse_events(raw: bytes) -> list[tuple[str | None, str]]:
    """Split an SSE body into (event name, data) pairs, strictly: every event
    must end with a blank line and hold exactly one data line."""
    text = raw.decode()
    assert text.endswith("\n\n") or not text, f"stream does not end with a blank line: {text[-80:]!r}"
    out: list[tuple[str | None, str]] = []
    for block in text.split("\n\n")[:-1]:
        event, data = None, None
        for line in block.split("\n"):
            field, _, value = line.partition(": ")
            if field == "event":
                event = value
            elif field == "data":
                assert data is None, f"two data lines in one event: {block!r}"
                data = value
            else:
                raise AssertionError(f"unexpected SSE line {line!r} in {block!r}")
        assert data is not None, f"event without data: {block!r}"
        out.append((event, data))
    return out


def chat_body(text: str, stream: bool = True, include_usage: bool = False, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "kst-test", "messages": [{"role": "user", "content": text}], "stream": stream}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    body.update(extra)
    return body


class MockThread:
    """A MockServer on a private event loop in a daemon thread. ``close()`` is
    idempotent and runs on every path (the fixtures use it as a context manager)."""

    def __init__(self, settings: MockSettings | None = None) -> None:
        self.settings = settings or MockSettings()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mock-loop", daemon=True)
        self._server: MockServer | None = None
        self._closed = False

    def start(self) -> "MockThread":
        self._thread.start()
        server = MockServer(self.settings)
        try:
            asyncio.run_coroutine_threadsafe(server.start(), self._loop).result(START_TIMEOUT_S)
        except BaseException:
            self.close()
            raise
        self._server = server
        return self

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._server is not None and self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(self._server.aclose(), self._loop).result(START_TIMEOUT_S)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(START_TIMEOUT_S)
            assert not self._thread.is_alive(), "the mock's event loop did not stop within 10 s"
        self._loop.close()

    def __enter__(self) -> "MockThread":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- talking to it --------------------------------------------------------

    @property
    def url(self) -> str:
        assert self._server is not None
        return self._server.url

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def request(self, method: str, path: str, body: bytes | dict | None = None, timeout: float = 10.0) -> RawReply:
        if isinstance(body, dict):
            body = json.dumps(body).encode()
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            resp = conn.getresponse()
            data = resp.read()
            return RawReply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
        finally:
            conn.close()

    def chat(self, text: str, **kw: Any) -> RawReply:
        return self.request("POST", "/v1/chat/completions", chat_body(text, **kw))

    def messages(self, text: str, stream: bool = True, **extra: Any) -> RawReply:
        body = {"model": "kst-test", "max_tokens": 1024, "messages": [{"role": "user", "content": text}], "stream": stream, **extra}
        return self.request("POST", "/v1/messages", body)

    def responses(self, text: str, stream: bool = True, **extra: Any) -> RawReply:
        body = {"model": "kst-test", "input": [{"role": "user", "content": text}], "stream": stream, **extra}
        return self.request("POST", "/v1/responses", body)

    def verdicts(self, *nonces: str) -> dict[str, Any]:
        """The store's entries for these nonces, through GET /_mock/verdicts."""
        from urllib.parse import urlencode

        reply = self.request("GET", "/_mock/verdicts?" + urlencode([("nonce", n) for n in nonces]))
        assert reply.status == 200, reply.body
        return reply.json()["verdicts"]

    def stats(self) -> dict[str, Any]:
        reply = self.request("GET", "/_mock/stats")
        assert reply.status == 200, reply.body
        return reply.json()

    def reset(self) -> None:
        assert self.request("POST", "/_mock/reset").status == 200

    def client(self, **kw: Any) -> openai.OpenAI:
        kw.setdefault("timeout", 10.0)
        return openai.OpenAI(base_url=self.url + "/v1", api_key="kst-test", max_retries=0, **kw)

    def async_client(self, **kw: Any) -> openai.AsyncOpenAI:
        kw.setdefault("timeout", 10.0)
        return openai.AsyncOpenAI(base_url=self.url + "/v1", api_key="kst-test", max_retries=0, **kw)

    def anthropic_client(self, **kw: Any) -> anthropic.Anthropic:
        kw.setdefault("timeout", 10.0)
        return anthropic.Anthropic(base_url=self.url, api_key="kst-test", max_retries=0, **kw)

    def wait_stats(self, cond: Callable[[dict[str, Any]], bool], what: str, timeout: float = 5.0) -> dict[str, Any]:
        """Poll /_mock/stats until ``cond`` holds; fail by name after ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            stats = self.stats()
            if cond(stats):
                return stats
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {what}; last stats: {stats}")
            time.sleep(0.02)


def assert_calls_match(tool_calls: Any, plan: Plan) -> None:
    """The SDK's tool calls are exactly the plan's: same count, order, ids,
    names, and arguments byte for byte (and they parse as JSON)."""
    assert tool_calls is not None, "the SDK yielded no tool calls"
    got = [(c.id, c.type, c.function.name, c.function.arguments) for c in tool_calls]
    want = [(c.id, "function", c.name, c.arguments) for c in plan.calls]
    assert got == want
    for c, p in zip(tool_calls, plan.calls):
        assert json.loads(c.function.arguments) == json.loads(p.arguments)


@pytest.fixture(scope="session")
def parse_sse() -> Callable[[bytes], list[tuple[str | None, str]]]:
    return sse_events


@pytest.fixture(scope="session")
def calls_match() -> Callable[[Any, Plan], None]:
    return assert_calls_match


@pytest.fixture(scope="module")
def mock_server() -> Iterator[MockThread]:
    """One default mock per test module."""
    with MockThread() as m:
        yield m


@pytest.fixture(scope="module")
def client(mock_server: MockThread) -> Iterator[openai.OpenAI]:
    c = mock_server.client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture(scope="module")
def anthropic_client(mock_server: MockThread) -> Iterator[anthropic.Anthropic]:
    c = mock_server.anthropic_client()
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def start_mock() -> Iterator[Callable[..., MockThread]]:
    """Start a mock with custom settings for one test; all are closed after it."""
    with contextlib.ExitStack() as stack:

        def start(**settings: Any) -> MockThread:
            return stack.enter_context(MockThread(MockSettings(**settings)))

        yield start


# a MockServer on the test's own event loop (async tests), and an aiohttp
# session to talk to it: the fault schedules' and the run-time rate limit's tests
@pytest.fixture
async def mock() -> AsyncIterator[MockServer]:
    async with MockServer(MockSettings()) as server:
        yield server


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as s:
        yield s

