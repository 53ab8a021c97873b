"""A fleet worker: the Ray actor the bridge starts, one per worker. It runs a
scenario's share function (named ``module:function``, imported here, so the
fleet room never imports a scenario) on its own event loop and hands what it
recorded to the bridge in batches.

A share function is ``async fn(job, sink, t0) -> extras``: ``job`` is the
head's picklable description of this worker's share, ``t0`` the head's start
of the load on this worker's monotonic clock, ``sink`` where rows go."""

from __future__ import annotations

import asyncio
import importlib
import os
import socket
import time
import traceback
from typing import Any, Callable

# a take() that finds nothing waits this long for the first row: the head
# hears from every worker at least this often, so a dead target or a Ctrl-C
# is acted on within it
TAKE_WAIT_S = 0.25


class Sink:
    """What a worker recorded since the last take: rows, failure stories, and
    how many inputs its load has taken (``sent``, for the in-flight count)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.sent: Callable[[], int] = lambda: 0
        self.skipped: dict[str, int] = {}  # failure stories this worker's own bound left out, per name
        self.notes: list[dict[str, Any]] = []  # a share's word to the head (hold: "every connection is open")
        self.final: dict[str, Any] = {}  # sent with the last batch (what the worker's targets saw of the mock)
        self._signals: dict[str, asyncio.Event] = {}
        self._wake = asyncio.Event()

    def note(self, what: dict[str, Any]) -> None:
        """Sent to the head with the next batch, at once."""
        self.notes.append(what)
        self._wake.set()

    def signal(self, name: str) -> asyncio.Event:
        """Set when the head signals ``name`` to every worker (hold: "release")."""
        return self._signals.setdefault(name, asyncio.Event())

    def turn(self, row: dict[str, Any]) -> None:
        self.rows.append(row)
        if len(self.rows) == 1:
            self._wake.set()

    def failure(self, entry: dict[str, Any]) -> None:
        self.failures.append(entry)

    def wake(self) -> None:
        self._wake.set()

    async def wait(self, timeout_s: float) -> None:
        if not self.rows and not self.notes:
            try:
                await asyncio.wait_for(self._wake.wait(), timeout_s)
            except TimeoutError:
                pass
        self._wake.clear()

    def drain(self) -> dict[str, Any]:
        rows, self.rows = self.rows, []
        failures, self.failures = self.failures, []
        out = {"rows": rows, "failures": failures, "sent": self.sent()}
        if self.notes:
            out["notes"], self.notes = self.notes, []
        return out


class Worker:
    def __init__(self, index: int, count: int) -> None:
        self.index, self.count = index, count
        self.sink: Sink | None = None
        self.task: asyncio.Task | None = None
        self.result: dict[str, Any] = {}

    def identity(self) -> dict[str, Any]:
        import ray  # only in a worker process

        ctx = ray.get_runtime_context()
        return {"index": self.index, "pid": os.getpid(), "host": socket.gethostname(),
                "node_id": ctx.get_node_id(), "node_ip": ray.util.get_node_ip_address()}

    def clock(self) -> float:
        return time.monotonic()

    async def start(self, entry: str, job: Any, t0: float) -> None:
        """Never raises: what goes wrong, the import included, is the share's
        error, which the first take reports."""
        self.sink = Sink()
        self.task = asyncio.get_running_loop().create_task(self._run(entry, job, t0))

    async def _run(self, entry: str, job: Any, t0: float) -> None:
        assert self.sink is not None
        try:
            module, _, name = entry.partition(":")
            fn = getattr(importlib.import_module(module), name)
            self.result = {"extras": await fn(job, self.sink, t0)}
        except asyncio.CancelledError:
            self.result = {"stopped": True}
        except BaseException as exc:  # noqa: BLE001 - the head names it
            self.result = {"error": _portable(exc), "traceback": traceback.format_exc()}
        finally:
            self.sink.wake()

    async def take(self) -> dict[str, Any]:
        """What was recorded since the last take (waiting up to TAKE_WAIT_S
        for something); ``done`` with the share's extras once it ended."""
        assert self.sink is not None and self.task is not None, "start() first"
        if not self.task.done():
            await self.sink.wait(TAKE_WAIT_S)
        done = self.task.done()
        batch = self.sink.drain()
        if done:
            batch.update(done=True, skipped=self.sink.skipped, final=self.sink.final, **self.result)
        return batch

    async def signal(self, name: str) -> None:
        if self.sink is not None:
            self.sink.signal(name).set()

    async def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it crosses a process (the harness's own pickle
    fine), else a RuntimeError with its text."""
    import pickle

    try:
        pickle.loads(pickle.dumps(exc))
        return exc
    except Exception:  # noqa: BLE001
        return RuntimeError(f"{type(exc).__name__}: {exc}")
