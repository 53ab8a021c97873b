"""Load shapes: durations, stages (k6's ramping executors), arrival times of
the open model, and the controller that keeps a closed model's workers at
the level a ramp asks for.

A shape is a piecewise-linear level over time: ``--stage 30s:64`` ramps from
the level before it to 64 in 30 s, ``--stage 0s:64`` jumps. The level is
connections (closed model) or inputs per second (open model). The open model's
arrivals are a unit-rate sequence — 1, 2, 3, ... (constant) or cumulative
sums of Exp(1) (poisson) — mapped through the inverse of the ramp's cumulative
rate, so a Poisson stream follows a ramp exactly as a constant one does
(docs/load-shapes.md).
"""

from __future__ import annotations

import asyncio
import math
import random
import re
import time
from dataclasses import dataclass
from typing import Awaitable, Callable, Iterator, Sequence

from ..errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m|h)?\s*")
DURATION_HELP = "500ms, 30s, 5m, 1h (a bare number is seconds)"
MAX_RUN_S = 86_400.0
MAX_LEVEL = 100_000.0


def parse_duration(text: str, flag: str = "--duration") -> float:
    """``'500ms'`` -> 0.5, ``'30s'``/``'30'`` -> 30.0, ``'5m'`` -> 300.0."""
    m = _DURATION.fullmatch(str(text))
    if not m:
        raise UsageError(f"{flag} {text!r} is not a duration: write {DURATION_HELP}")
    return float(m.group(1)) * _UNITS[m.group(2) or "s"]


def duration_parser(flag: str) -> Callable[[str], float]:
    return lambda text: parse_duration(text, flag)


@dataclass(frozen=True)
class Stage:
    duration_s: float
    target: float

    def to_json(self) -> dict[str, float]:
        return {"duration_s": self.duration_s, "target": self.target}


def parse_stage(text: str, flag: str = "--stage", integer: bool = False) -> Stage:
    """``'30s:64'`` -> Stage(30.0, 64). ``integer``: the target counts
    connections (closed model), not inputs per second."""
    dur, sep, target = str(text).rpartition(":")
    what = "connections" if integer else "inputs per second"
    example = "30s:64" if integer else "30s:20.5"
    if not sep or not dur.strip():
        raise UsageError(f"{flag} {text!r}: expected DURATION:TARGET, e.g. {flag} {example} (ramp to {example.split(':')[1]} {what} in 30 s)")
    d = parse_duration(dur, f"{flag} {text!r}: the duration")
    try:
        t = int(target) if integer else float(target)
    except ValueError:
        kind = "a whole number of connections (the closed model; add --rate for inputs per second)" if integer else "a number of inputs per second"
        raise UsageError(f"{flag} {text!r}: the target {target!r} must be {kind}") from None
    if not 0 <= t <= (20_000 if integer else MAX_LEVEL) or math.isnan(t):
        raise UsageError(f"{flag} {text!r}: the target must be from 0 to {20_000 if integer else int(MAX_LEVEL)} {what}")
    if d > MAX_RUN_S:
        raise UsageError(f"{flag} {text!r}: a stage is at most 24 h")
    return Stage(d, float(t))


def parse_stages(texts: Sequence[str], integer: bool, flag: str = "--stage") -> tuple[Stage, ...]:
    stages = tuple(parse_stage(t, flag, integer) for t in texts)
    if stages and sum(s.duration_s for s in stages) <= 0:
        raise UsageError(f"{flag}: the stages take no time ({', '.join(texts)}); give one a duration, e.g. {flag} 30s:{texts[-1].rpartition(':')[2]}")
    if sum(s.duration_s for s in stages) > MAX_RUN_S:
        raise UsageError(f"{flag}: the stages add up to more than 24 h")
    if stages and not any(s.target > 0 for s in stages):
        raise UsageError(f"{flag}: every stage's target is 0 ({', '.join(texts)}): nothing would be sent")
    return stages


