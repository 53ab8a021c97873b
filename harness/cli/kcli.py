"""`kstress kcli`: talk to a running kernel by hand.

    kcli send "!slowbatch4"     frames as they arrive, then `verdict: ok` or `verdict: <failure>`
                                (the line's tag checked when the key is known: a detached
                                sandbox's, or KSTRESS_VERDICT_KEY; else read as given)
    kcli stats                  the kernel's stats frame
    kcli shell                  one input per line from stdin
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from mock.markers import VERDICT_KEY_ENV, build_plan, verdict_key
from mock.errors import MarkerError

from ..wire.client import ConnError, KernelClient, Turn
from ..wire.transport import Address, parse_address
from ..wire.agents import HttpAgentClient, agent_driver, is_agent_protocol
from ..errors import UsageError
from ..scenarios import CONNECT_TIMEOUT_S
from ..wire.protocol import Protocol, load_protocol
from ..sandbox.supervisor import require_running
from ..judge.verdict import TurnVerdict, judge


@dataclass(frozen=True)
class Endpoint:
    address: Address
    token: str | None
    protocol: Protocol
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    verdict_key: bytes | None = None
    driver: Any = None  # a detached sandbox's agent (issue 23): its protocol's driver

    @property
    def socket(self) -> str:
        return self.driver.url if self.driver is not None else str(self.address)

    def client(self) -> Any:
        # a kernel inside a sandbox: one connection here, so a connector connection of its own
        if self.driver is not None:
            return HttpAgentClient(self.driver, self.address, connect_timeout_s=self.connect_timeout_s)
        return KernelClient(self.address, self.token, self.protocol, connect_timeout_s=self.connect_timeout_s)


def resolve_endpoint(socket: str | Path | None, state: Path | None, token: str | None, protocol: str | None, connect_timeout_s: float = CONNECT_TIMEOUT_S) -> Endpoint:
    if not 0.1 <= connect_timeout_s <= 3600:
        raise UsageError(f"--connect-timeout {connect_timeout_s!r} is invalid: use 0.1 to 3600 seconds")
    if socket is not None:
        address = Address("unix", path=str(socket)) if isinstance(socket, Path) else parse_address(socket)
        return Endpoint(address, token, load_protocol(protocol), connect_timeout_s, verdict_key(os.environ.get(VERDICT_KEY_ENV)))
    s = require_running(state).state
    key = s.raw.get("verdict_key")
    url = s.raw.get("url")
    driver = agent_driver(s.protocol or "", url, f"{s.path}: url") if is_agent_protocol(s.protocol) and isinstance(url, str) else None
    return Endpoint(s.kernel_address(), token or s.token, load_protocol(protocol or s.protocol), connect_timeout_s, verdict_key(key if isinstance(key, str) else None), driver)


def print_frames(turn: Turn, out: TextIO) -> None:
    for t, frame in turn.frames:
        out.write(f"+{(t - turn.t_sent) * 1000:8.1f}ms {json.dumps(frame, ensure_ascii=False)}\n")


async def send_one(ep: Endpoint, text: str, timeout_s: float, out: TextIO, raw: bool = False) -> TurnVerdict:
    try:
        plan = build_plan(text if raw else f"{text} #x")
    except MarkerError as exc:
        raise UsageError(f"input {text!r}: {exc}") from None
    try:
        async with ep.client() as client:
            turn = await client.turn(text, timeout_s, raw=raw)
    except ConnError as exc:
        raise UsageError(f"cannot talk to the kernel at {ep.socket}: {exc}") from None
    plan = build_plan(turn.text)
    print_frames(turn, out)
    verdict = judge(turn, plan, key=ep.verdict_key, authenticate=ep.verdict_key is not None)
    out.write(f"verdict: {'ok' if verdict.passed else '; '.join(verdict.failures)}\n")
    out.flush()
    return verdict


async def stats(ep: Endpoint, out: TextIO) -> dict[str, Any]:
    try:
        async with ep.client() as client:
            s = await client.stats()
    except ConnError as exc:
        raise UsageError(f"cannot talk to the kernel at {ep.socket}: {exc}") from None
    out.write(json.dumps(s, indent=2) + "\n")
    return s


async def shell(ep: Endpoint, timeout_s: float, inp: TextIO = sys.stdin, out: TextIO = sys.stdout) -> int:
    failed = 0
    for line in inp:
        text = line.strip()
        if not text:
            continue
        try:
            v = await send_one(ep, text, timeout_s, out)
            failed += not v.passed
        except UsageError as exc:
            out.write(f"error: {exc}\n")
            failed += 1
    return failed
