"""Fixtures for harness tests: the real mock and the real reference kernel as
subprocesses on loopback and a unix socket (no sandbox: the sandbox has its
own tests; scenarios that need one use --launch in tests/e2e)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator

import pytest

from harness.scenarios import Access

ROOT = Path(__file__).resolve().parents[2]
REFKERNEL = str(Path(sys.executable).with_name("refkernel"))


async def _wait_line(path: Path, prefix: str, proc: asyncio.subprocess.Process, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith(prefix):
                    return line
        if proc.returncode is not None or time.monotonic() > deadline:
            raise AssertionError(f"{prefix!r} not seen in {path} within {timeout}s: {path.read_text() if path.exists() else ''}")
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(proc.wait(), 0.02)


async def _stop(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


@dataclass
class Kernel:
    socket: Path | str  # a unix socket, or with listen= the address the ready line named (tcp:..., ws://...)
    token: str
    dir: Path
    mock_log: Path
    kernel: asyncio.subprocess.Process
    tool_ms: int
    mock_url: str = ""

    def access(self, *contract: str, mock: bool = True) -> Access:
        # a bare socket declares its contract (this one is the reference
        # kernel's) and names its mock, which is asked for every turn's verdict
        return Access(socket=self.socket, token=self.token, tool_ms=self.tool_ms, contract_pairs=("dedup=true", "interrupts=true", "stats=true", *contract),
                      mock=self.mock_url if mock else None)


@contextlib.asynccontextmanager
async def running_kernel(*flags: str, tool_ms: int = 200, listen: str | None = None, mock_flags: tuple[str, ...] = ()) -> AsyncIterator[Kernel]:
    """The real mock and refkernel; ``listen`` (e.g. tcp:127.0.0.1:0) instead
    of a unix socket: on the host's loopback, no sandbox."""
    d = Path(tempfile.mkdtemp(prefix="kst-h"))
    (d / "data").mkdir()
    mock = kernel = None
    try:
        with open(d / "mock.out", "wb") as out, open(d / "mock.err", "wb") as err:
            mock = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "mock", "--port", "0", "--tool-ms", str(tool_ms), "--log", str(d / "mock.jsonl"), *mock_flags,
                stdout=out, stderr=err, cwd=ROOT,
            )
        line = await _wait_line(d / "mock.out", "mock listening on ", mock, 20)
        url = line.split(" on ", 1)[1] + "/v1"
        where = ("--listen", listen) if listen else ("--socket", str(d / "k.sock"))
        with open(d / "kernel.out", "wb") as out, open(d / "kernel.err", "wb") as err:
            kernel = await asyncio.create_subprocess_exec(
                REFKERNEL, *where, "--llm-url", url, "--data-dir", str(d / "data"), "--token", "tok",
                "--llm-timeout", "5", *flags, stdout=out, stderr=err,
            )
        ready = await _wait_line(d / "kernel.out", "refkernel listening on ", kernel, 20)
        address: Path | str = ready.split(" on ", 1)[1].strip() if listen else d / "k.sock"
        yield Kernel(address, "tok", d, d / "mock.jsonl", kernel, tool_ms, url.removesuffix("/v1"))
    finally:
        for p in (kernel, mock):
            if p is not None:
                await _stop(p)
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kernel_factory():
    return running_kernel


@pytest.fixture
def out_dir(tmp_path):
    return tmp_path / "runs"
