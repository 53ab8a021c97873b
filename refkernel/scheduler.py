"""The scheduler: W workers, a bounded queue, interrupts, and the replay guard.

An interrupt-priority input never waits in the normal queue. An idle worker
takes it at once; otherwise the next running turn to reach a step boundary
(:meth:`Scheduler.checkpoint`, called before each LLM request) is suspended,
runs every pending interrupt to its end in its own slot, and then resumes.
Counters: ``suspended`` / ``resumed`` count suspensions of running turns,
``preempted`` counts interrupts that ran by taking a running turn's slot.
"""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable


class Busy(Exception):
    """The queue is full."""


@dataclass(eq=False)
class Job:
    conn: Any
    id: Any
    text: str
    interrupt: bool = False
    session: str | None = None  # the input's session id: the turn carries that session's history
    received: float = field(default_factory=time.monotonic)
    task: asyncio.Task | None = None
    state: str = "new"  # new -> waiting (connection backlog) -> queued -> running -> done
    cancel_reason: str | None = None
    suspended: bool = False


class Dedup:
    """Texts accepted within the last ``window`` seconds (stored as digests,
    at most ``capacity`` of them, oldest forgotten first). A text sent in a
    session is remembered for that session only (``scope``): a replay is the
    same text into the same conversation, not the same words in another one."""

    def __init__(self, window: float, capacity: int = 100_000) -> None:
        self.window = window
        self.capacity = capacity
        self._seen: collections.OrderedDict[bytes, float] = collections.OrderedDict()

    @staticmethod
    def _key(text: str, scope: str | None = None) -> bytes:
        h = hashlib.blake2b(digest_size=16)
        if scope is None:
            h.update(b"\0")
        else:  # length-prefixed, so that no (scope, text) pair reads as another
            s = scope.encode("utf-8", "surrogatepass")
            h.update(b"\1" + len(s).to_bytes(4, "big") + s)
        h.update(text.encode("utf-8", "surrogatepass"))
        return h.digest()

    def _prune(self, now: float) -> None:
        seen = self._seen
        while seen and (len(seen) > self.capacity or next(iter(seen.values())) <= now - self.window):
            seen.popitem(last=False)

    def seen(self, text: str, scope: str | None = None) -> bool:
        if self.window <= 0:
            return False
        self._prune(time.monotonic())
        return self._key(text, scope) in self._seen

    def remember(self, text: str, scope: str | None = None) -> None:
        if self.window <= 0:
            return
        key = self._key(text, scope)
        self._seen.pop(key, None)
        self._seen[key] = time.monotonic()
        self._prune(time.monotonic())

    def __len__(self) -> int:
        return len(self._seen)


class Scheduler:
    def __init__(self, workers: int, capacity: int, run_turn: Callable[[Job], Awaitable[None]]) -> None:
        self.workers = workers
        self.capacity = capacity
        self._run_turn = run_turn
        self._queue: collections.deque[Job] = collections.deque()
        self._interrupts: collections.deque[Job] = collections.deque()
        self._waiters: collections.deque[asyncio.Future] = collections.deque()
        self._tasks: list[asyncio.Task] = []
        self.running: set[Job] = set()
        self.counters: collections.Counter[str] = collections.Counter()
        self.peak_queued = 0

    @property
    def queued(self) -> int:
        return len(self._queue) + len(self._interrupts)

    def start(self) -> None:
        self._tasks = [asyncio.ensure_future(self._worker()) for _ in range(self.workers)]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    # --- admission --------------------------------------------------------------

    def submit(self, job: Job) -> None:
        """Hand the job to an idle worker or queue it; :class:`Busy` when the
        queue (normal and interrupt queues are bounded separately) is full."""
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                job.state = "queued"
                fut.set_result(job)
                return
        lane = self._interrupts if job.interrupt else self._queue
        if len(lane) >= self.capacity:
            raise Busy
        job.state = "queued"
        lane.append(job)
        self.peak_queued = max(self.peak_queued, self.queued)

    def remove(self, job: Job) -> bool:
        """Take a queued job back (its connection went away)."""
        lane = self._interrupts if job.interrupt else self._queue
        try:
            lane.remove(job)
        except ValueError:
            return False
        job.state = "done"
        return True

    def drain(self) -> list[Job]:
        """Every queued job, removed (shutdown)."""
        jobs = [*self._interrupts, *self._queue]
        self._interrupts.clear()
        self._queue.clear()
        for j in jobs:
            j.state = "done"
        return jobs

    # --- running ----------------------------------------------------------------

    async def _next(self) -> Job:
        if self._interrupts:
            return self._interrupts.popleft()
        if self._queue:
            return self._queue.popleft()
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._queue.appendleft(fut.result())  # handed over as we were stopped: keep it
            raise

    def _start(self, job: Job) -> asyncio.Task:
        job.state = "running"
        self.running.add(job)
        job.task = asyncio.ensure_future(self._run_turn(job))

        def done(_: asyncio.Task) -> None:
            self.running.discard(job)
            job.state = "done"

        job.task.add_done_callback(done)
        return job.task

    async def _worker(self) -> None:
        while True:
            job = await self._next()
            if getattr(job.conn, "closed", False):
                job.state = "done"  # handed over just as its client left
                continue
            # asyncio.wait, not await: stopping a worker must not cancel the turn
            # (shutdown ends turns itself, with an error frame each).
            await asyncio.wait([self._start(job)])

    async def checkpoint(self, job: Job) -> None:
        """A step boundary of ``job``: run pending interrupts here, then go on."""
        if job.interrupt or not self._interrupts:
            return
        self.counters["suspended"] += 1
        job.suspended = True
        try:
            while self._interrupts:
                intr = self._interrupts.popleft()
                self.counters["preempted"] += 1
                await asyncio.wait([self._start(intr)])
        finally:
            job.suspended = False
        self.counters["resumed"] += 1
