"""The LLM client: one of three APIs (``--llm-api``) over aiohttp, streamed.

What differs between the APIs -- endpoint, headers, request body, how a reply
is accumulated -- is the dialect's (``refkernel/dialects``); this module is
what they share: the HTTP exchange, SSE framing, timeouts, the liveness probe,
and how a failure becomes an error code:

    llm_unreachable  no connection to --llm-url (and the probe is woken)
    llm_timeout      no first byte, or an idle gap, longer than --llm-timeout
    llm_error        everything else: any HTTP status but 200 (with the body's
                     message), an error event in the stream, a malformed
                     event, a stream that ends before the dialect's terminal
                     event, a connection lost mid-reply

``--llm-timeout`` bounds the wait for the first byte (response headers) and
every idle gap while streaming; a stream that keeps trickling is not cut.

Retries (``--llm-retries N``, default 0: one attempt, as always): a transient
failure -- HTTP 408, 429, 5xx (529 too), a connection refused, reset or lost
mid-body, a stream that ends before its terminal event, an llm_timeout -- is
tried again up to N times, after the wait ``_wait`` picks (Retry-After when
honoured, else --llm-backoff). Never retried: any other 4xx, an error event
inside a 200 stream (the openai and anthropic SDKs do not retry those either),
a malformed stream (the same request would get the same bytes). Only the LLM
request is retried: the tools of a step run once, after its reply is whole.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
import random
import time
from typing import Callable, Mapping, Sequence

import aiohttp

from .convo import Entry, Reply, ToolCall, ToolSpec
from .dialects import BY_NAME, Dialect, StreamParser
from .dialects.base import error_message
from .errors import LLMError, LLMTimeout
from .settings import BACKOFF_MAX_S, RETRY_AFTER_MAX_S

log = logging.getLogger("refkernel")

MAX_EVENT = 8 << 20  # bytes of one SSE event before the stream is declared malformed
MAX_ERROR_BODY = 64 * 1024

__all__ = ["LLMClient", "Reply", "ToolCall", "retry_after_seconds"]


def retry_after_seconds(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """What the LLM asked us to wait, in seconds, as the openai SDK reads it:
    ``retry-after-ms`` first, then ``Retry-After`` as seconds (floats allowed)
    or an HTTP date; None when absent or unreadable."""
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            delay = float(value)
        except ValueError:
            continue
        if math.isnan(delay) or delay < 0:
            continue
        return delay / divisor
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _retryable_status(status: int) -> bool:
    # 409 is left out although the openai SDK retries it: no LLM API uses it for a transient state
    return status in (408, 429) or status >= 500


class LLMClient:
    def __init__(self, base_url: str, model: str, timeout: float, ignore_index: bool = False, api: str = "chat",
                 api_key: str = "kstress", stream: bool = True, retries: int = 0, honour_retry_after: bool = False,
                 backoff: str = "exponential", backoff_ms: int = 500, faults: frozenset[str] = frozenset()) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.ignore_index = ignore_index
        self.dialect: Dialect = BY_NAME[api]
        self.api_key = api_key
        self.stream = stream
        self.retries = retries
        self.honour_retry_after = honour_retry_after
        self.backoff = backoff
        self.backoff_s = backoff_ms / 1000.0
        self.ignore_retry_after = "ignore-retry-after" in faults
        self.retry_storm = "retry-storm" in faults
        self.accept_truncated = "accept-truncated" in faults
        self._session: aiohttp.ClientSession | None = None
        self.state = "unknown"
        self._probe_task: asyncio.Task | None = None
        self._wake = asyncio.Event()

    async def start(self) -> None:
        # No total timeout here: --llm-timeout is enforced per read below.
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, force_close=False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.timeout),
        )
        await self.probe()
        self._probe_task = asyncio.ensure_future(self._probe_loop())

    async def aclose(self) -> None:
        if self._probe_task is not None:
            self._probe_task.cancel()
            await asyncio.gather(self._probe_task, return_exceptions=True)
            self._probe_task = None
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # --- liveness -------------------------------------------------------------

    async def probe(self) -> bool:
        """HEAD the base URL; 2xx/3xx means the LLM is reachable."""
        assert self._session is not None
        try:
            async with self._session.head(
                self.base_url, allow_redirects=False, timeout=aiohttp.ClientTimeout(total=min(5.0, self.timeout))
            ) as resp:
                ok = resp.status < 400
                why = f"HTTP {resp.status}"
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
            ok, why = False, f"{type(exc).__name__}: {exc}"
        new = "ok" if ok else "degraded"
        if new != self.state:
            log.log(logging.INFO if ok else logging.WARNING, "LLM %s is %s (HEAD: %s)", self.base_url, new, why)
        self.state = new
        return ok

    async def _probe_loop(self) -> None:
        delay = 0.25
        while True:
            if self.state == "ok":
                delay = 0.25
                try:
                    await asyncio.wait_for(self._wake.wait(), 30.0)
                except asyncio.TimeoutError:
                    pass
            else:
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            self._wake.clear()
            await self.probe()

    def _unreachable(self) -> None:
        self.state = "degraded"
        self._wake.set()

    # --- one request ---------------------------------------------------------

    async def ask(
        self, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], on_delta: Callable[[str], None]
    ) -> Reply:
        """The model's next reply to the conversation ``entries``; its text
        goes to ``on_delta`` as it arrives. A transient failure is retried
        up to ``retries`` times (none by default)."""
        attempts = 1 + (2 * self.retries + 2 if self.retry_storm else self.retries)
        if attempts == 1:
            return await self._attempt(system, entries, tools, on_delta)  # the default path, as it always was
        resend = _Resend(on_delta)
        for k in range(attempts):
            try:
                return await self._attempt(system, entries, tools, resend.attempt())
            except LLMError as exc:
                if not exc.retryable:
                    raise
                last = k == attempts - 1
                wait = None if last else self._wait(k, exc)
                if wait is None:
                    why = (f"; its Retry-After of {exc.retry_after:g} s is over the {RETRY_AFTER_MAX_S:g} s this kernel waits"
                           if not last else "")
                    raise LLMError(f"{exc} (attempt {k + 1} of {attempts}{why})", code=exc.code) from None
                log.info("LLM attempt %d of %d failed (%s): retrying in %.3f s", k + 1, attempts, exc, wait)
                if wait > 0:
                    await asyncio.sleep(wait)
        raise AssertionError("unreachable")

    def _wait(self, k: int, exc: LLMError) -> float | None:
        """Seconds to wait before retry k (0-based), or None to give up."""
        if self.retry_storm:
            return 0.0  # the fault: no wait, whatever the LLM said
        after = exc.retry_after
        if after is not None:
            if self.ignore_retry_after:
                return 0.0  # the fault: the header is read and thrown away
            if self.honour_retry_after:
                return after if after <= RETRY_AFTER_MAX_S else None
        if self.backoff == "none":
            return 0.0
        if self.backoff == "constant":
            return self.backoff_s
        # the openai SDK's _calculate_retry_timeout: BASE * 2^k, capped, less a random 0-25%
        return min(self.backoff_s * 2.0 ** min(k, 60), BACKOFF_MAX_S) * (1 - 0.25 * random.random())

    async def _attempt(
        self, system: str, entries: Sequence[Entry], tools: Sequence[ToolSpec], on_delta: Callable[[str], None]
    ) -> Reply:
        assert self._session is not None, "LLMClient.start() was not called"
        d = self.dialect
        body = d.request(self.model, system, entries, tools, self.stream)
        url = self.base_url + d.path
        headers = {"Accept": "text/event-stream" if self.stream else "application/json", **d.headers(self.api_key)}
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                async with self._session.post(url, json=body, headers=headers) as resp:
                    deadline.reschedule(loop.time() + self.timeout)
                    if resp.status != 200:
                        raw = await resp.content.read(MAX_ERROR_BODY)
                        raise LLMError(f"the LLM answered HTTP {resp.status}: {error_message(raw)}",
                                       retryable=_retryable_status(resp.status), retry_after=retry_after_seconds(resp.headers))
                    if "text/event-stream" not in resp.headers.get("Content-Type", ""):
                        # asked for a stream and got a whole reply (or asked for one): take it
                        raw = await resp.read()
                        try:
                            obj = json.loads(raw)
                        except ValueError:
                            raise LLMError(f"the LLM sent an unreadable reply: {raw[:200]!r}") from None
                        return d.whole(obj, on_delta, self.ignore_index)
                    return await self._stream(resp, deadline, d.parser(on_delta, self.ignore_index))
        except TimeoutError:
            raise LLMTimeout(
                f"the LLM sent nothing for {self.timeout:g} s (--llm-timeout) on {url}"
            ) from None
        except aiohttp.ClientConnectorError as exc:
            self._unreachable()
            raise LLMError(f"cannot reach the LLM at {url}: {exc.os_error}", code="llm_unreachable", retryable=True) from None
        except aiohttp.ClientPayloadError as exc:
            raise LLMError(f"the LLM stream broke off: {exc}", retryable=True) from None
        except (aiohttp.ClientError, OSError) as exc:
            raise LLMError(f"LLM request to {url} failed: {type(exc).__name__}: {exc}", retryable=True) from None

    async def _stream(self, resp: aiohttp.ClientResponse, deadline: asyncio.Timeout, parser: StreamParser) -> Reply:
        """SSE framing, the same for every dialect: an event is its ``event:``
        name (if any) and its ``data:`` lines, ended by a blank line."""
        loop = asyncio.get_running_loop()
        buf = b""
        data: list[bytes] = []
        event: str | None = None
        done = False
        while not done:
            try:
                chunk = await resp.content.readany()
            except aiohttp.ClientPayloadError:
                if not self.accept_truncated:
                    raise
                chunk = b""  # the fault: a connection lost mid-body is taken as the end of the answer
            deadline.reschedule(loop.time() + self.timeout)
            if not chunk:
                break
            buf += chunk
            if len(buf) > MAX_EVENT:
                raise LLMError(f"the LLM sent an SSE line longer than {MAX_EVENT} bytes")
            *lines, buf = buf.split(b"\n")
            for line in lines:
                line = line.rstrip(b"\r")
                if line:
                    if line.startswith(b"data:"):
                        data.append(line[5:].lstrip(b" "))
                    elif line.startswith(b"event:"):
                        event = line[6:].strip().decode("utf-8", "replace")
                    continue  # id:, retry: and comments carry nothing we use
                if not data:
                    event = None
                    continue
                payload, data = b"\n".join(data), []
                name, event = event, None
                if parser.feed(name, payload):
                    done = True
                    break
        if not done and data:  # a last event without its blank line
            done = parser.feed(event, b"\n".join(data))
        if not done and self.accept_truncated:
            parser.assume_complete()  # the fault: no terminal event, and the reply is taken as whole
        try:
            return parser.end()
        except LLMError as exc:
            exc.retryable = not done  # cut short (the server closed early) is transient; a bad whole stream is not
            raise


class _Resend:
    """The text of a retried attempt: the client already holds what earlier
    attempts streamed (protocol v1 cannot take a delta back), so the same
    text again is held back and only what goes beyond it is forwarded. A
    retry whose text differs from what was sent is forwarded whole."""

    def __init__(self, on_delta: Callable[[str], None]) -> None:
        self.on_delta = on_delta
        self.sent = ""

    def attempt(self) -> Callable[[str], None]:
        pos = 0
        diverged = False

        def forward(text: str) -> None:
            nonlocal pos, diverged
            end = pos + len(text)
            if not diverged and pos < len(self.sent):
                if self.sent.startswith(text, pos) or (end > len(self.sent) and text.startswith(self.sent[pos:])):
                    fresh = text[max(0, len(self.sent) - pos):]
                    pos = end
                    if fresh:
                        self.sent += fresh
                        self.on_delta(fresh)
                    return
                diverged = True
            pos = end
            self.sent += text
            self.on_delta(text)

        return forward
