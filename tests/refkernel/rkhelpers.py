"""Helpers for the reference kernel's tests: the real kernel as a subprocess
on a real socket (unix by default; tcp or ws with ``listen=``), and
deadline-bounded waits.

Every kernel started here is stopped with SIGTERM at teardown, and then the
fixture looks for any process still working in the kernel's data directory
(where tools and resident children run): one found is killed and fails the
test, so "no process survives the kernel" is checked by every test.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from mock import MockServer

from rkclient import KernelConn

TOKEN = "tok"


def procs_in(path: Path) -> list[psutil.Process]:
    """Processes whose working directory is ``path`` (or below it)."""
    found = []
    root = str(path)
    for p in psutil.process_iter(["cwd"]):
        cwd = p.info.get("cwd")
        if cwd and (cwd == root or cwd.startswith(root + os.sep)) and p.pid != os.getpid():
            found.append(p)
    return found


READY = "refkernel listening on "


@dataclass
class KernelProc:
    proc: asyncio.subprocess.Process
    socket: Path | None  # the unix socket, when it listens on one
    data_dir: Path
    log: Path
    argv: list[str]
    sock_dir: Path
    mock: MockServer | None = None
    token: str = TOKEN
    allow_strays: bool = False
    conns: list[KernelConn] = field(default_factory=list)
    address: str = ""  # what the ready line names: a path, tcp:HOST:PORT or ws://HOST:PORT/PATH
    ready_line: str = ""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr(self) -> str:
        try:
            return self.log.read_text()[-4000:]
        except OSError:
            return ""

    async def connect(self, auth: bool = True, token: str | None = None) -> KernelConn:
        conn = await KernelConn.open(self.address, token=self.token if token is None else token, auth=auth)
        self.conns.append(conn)
        return conn

    async def stats(self) -> dict[str, Any]:
        async with await KernelConn.open(self.address, token=self.token) as c:
            return await c.stats()

    async def terminate(self, timeout: float = 15) -> int:
        """SIGTERM and wait for the exit; the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
            raise AssertionError(f"refkernel did not exit within {timeout} s of SIGTERM; stderr:\n{self.stderr()}") from None

    async def aclose(self) -> None:
        for c in self.conns:
            await c.aclose()
        if self.proc.returncode is None:
            await self.terminate()
        shutil.rmtree(self.sock_dir, ignore_errors=True)
        strays = procs_in(self.data_dir)
        for p in strays:
            with contextlib.suppress(psutil.Error):
                p.kill()
        if strays and not self.allow_strays:
            raise AssertionError(f"processes survived the kernel: {[(p.pid, p.info) for p in strays]}")


def mock_requests(k: KernelProc, nonce: str) -> list[tuple[str, bool]]:
    """(dialect, stream) of every request the kernel's mock saw for ``nonce``, oldest first."""
    assert k.mock is not None
    entry = k.mock.state.store.query([nonce])[nonce]
    return [(r["dialect"], r["stream"]) for r in (entry or {}).get("records", [])]


async def run_kernel_cli(args: list[str], timeout: float = 20) -> tuple[int, str]:
    """``refkernel ARGS`` that is expected to exit by itself: its exit code and output."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "refkernel", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(f"refkernel {args} did not exit within {timeout} s") from None
    return proc.returncode, (out + err).decode()


async def start_kernel(
    llm_url: str, args: list[str], base: Path, token: str | None = TOKEN, ready_timeout: float = 20,
    listen: str | None = None,
) -> KernelProc:
    """``listen=None``: on a fresh unix socket (``--socket``); otherwise ``--listen LISTEN``."""
    sock_dir = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    socket_path = sock_dir / "k.sock" if listen is None else None
    where = ["--socket", str(socket_path)] if listen is None else ["--listen", listen]
    if listen is not None and listen.startswith("unix:"):
        socket_path = Path(listen[5:])
    data_dir = base / "data"
    log = base / f"kernel-{time.monotonic_ns()}.log"
    argv = [sys.executable, "-m", "refkernel", *where, "--llm-url", llm_url,
            "--data-dir", str(data_dir), *(["--token", token] if token else []), *args]
    try:
        with open(log, "wb") as err:
            proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, stderr=err)
    except BaseException:
        shutil.rmtree(sock_dir, ignore_errors=True)
        raise
    kp = KernelProc(proc=proc, socket=socket_path, data_dir=data_dir, log=log, argv=argv, sock_dir=sock_dir,
                    token=token or TOKEN)
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(proc.stdout.readline(), ready_timeout)
        if not line.startswith(READY.encode()):
            await asyncio.wait_for(proc.wait(), ready_timeout)
            raise AssertionError(f"refkernel did not start (exit {proc.returncode}); stderr:\n{kp.stderr()}")
        kp.ready_line = line.decode()
        kp.address = kp.ready_line.removeprefix(READY).rstrip("\n")
    except asyncio.TimeoutError:
        await kp.aclose()
        raise AssertionError(f"refkernel not ready within {ready_timeout} s; stderr:\n{kp.stderr()}") from None
    except BaseException:
        await kp.aclose()  # cancelled or failed: nothing of it stays behind
        raise
    return kp
