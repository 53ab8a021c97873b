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
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Callable, Sequence

import aiohttp

from .convo import Entry, Reply, ToolCall, ToolSpec
from .dialects import BY_NAME, Dialect, StreamParser
from .dialects.base import error_message
from .errors import LLMError, LLMTimeout

log = logging.getLogger("refkernel")

MAX_EVENT = 8 << 20  # bytes of one SSE event before the stream is declared malformed
MAX_ERROR_BODY = 64 * 1024

__all__ = ["LLMClient", "Reply", "ToolCall"]


class LLMClient:
    def __init__(self, base_url: str, model: str, timeout: float, ignore_index: bool = False, api: str = "chat",
                 api_key: str = "kstress", stream: bool = True) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.ignore_index = ignore_index
        self.dialect: Dialect = BY_NAME[api]
        self.api_key = api_key
        self.stream = stream
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
        goes to ``on_delta`` as it arrives."""
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
                        raise LLMError(f"the LLM answered HTTP {resp.status}: {error_message(raw)}")
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
            raise LLMError(f"cannot reach the LLM at {url}: {exc.os_error}", code="llm_unreachable") from None
        except aiohttp.ClientPayloadError as exc:
            raise LLMError(f"the LLM stream broke off: {exc}") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise LLMError(f"LLM request to {url} failed: {type(exc).__name__}: {exc}") from None

    async def _stream(self, resp: aiohttp.ClientResponse, deadline: asyncio.Timeout, parser: StreamParser) -> Reply:
        """SSE framing, the same for every dialect: an event is its ``event:``
        name (if any) and its ``data:`` lines, ended by a blank line."""
        loop = asyncio.get_running_loop()
        buf = b""
        data: list[bytes] = []
        event: str | None = None
        done = False
        while not done:
            chunk = await resp.content.readany()
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
            parser.feed(event, b"\n".join(data))
        return parser.end()
