"""What a flooding kernel costs the harness, per connection (issue 22 item 14).

The kernel is a real process (tests/e2e/badkernels.py) on a unix socket; the
harness side is measured with tracemalloc in this process, so the figure is
the client's own allocations: reader buffers, the frames it keeps, the turn.
Before: a kernel answering with 512 KiB frames for ids nobody sent made the
client stash 256 of them (128 MiB a connection, the flood never named within
the turn's timeout); small deltas of the turn's own id were kept up to 16 Mi
characters (about 70 MiB); 512 KiB notify frames, 16 of them (8 MiB). Over
a WebSocket the frames are aiohttp's messages: the same bounds hold."""

from __future__ import annotations

import asyncio
import sys
import tracemalloc
from pathlib import Path

import pytest

from harness.wire.client import KernelClient
from waiting import await_until

pytestmark = pytest.mark.slow
BAD = Path(__file__).resolve().parents[1] / "e2e" / "badkernels.py"
CONNS = 2
PER_CONN_MAX = 8 << 20  # "a few MB at most": what docs/results.md promises, with room

# The modes of badkernels.py over a WebSocket at /k, on 127.0.0.1; prints its port.
WS_KERNEL = """
import asyncio, json, sys
from aiohttp import web
mode = sys.argv[1]
async def flood(request):
    ws = web.WebSocketResponse(max_msg_size=0)
    await ws.prepare(request)
    await ws.receive()
    await ws.send_str('{"type":"response","kind":"auth","ok":true,"protocol":1}')
    fid = json.loads((await ws.receive()).data)["id"]
    big, n = "s" * (512 << 10), 0
    try:
        while True:
            n += 1
            if mode == "flood-stray":
                await ws.send_str('{"type":"delta","id":"nobody-%d","text":"%s"}' % (n, big))
            elif mode == "flood-notes":
                await ws.send_str('{"type":"notify","text":"%s"}' % big)
            else:
                await ws.send_str(json.dumps({"type": "delta", "id": fid, "text": "z" * 16}))
    except ConnectionError:
        pass
    return ws
async def main():
    app = web.Application()
    app.router.add_get("/k", flood)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


async def _flooding_kernel(mode: str, transport: str, tmp: Path) -> tuple[asyncio.subprocess.Process, str]:
    if transport == "ws":
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", WS_KERNEL, mode, stdout=asyncio.subprocess.PIPE)
        assert proc.stdout is not None
        port = int(await asyncio.wait_for(proc.stdout.readline(), 20))
        return proc, f"ws://127.0.0.1:{port}/k"
    sock = tmp / "k.sock"
    proc = await asyncio.create_subprocess_exec(sys.executable, str(BAD), mode, "--socket", str(sock), stdout=asyncio.subprocess.DEVNULL)
    await await_until(lambda: sock.exists() or proc.returncode is not None, 20, "the flooding kernel's socket")
    assert proc.returncode is None, f"the flooding kernel exited {proc.returncode}"
    return proc, str(sock)


@pytest.mark.parametrize("transport", ["unix", "ws"])
@pytest.mark.parametrize("mode", ["flood-stray", "flood-answer", "flood-notes"])
async def test_a_flooding_connection_costs_a_few_mb_and_is_named(tmp_path, mode, transport):
    kernel, address = await _flooding_kernel(mode, transport, tmp_path)
    try:
        clients = [KernelClient(address, "tok", connect_timeout_s=10) for _ in range(CONNS)]
        for c in clients:
            await c.connect()  # outside the measure: the first WebSocket imports aiohttp
        tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            turns = await asyncio.gather(*(c.turn("", 30) for c in clients))
            peak = tracemalloc.get_traced_memory()[1] - base
        finally:
            tracemalloc.stop()
            for c in clients:
                await c.aclose()
    finally:
        kernel.terminate()
        await kernel.wait()
    assert [t.outcome for t in turns] == ["flood"] * CONNS, [(t.outcome, t.conn_error) for t in turns]
    assert peak / CONNS < PER_CONN_MAX, f"{mode} on {transport}: {peak / CONNS / 2**20:.1f} MiB a connection"
