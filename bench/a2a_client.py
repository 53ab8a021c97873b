#!/usr/bin/env python3
"""The A2A driver's cost per turn through the agent client (issue 23 item 7,
A2A): ``HttpAgentClient`` + ``A2ADriver`` against a bare aiohttp client that
posts the same request and reads the same stream to its end, both through
one instant A2A server in this process (its card, and a canned fasta2a
stream of 24 events per message/stream: no LLM), same connections,
interleaved ABBA. The ratio bare/kstress of time per turn is the result
(issue's target >= 0.5).

    bench/a2a_client.py [--conns 4] [--turns 200] [--rounds 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp  # noqa: E402
from aiohttp import web  # noqa: E402

from a2a_parse import fasta2a  # noqa: E402
from harness.wire.agents import HttpAgentClient, agent_driver  # noqa: E402

ANSWER = ("KST nonce=abc123 plan=text expected=0 got=0 ids=ok args=ok order=ok errors=0 tool_ms=0\n" * 10)[:400]
STREAM = b"".join(fasta2a(ANSWER, True))


async def instant() -> tuple[web.AppRunner, str]:
    async def card(request: web.Request) -> web.Response:
        url = f"http://127.0.0.1:{request.url.port}/"
        return web.json_response({"name": "instant", "supportedInterfaces": [{"protocolBinding": "JSONRPC", "url": url, "protocolVersion": "1.0"}],
                                  "capabilities": {"streaming": True}})

    async def rpc(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body["method"] == "GetTask":
            return web.json_response({"jsonrpc": "2.0", "id": body["id"], "error": {"code": -32001, "message": "Task not found"}})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(STREAM)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    app.router.add_post("/", rpc)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/"


async def kstress(url: str, conns: int, turns: int) -> float:
    driver = agent_driver("a2a", url)

    async def one() -> None:
        async with HttpAgentClient(driver) as c:
            await c.prepare(10)
            for _ in range(turns):
                t = await c.turn("hello", 30)
                assert t.outcome == "response", (t.outcome, t.error_code, t.error_message)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conns)))
    return (time.perf_counter() - t0) / (conns * turns)


async def bare(url: str, conns: int, turns: int) -> float:
    body = b'{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"hello"}],"messageId":"m"}}}'
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream", "A2A-Version": "1.0"}

    async def one() -> None:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as s:
            for _ in range(turns):
                async with s.post(url, data=body, headers=headers) as r:
                    await r.read()

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(conns)))
    return (time.perf_counter() - t0) / (conns * turns)


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--turns", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    runner, url = await instant()
    try:
        ks, bs = [], []
        for _ in range(a.rounds):  # ABBA
            bs.append(await bare(url, a.conns, a.turns))
            ks.append(await kstress(url, a.conns, a.turns))
            ks.append(await kstress(url, a.conns, a.turns))
            bs.append(await bare(url, a.conns, a.turns))
        k, b = statistics.median(ks), statistics.median(bs)
        print(f"kstress {k * 1e3:.2f} ms/turn (runs {', '.join(f'{x * 1e3:.2f}' for x in ks)}); "
              f"bare {b * 1e3:.2f} ms/turn (runs {', '.join(f'{x * 1e3:.2f}' for x in bs)}); ratio bare/kstress {b / k:.2f}")
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    asyncio.run(main())