class Ramp:
    """A piecewise-linear level: from ``start`` through each stage's target."""

    def __init__(self, stages: Sequence[Stage], start: float = 0.0) -> None:
        self.segments: list[tuple[float, float, float, float]] = []  # t0, t1, level at t0, level at t1
        t, level = 0.0, start
        for s in stages:
            if s.duration_s > 0:
                self.segments.append((t, t + s.duration_s, level, s.target))
            t += s.duration_s
            level = s.target
        self.total_s = t
        self.start = start
        self.end_level = level

    @classmethod
    def constant(cls, level: float, duration_s: float) -> "Ramp":
        return cls([Stage(0.0, level), Stage(duration_s, level)], level)

    def level(self, t: float) -> float:
        for t0, t1, a, b in self.segments:
            if t < t1:
                return a + (b - a) * (max(t, t0) - t0) / (t1 - t0)
        return self.end_level

    def inverse_cumulative(self, x: float) -> float | None:
        """The time at which the integral of the level reaches ``x`` (the
        x-th unit of work of a rate ramp); None when the ramp ends first."""
        for t0, t1, a, b in self.segments:
            d = t1 - t0
            area = (a + b) / 2 * d
            if x <= area and area > 0:
                slope = (b - a) / d
                if abs(slope) < 1e-12:
                    return t0 + x / a
                # a·t + slope·t²/2 = x, the root in [0, d]
                disc = max(0.0, a * a + 2 * slope * x)
                return t0 + min(d, (math.sqrt(disc) - a) / slope)
            x -= area
        return None


def arrival_offsets(ramp: Ramp, arrival: str, seed: int, limit: int) -> Iterator[float]:
    """Offsets from the run's start of at most ``limit`` open-model arrivals.
    Constant: the i-th arrival when the cumulative rate reaches i (the first
    at 0, as `--rate` always sent it). Poisson: exponential gaps of mean 1 in
    that same cumulative time."""
    rng = random.Random(seed * 7_919 + 17)
    x = 0.0
    for i in range(limit):
        if arrival == "poisson":
            x += rng.expovariate(1.0)
        else:
            x = float(i)
        t = ramp.inverse_cumulative(x)
        if t is None or t >= ramp.total_s:
            return
        yield t


Worker = Callable[[int, Callable[[], bool]], Awaitable[None]]


async def follow_level(ramp: Ramp, t0: float, worker: Worker, stop: asyncio.Event | None = None, tick_s: float = 0.05, max_workers: int = 20_000,
                       share: tuple[int, int] = (0, 1)) -> int:
    """Keep round(level(t)) workers running until the ramp ends. A worker is
    called with its id and ``keep_going()``; it sends one input at a time
    while that holds, and leaves after its current turn when the level falls
    (the newest leave first) or the ramp ends. Returns the number of workers
    started. One worker's error cancels the others (a TaskGroup).

    ``share`` (w, n): process w of a fleet of n runs the level's slots w,
    w+n, ... -- of a level L, len(range(w, L, n)) of them; the fleet's
    processes together follow the level as one would."""
    w, n = share
    end = t0 + ramp.total_s
    active: list[int] = []
    leaving: set[int] = set()
    started = 0

    def keeper(wid: int) -> Callable[[], bool]:
        return lambda: wid not in leaving and time.monotonic() < end and not (stop is not None and stop.is_set())

    async with asyncio.TaskGroup() as tg:
        while True:
            now = time.monotonic()
            if now >= end or (stop is not None and stop.is_set()):
                break
            want = min(max_workers, len(range(w, int(ramp.level(now - t0) + 0.5), n)))
            while len(active) < want:
                wid = started
                started += 1
                active.append(wid)
                task = tg.create_task(worker(wid, keeper(wid)))
                task.add_done_callback(lambda _t, wid=wid: active.remove(wid) if wid in active else None)
            while len(active) > want:
                leaving.add(active.pop())
            # the controller's own period (ramp resolution), not a synchronisation
            await asyncio.sleep(min(tick_s, max(0.0, end - time.monotonic())))
    return started


def shape_json(stages: Sequence[Stage], ramp: Ramp | None) -> dict[str, object] | None:
    if ramp is None:
        return None
    return {"stages": [s.to_json() for s in stages], "total_s": ramp.total_s}
