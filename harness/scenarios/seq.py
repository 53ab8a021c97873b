"""A sequential driver: one turn at a time on one connection, reconnecting
after a lost connection, each turn judged and written as a row."""

from __future__ import annotations

import time
from typing import Any

from ..client import ConnError, KernelClient, Turn, failed_turn
from ..results import RunDir
from ..verdict import TurnVerdict, judge
from .common import Progress, Target, Watch


class Sequential:
    def __init__(self, target: Target, rundir: RunDir, watch: Watch, progress: Progress | None, timeout_s: float, label: str = "") -> None:
        self.target = target
        self.rundir = rundir
        self.watch = watch
        self.progress = progress
        self.timeout_s = timeout_s
        self.label = label
        self.client: KernelClient | None = None
        self.t0 = time.monotonic()

    async def turn(self, marker: str, **row: Any) -> TurnVerdict:
        self.watch.check()
        if self.client is None or not self.client.connected:
            if self.client is not None:
                await self.client.aclose()
            try:
                self.client = await self.target.client(connect_timeout_s=30.0).connect()
            except ConnError as exc:
                self.client = None
                return self._record(failed_turn(marker, exc), row)
        turn = await self.client.turn(marker, self.timeout_s)
        return self._record(turn, row)

    def _record(self, turn: Turn, row: dict[str, Any]) -> TurnVerdict:
        v = judge(turn, self.target.plan(turn.text))
        data = v.to_json()
        data.update(row)
        if self.label:
            data["version"] = self.label
        data["t_rel"] = round(turn.t_sent - self.t0, 4)
        self.rundir.turn(data)
        if self.progress is not None:
            self.progress.add(v.passed, v.latency_s)
        return v

    async def aclose(self) -> None:
        if self.client is not None:
            await self.client.aclose()
            self.client = None
