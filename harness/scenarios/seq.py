"""A sequential driver: one turn at a time on one connection, reconnecting
after a lost connection, each turn recorded through the run."""

from __future__ import annotations

from typing import Any

from ..wire.client import ConnError, KernelClient
from .runner import Run
from ..sandbox.sut import Target
from ..judge.verdict import TurnVerdict


class Sequential:
    def __init__(self, run: Run, target: Target, timeout_s: float, connect_timeout_s: float) -> None:
        self.run = run
        self.target = target
        self.timeout_s = timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.client: KernelClient | None = None

    async def turn(self, marker: str, *, more: Any = None, **labels: Any) -> TurnVerdict:
        """One turn, recorded with ``labels`` (and ``more``: Run.record's)."""
        self.run.check_alive()
        if self.client is None or not self.client.connected:
            if self.client is not None:
                await self.client.aclose()
            try:
                self.client = await self.target.client(connect_timeout_s=self.connect_timeout_s).connect()
            except ConnError as exc:
                self.client = None
                return await self.run.record_failure(marker, exc, self.target, **labels)
        turn = await self.client.turn(marker, self.timeout_s)
        return await self.run.record(turn, self.target, more=more, **labels)

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
