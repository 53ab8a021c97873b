#!/usr/bin/env python3
"""The AG-UI driver's cost per turn (issue 23 item 7's AG-UI half), two ways:

1. end to end: ``HttpAgentClient`` with the AG-UI driver against a bare
   aiohttp client reading the same stream to its end, through one instant
   AG-UI server (in this process: a fixed 9-event run per POST, no LLM), the
   same connections (one keep-alive connection each), rounds interleaved
   ABBA; the ratio is bare time / ours (the issue's target: >= 0.5);
2. the parse alone: the driver's orjson per event against ag-ui-protocol's
   pydantic models (``TypeAdapter(Event).validate_json``), when ag_ui is
   importable -- why the driver does not use the package.

    bench/agui_client.py [--conns 4] [--turns 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from harness.wire.agents import HttpAgentClient, agent_driver  # noqa: E402

EVENTS = [
    b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}',
    b'{"type":"TEXT_MESSAGE_START","messageId":"m","role":"assistant"}',
    *[b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"KST nonce=x plan=text part of the answer"}'] * 5,
    b'{"type":"TEXT_MESSAGE_END","messageId":"m"}',
    b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"}',
]
STREAM = b"".join(b"data: " + e + b"\n\n" for e in EVENTS)
BODY = b'{"threadId":"t","runId":"r","messages":[{"id":"1","role":"user","content":"hello"}],"state":{},"tools":[],"context":[],"forwardedProps":{}}'


async def handler(request: web.Request) -> web.StreamResponse:
    await request.read()
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    await resp.write(STREAM)
    await resp.write_eof()
    return resp


async def ours(url: str, conns: int, turns: int) -> float:
    cs = [await HttpAgentClient(agent_driver("agui", url)).connect() for _ in range(conns)]

    async def loop(c: HttpAgentClient) -> None:
        for _ in range(turns):
            t = await c.turn("hello", 10)
            assert t.outcome == "response", (t.outcome, t.error_message, t.conn_error)

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(c) for c in cs))
    dt = time.perf_counter() - t0
    for c in cs:
        await c.aclose()
    return dt


async def bare(url: str, conns: int, turns: int) -> float:
    ss = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(conns)]
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}

    async def loop(s: aiohttp.ClientSession) -> None:
        for _ in range(turns):
            async with s.post(url, data=BODY, headers=headers) as resp:
                async for _line in resp.content:
                    pass

    t0 = time.perf_counter()
    await asyncio.gather(*(loop(s) for s in ss))
    dt = time.perf_counter() - t0
    for s in ss:
        await s.close()
    return dt


def parse_cost(n: int = 20000) -> None:
    t0 = time.perf_counter()
    for _ in range(n):
        for e in EVENTS:
            orjson.loads(e)
    ours_us = (time.perf_counter() - t0) / n * 1e6
    print(f"parse, orjson (the driver): {ours_us:.1f} us a turn of {len(EVENTS)} events")
    try:
        from ag_ui.core import Event
        from pydantic import TypeAdapter
    except ImportError:
        print("parse, ag-ui-protocol: not importable here (pip install ag-ui-protocol)")
        return
    ta = TypeAdapter(Event)
    t0 = time.perf_counter()
    for _ in range(n):
        for e in EVENTS:
            ta.validate_json(e)
    theirs_us = (time.perf_counter() - t0) / n * 1e6
    print(f"parse, ag-ui-protocol TypeAdapter(Event): {theirs_us:.1f} us a turn ({theirs_us / ours_us:.1f}x)")


async def main(a: argparse.Namespace) -> None:
    app = web.Application()
    app.router.add_post("/agui", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    url = f"http://127.0.0.1:{runner.addresses[0][1]}/agui"
    res: dict[str, list[float]] = {"ours": [], "bare": []}
    try:
        for rnd in range(a.rounds):
            order = [("ours", ours), ("bare", bare)]
            for name, f in order if rnd % 2 == 0 else order[::-1]:  # ABBA
                res[name].append(await f(url, a.conns, a.turns))
    finally:
        await runner.cleanup()
    n = a.conns * a.turns
    for k, v in res.items():
        print(f"{k}: " + ", ".join(f"{x * 1000 / n:.3f}" for x in v) + " ms a turn")
    print(f"ratio bare/ours (median): {statistics.median(res['bare']) / statistics.median(res['ours']):.2f} (target >= 0.5)")
    parse_cost()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    asyncio.run(main(ap.parse_args()))
