"""The LLM client: OpenAI chat completions over aiohttp, streamed.

Tool calls are accumulated by ``index`` the way robust clients (the openai SDK,
LangChain, ...) do: a fragment with an ``id``/``name`` starts or names the call
at its index, continuation fragments append to that call's arguments. The
``ignore-stream-index`` fault replaces this with the classic naive accumulator.

``--llm-timeout`` bounds the wait for the first byte (response headers) and
every idle gap while streaming; a stream that keeps trickling is not cut.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass, field
from typing import Any, Callable

import aiohttp

from .errors import LLMError, LLMTimeout

log = logging.getLogger("refkernel")

MAX_EVENT = 8 << 20  # bytes of one SSE event before the stream is declared malformed
MAX_ERROR_BODY = 64 * 1024


@dataclass
class ToolCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""

    def message(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None


class _Accumulator:
    """Robust: fragments are keyed by ``index``; a fragment that brings a new
    ``id`` starts a new call even at a used index (providers that send every
    call as index 0), and one without an index (another quirk) continues the
    last call unless it brings a new id."""

    def __init__(self) -> None:
        self._calls: list[ToolCall] = []  # in the order they started
        self._parts: list[list[str]] = []
        self._at: dict[int, int] = {}  # stream index -> position in _calls
        self._last: int | None = None

    def _new(self, index: int) -> int:
        self._calls.append(ToolCall(index=index))
        self._parts.append([])
        self._at[index] = len(self._calls) - 1
        return len(self._calls) - 1

    def add(self, frag: dict[str, Any]) -> None:
        fn = frag.get("function") if isinstance(frag.get("function"), dict) else {}
        fid = frag.get("id") if isinstance(frag.get("id"), str) and frag.get("id") else None
        idx = frag.get("index")
        if isinstance(idx, int) and not isinstance(idx, bool):
            pos = self._at.get(idx)
            if pos is None or (fid is not None and self._calls[pos].id not in ("", fid)):
                pos = self._new(idx)
        else:
            pos = self._last
            if pos is None or (fid is not None and self._calls[pos].id not in ("", fid)):
                pos = self._new(max(self._at, default=-1) + 1)
        call = self._calls[pos]
        if fid is not None and not call.id:
            call.id = fid
        name = fn.get("name")
        if isinstance(name, str) and name and not call.name:
            call.name = name  # providers that repeat the name must not make it "lookuplookup"
        args = fn.get("arguments")
        if isinstance(args, dict):
            args = json.dumps(args)
        if isinstance(args, str) and args:
            parts = self._parts[pos]
            if parts == ["{}"] and fid is None:
                parts.clear()  # a "{}" placeholder in the first fragment, the real arguments after it
            parts.append(args)
        self._last = pos

    def result(self) -> list[ToolCall]:
        out = []
        order = sorted(range(len(self._calls)), key=lambda p: (self._calls[p].index, p))
        for n, pos in enumerate(order):
            call = self._calls[pos]
            call.arguments = "".join(self._parts[pos])
            call.id = call.id or f"call_refkernel_{n}"
            out.append(call)
        return out


class _NaiveAccumulator:
    """The ``ignore-stream-index`` fault: one accumulator for the whole
    message. The first fragment names the call; every later fragment's
    arguments are glued on, whichever call they belong to."""

    def __init__(self) -> None:
        self.call: ToolCall | None = None
        self._parts: list[str] = []

    def add(self, frag: dict[str, Any]) -> None:
        fn = frag.get("function") if isinstance(frag.get("function"), dict) else {}
        if self.call is None:
            self.call = ToolCall(index=0, id=frag.get("id") or "call_refkernel_0", name=fn.get("name") or "")
        args = fn.get("arguments")
        if isinstance(args, str):
            self._parts.append(args)

    def result(self) -> list[ToolCall]:
        if self.call is None:
            return []
        self.call.arguments = "".join(self._parts)
        return [self.call]


def _error_message(body: bytes) -> str:
    try:
        obj = json.loads(body)
        err = obj.get("error") if isinstance(obj, dict) else None
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()
    return text[:500] or "(empty body)"


class LLMClient:
    def __init__(self, base_url: str, model: str, timeout: float, ignore_index: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.ignore_index = ignore_index
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

    # --- chat -----------------------------------------------------------------

    async def chat(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], on_delta: Callable[[str], None]
    ) -> Reply:
        assert self._session is not None, "LLMClient.start() was not called"
        body = {
            "model": self.model,
            "messages": messages,
            "tools": tools,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        url = self.base_url + "/chat/completions"
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.timeout) as deadline:
                async with self._session.post(url, json=body, headers={"Accept": "text/event-stream"}) as resp:
                    deadline.reschedule(loop.time() + self.timeout)
                    if resp.status != 200:
                        raw = await resp.content.read(MAX_ERROR_BODY)
                        raise LLMError(f"the LLM answered HTTP {resp.status}: {_error_message(raw)}")
                    if "text/event-stream" not in resp.headers.get("Content-Type", ""):
                        raw = await resp.read()
                        return self._whole(raw)
                    return await self._stream(resp, deadline, on_delta)
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

    def _whole(self, raw: bytes) -> Reply:
        try:
            obj = json.loads(raw)
            msg = obj["choices"][0]["message"]
        except (ValueError, KeyError, IndexError, TypeError):
            raise LLMError(f"the LLM sent an unreadable completion: {raw[:200]!r}") from None
        acc = _NaiveAccumulator() if self.ignore_index else _Accumulator()
        for n, tc in enumerate(msg.get("tool_calls") or []):
            if isinstance(tc, dict):
                acc.add({"index": n, **tc})
        return Reply(content=msg.get("content") or "", tool_calls=acc.result(), finish_reason=obj["choices"][0].get("finish_reason"))

    async def _stream(self, resp: aiohttp.ClientResponse, deadline: asyncio.Timeout, on_delta: Callable[[str], None]) -> Reply:
        loop = asyncio.get_running_loop()
        acc = _NaiveAccumulator() if self.ignore_index else _Accumulator()
        reply = Reply()
        content: list[str] = []
        buf = b""
        data: list[bytes] = []
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
                    continue  # event:, id:, retry: and comments carry nothing we use
                if not data:
                    continue
                payload, data = b"\n".join(data), []
                if payload == b"[DONE]":
                    done = True
                    break
                self._event(payload, acc, reply, content, on_delta)
        if not done and data:  # a last event without its blank line
            payload = b"\n".join(data)
            if payload == b"[DONE]":
                done = True
            else:
                self._event(payload, acc, reply, content, on_delta)
        if not done and reply.finish_reason is None:
            raise LLMError("the LLM stream ended before its finish_reason and [DONE]")
        reply.content = "".join(content)
        reply.tool_calls = acc.result()
        return reply

    @staticmethod
    def _event(payload: bytes, acc: Any, reply: Reply, content: list[str], on_delta: Callable[[str], None]) -> None:
        try:
            obj = json.loads(payload)
        except ValueError:
            raise LLMError(f"the LLM sent a malformed stream chunk: {payload[:200]!r}") from None
        if not isinstance(obj, dict):
            raise LLMError(f"the LLM sent a stream chunk that is not an object: {payload[:200]!r}")
        if obj.get("error") is not None:
            raise LLMError(f"the LLM reported an error mid-stream: {_error_message(payload)}")
        for choice in obj.get("choices") or ():
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") if isinstance(choice.get("delta"), dict) else {}
            text = delta.get("content")
            if isinstance(text, str) and text:
                content.append(text)
                on_delta(text)
            for frag in delta.get("tool_calls") or ():
                if isinstance(frag, dict):
                    acc.add(frag)
            if choice.get("finish_reason"):
                reply.finish_reason = choice["finish_reason"]
