"""`kstress status`: what runs in the sandbox, and is it healthy."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import aiohttp
import psutil

from ..wire.client import ConnError, KernelClient
from ..errors import ConnectorGone, UsageError
from ..wire.agents import HttpAgentClient, agent_driver, is_agent_protocol
from ..wire.transport import Dialer
from ..wire.protocol import load_protocol
from ..sandbox.namespace import processes_in
from ..sandbox.supervisor import require_running


async def show_status(state: Path | None) -> None:
    s = require_running(state).state
    print(f"state: {s.path}  status: {s.status}")
    print(f"namespace: {s.namespace} ({s.mechanism})  supervisor pid {s.supervisor_pid}")
    print("processes:")
    # the supervisor holds the namespace pinned, so its inode still means it
    for pid in processes_in(s.net_inode) if s.net_inode else []:
        try:
            p = psutil.Process(pid)
            print(f"  {pid:>7} {p.status():<9} {p.memory_info().rss / 2**20:7.1f} MB  {' '.join(p.cmdline())[:100]}")
        except psutil.Error:
            continue
    try:
        conn = aiohttp.UnixConnector(path=s.mock_socket or "")
        async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=5)) as http:
            async with http.get("http://mock/_mock/stats") as r:
                print(f"mock: {s.llm_url} healthy: {json.dumps(await r.json())}")
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        print(f"mock: UNREACHABLE ({exc})")
    address = s.kernel_address()
    if address.via:
        print(f"transport: {address.url} inside the namespace, reached through the connector {address.via}")
    url = s.raw.get("url")
    if is_agent_protocol(s.protocol) and isinstance(url, str):
        # an agent: healthy when its URL answers as its protocol's endpoint (it has no stats)
        try:
            async with Dialer(address) if address.via else _none() as dialer:
                async with HttpAgentClient(agent_driver(s.protocol or "", url), address, dialer=dialer, connect_timeout_s=5) as c:
                    await c.prepare(5)
            print(f"agent: {url} ({s.protocol}) healthy")
        except (ConnError, ConnectorGone, UsageError) as exc:
            print(f"agent: {url} ({s.protocol}) UNREACHABLE ({exc})")
        return
    try:
        async with KernelClient(address, s.token, load_protocol(s.protocol), connect_timeout_s=5) as c:
            print(f"kernel: {address} healthy; stats: {json.dumps(await c.stats())}")
    except (ConnError, ConnectorGone) as exc:
        print(f"kernel: UNREACHABLE ({exc})")


@contextlib.asynccontextmanager
async def _none():
    yield None
