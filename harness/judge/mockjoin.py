"""The mock's own record of each input, joined to each turn.

Many kernels reword, wrap or summarise the model's answer, so the verdict line
the mock put into its answer may never come back through the kernel. The mock
keeps it anyway, per nonce (mock/store.py, `/_mock/verdicts`); the harness asks
for it when a turn ends and judges the turn by it (harness/judge/verdict.py: a reply
that carries the line must agree with it).

Queries are batched: every nonce asked for in one turn of the event loop goes
out in one POST, so a run of many connections costs one small HTTP request per
batch over the sandbox's unix socket, not one per turn.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import json
from typing import Any


from ..errors import InfraError, KstressError, UsageError

QUERY_LIMIT = 10_000  # the mock's own limit per request
TIMEOUT_S = 10.0


def check_mock_address(addr: str, allow: tuple[str, ...] = ()) -> str:
    if addr.startswith("unix:") and len(addr) > 5:
        return addr
    if addr.startswith("http://127.") or addr.startswith("http://localhost") or addr.startswith("http://[::1]"):
        return addr.rstrip("/")
    if allow and urllib.parse.urlsplit(addr).scheme == "http" and urllib.parse.urlsplit(addr).hostname in allow:
        return addr.rstrip("/")  # off loopback, named on purpose with --allow-remote
    raise UsageError(f"--mock {addr!r}: give the mock's unix socket (unix:PATH) or a loopback URL (http://127.0.0.1:PORT); traffic stays on loopback")


class MockJoin:
    """``async with MockJoin("unix:/run/kst-x/mock.sock") as mj: entry = await mj.get(nonce)``"""

    def __init__(self, address: str) -> None:
        self.address = address
        self._session: Any = None  # an aiohttp.ClientSession once entered
        self._pending: dict[str, list[asyncio.Future]] = {}
        self._flushing = False
        self._tasks: set[asyncio.Task] = set()
        self.errors = 0
        self.last_error: str | None = None

    async def __aenter__(self) -> "MockJoin":
        import aiohttp  # here, not at the top: a usage error or --help need not load it (~0.4 s of CPU)

        if self.address.startswith("unix:"):
            connector: Any = aiohttp.UnixConnector(path=self.address[5:])
            self._base = "http://mock"
        else:
            connector = aiohttp.TCPConnector()
            self._base = self.address
        self._session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=TIMEOUT_S))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for t in list(self._tasks):
            t.cancel()
        for futs in self._pending.values():
            for f in futs:
                if not f.done():
                    f.set_result(None)
        self._pending.clear()
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    async def set_rate_limit(self, rate: float | None) -> None:
        """Set the mock's provider-wide rate limit to ``rate`` requests/s (a
        fresh token bucket, full), or lift it with None (issue 24 item 3:
        ``POST /_mock/rate_limit``). Returns once the mock answers: every
        request it reads after that is under the new limit.

        Raises UsageError when the mock refuses the value (400: above 0 and at
        most 1000000 is the rule; its message names the value and the fix),
        InfraError when the mock cannot be asked or answers anything else (a
        mock without the endpoint answers 404)."""
        import aiohttp  # loaded by __aenter__ already

        if self._session is None:
            raise KstressError("MockJoin.set_rate_limit called outside 'async with MockJoin(...)': no session to the mock")
        url = self._base + "/_mock/rate_limit"
        try:
            async with self._session.post(url, json={"rate": rate}) as r:
                text = await r.text()
                status = r.status
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError) as exc:
            raise InfraError(
                f"could not set the mock's rate limit to {rate!r} at {self.address} ({type(exc).__name__}: {exc}); "
                "check that the mock is still running"
            ) from None
        if status == 400:
            raise UsageError(f"the mock refused rate limit {rate!r}: {_message(text)}")
        if status != 200:
            raise InfraError(
                f"setting the mock's rate limit to {rate!r} at {self.address} got HTTP {status}: {_message(text)}; "
                "a mock without POST /_mock/rate_limit (older than issue 24) answers 404: run this kstress's mock"
            )
        try:
            got = json.loads(text).get("rate")
        except (ValueError, AttributeError):
            got = ...
        if got != rate:
            raise InfraError(f"the mock answered {text[:200]!r} to rate limit {rate!r}: it should echo {{\"rate\": {json.dumps(rate)}}}")

    async def get(self, nonce: str) -> dict[str, Any] | None:
        """The mock's entry for ``nonce``; ``{"nonce": nonce, "absent": True}``
        when the mock has provably never seen it (it answered null and has
        dropped no entry); None when that cannot be known (dropped entries, an
        old mock, or the mock could not be asked: ``errors`` counts those)."""
        fut = asyncio.get_running_loop().create_future()
        self._pending.setdefault(nonce, []).append(fut)
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await fut

    def _flush(self) -> None:
        self._flushing = False
        batch, self._pending = self._pending, {}
        nonces = list(batch)
        for k in range(0, len(nonces), QUERY_LIMIT):
            part = {n: batch[n] for n in nonces[k : k + QUERY_LIMIT]}
            t = asyncio.ensure_future(self._query(part))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _query(self, part: dict[str, list[asyncio.Future]]) -> None:
        import aiohttp  # loaded by __aenter__ already

        found: dict[str, Any] = {}
        complete = False  # a null answer means "never seen"
        try:
            assert self._session is not None
            async with self._session.post(self._base + "/_mock/verdicts", json={"nonces": list(part)}) as r:
                if r.status != 200:
                    raise aiohttp.ClientError(f"HTTP {r.status}: {(await r.text())[:200]}")
                body = await r.json()
                found = body.get("verdicts") or {}
                complete = body.get("evicted") == 0
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, ValueError, AssertionError) as exc:
            self.errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
        for nonce, futs in part.items():
            entry = found.get(nonce)
            if entry is None and complete and nonce in found:
                entry = {"nonce": nonce, "absent": True}
            for f in futs:
                if not f.done():
                    f.set_result(entry)


def _message(text: str) -> str:
    """An error body's message (the mock answers OpenAI's error shape), else its first 200 characters."""
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return text[:200]
