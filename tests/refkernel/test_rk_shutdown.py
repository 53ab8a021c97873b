"""SIGTERM: stop accepting, end running and queued turns with an error frame,
kill resident children and the media worker, remove the socket, exit 0 --
and no process of the kernel's survives. SIGKILL: children die with it."""

from __future__ import annotations

import asyncio
import signal
import time

import psutil
import pytest

from rkhelpers import procs_in
from waiting import await_until
from rkclient import KernelConn, text_for


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_sigterm_graceful_shutdown(rk):
    k = await rk("--workers", "1")
    a, b, c = await k.connect(), await k.connect(), await k.connect()
    res = await b.turn(text_for("!resident")[0])
    assert res.verdict is not None and res.verdict.all_ok
    img = await b.turn(text_for("!img")[0])
    assert img.verdict is not None and img.verdict.errors == 1  # the media worker is up now
    ida = await a.input(text_for("!slowbatch2:5000")[0])
    await a.take(lambda f: f["type"] == "tool", 10, "A's tools to start")
    idc = await c.input(text_for(None)[0])

    async def c_queued() -> bool:
        return (await b.stats())["queued"] == 1

    await await_until(c_queued, 10, "C to be queued")
    s = await b.stats()
    assert s["children"] == 1 and len(s["residents"]) == 1
    kernel = psutil.Process(k.pid)
    family = [p.pid for p in kernel.children(recursive=True)]
    assert s["residents"][0]["pid"] in family
    assert len(family) >= 4, family  # resident, media worker, two cmd_run shells (and their sleeps)

    t0 = time.monotonic()
    k.proc.send_signal(signal.SIGTERM)
    turn_a, turn_c = await asyncio.gather(a.collect(ida, 15), c.collect(idc, 15))
    assert (turn_a.error_code, turn_c.error_code) == ("shutdown", "shutdown"), (turn_a.frames, turn_c.frames)
    rc = await asyncio.wait_for(k.proc.wait(), 15)
    elapsed = time.monotonic() - t0
    assert rc == 0, k.stderr()
    assert elapsed < 10, f"shutdown took {elapsed:.1f} s"
    assert not k.socket.exists()
    await a.closed()
    with pytest.raises((FileNotFoundError, ConnectionRefusedError)):
        await KernelConn.open(k.socket)
    # nothing of the kernel's is left: not its children, not what they forked
    survivors = [pid for pid in family if _alive(pid)]
    assert survivors == [], survivors
    assert procs_in(k.data_dir) == []


async def test_sigkill_of_the_kernel_takes_its_children_along(rk):
    k = await rk()
    conn = await k.connect()
    await conn.turn(text_for("!resident")[0])
    await conn.turn(text_for("!ocr")[0])
    family = [p.pid for p in psutil.Process(k.pid).children(recursive=True)]
    assert len(family) == 2, family  # the resident and the media worker
    k.proc.kill()  # no chance to clean up: PR_SET_PDEATHSIG does it
    await asyncio.wait_for(k.proc.wait(), 10)
    await await_until(lambda: not any(_alive(p) for p in family), 5, f"children {family} to die with the kernel")
