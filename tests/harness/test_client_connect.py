"""The EAGAIN trap: a full listen backlog makes a non-blocking unix connect
fail with EAGAIN; the client retries with a deadline instead of handing back
an unconnected socket."""

import asyncio
import socket
import time

import pytest

from harness.wire.client import ConnError, open_unix
from waiting import await_until


async def test_full_backlog_is_retried_until_accepted(tmp_path):
    path = str(tmp_path / "s.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(0)
    filler = []
    try:
        # fill the backlog with connections nobody accepts
        for _ in range(64):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.setblocking(False)
            try:
                s.connect(path)
                filler.append(s)
            except BlockingIOError:
                s.close()
                break
        else:
            pytest.fail("backlog never filled")
        with pytest.raises(ConnError) as info:
            await open_unix(path, time.monotonic() + 0.3)
        assert info.value.kind == "backlog_full"

        retries: list[str] = []
        connecting = asyncio.create_task(open_unix(path, time.monotonic() + 5, on_retry=retries.append))
        # the client really retries: its attempts fail with EAGAIN on the
        # full backlog, and it keeps trying instead of giving up
        await await_until(lambda: len(retries) >= 2, 5, "two EAGAIN retries on the full backlog")
        assert set(retries) == {"backlog_full"} and not connecting.done()
        srv.setblocking(False)
        for _ in range(len(filler) + 2):
            try:
                srv.accept()[0].close()
            except BlockingIOError:
                break
        sock = await connecting
        # really connected: the peer address is the server's path
        assert sock.getpeername() == path
        sock.close()
    finally:
        for s in filler:
            s.close()
        srv.close()


async def test_missing_and_refused_sockets_are_named(tmp_path):
    with pytest.raises(ConnError) as info:
        await open_unix(str(tmp_path / "nope.sock"), time.monotonic() + 1)
    assert info.value.kind == "no_socket"
    path = tmp_path / "dead.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()  # a socket file with nobody listening
    with pytest.raises(ConnError) as info:
        await open_unix(str(path), time.monotonic() + 1)
    assert info.value.kind == "refused"
