"""Fixtures for the reference kernel's tests: the real mock (in-process, on
loopback), a scripted fake LLM where the mock has no marker for what a test
needs (rkfake.py), and the real kernel as a subprocess on a real unix socket
(rkhelpers.py). Test modules import helpers from rkhelpers / rkclient, never
from ``conftest`` (that name is ambiguous across the test tree)."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, AsyncIterator

import pytest

from mock import MockServer, MockSettings
from rkfake import FakeLLM
from rkhelpers import TOKEN, KernelProc, start_kernel


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    """The scripted fake LLM (rkfake.py), for ``rk(..., llm_url=llm.url + "/v1")``.
    Ask for it before ``rk``, so the kernels stop before it does."""
    async with FakeLLM() as fake:
        yield fake


@pytest.fixture
async def rk(tmp_path: Path) -> AsyncIterator[Any]:
    """Factory: ``await rk(*kernel_args, tool_ms=200)`` starts a mock and a
    kernel wired to it (on a unix socket, or ``listen="tcp:127.0.0.1:0"`` /
    ``"ws:127.0.0.1:0/PATH"``); both are stopped at teardown."""
    stack = contextlib.AsyncExitStack()
    count = 0

    async def start(*args: str, tool_ms: int = 200, mock_settings: MockSettings | None = None,
                    llm_url: str | None = None, token: str | None = TOKEN, listen: str | None = None) -> KernelProc:
        nonlocal count
        count += 1
        mock = None
        if llm_url is None:
            mock = await stack.enter_async_context(MockServer(mock_settings or MockSettings(tool_ms=tool_ms)))
            llm_url = mock.url + "/v1"
        base = tmp_path / f"k{count}"
        base.mkdir()
        kp = await start_kernel(llm_url, list(args), base, token=token, listen=listen)
        kp.mock = mock
        stack.push_async_callback(kp.aclose)  # before its mock closes (LIFO)
        return kp

    try:
        yield start
    finally:
        await stack.aclose()
