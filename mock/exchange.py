"""One request's bookkeeping, shared by aiohttp's handler (mock/server.py)
and the fast path (mock/fastpath.py).

``begin`` opens an Exchange: the request's log line, its store entry and
record, and when its bytes went out. ``MockState.commit`` records it for good
-- the store, the recent-request ring, the log -- right before its last byte is
written; ``end`` closes it. MockState is what one app keeps: counters, that
ring, the verdict store, the log, and the caches of shapes and loop plans.
"""

from __future__ import annotations

import collections
import json
import time
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from .dialects import Dialect, Turn
from .markers import Plan
from .store import FIRST_BYTE, LAST_BYTE, STATUS, Entry, VerdictStore

if TYPE_CHECKING:
    from .shapes import Shape

RECENT_CAPACITY = 1000


@dataclass
class MockState:
    """Counters, the recent-request ring, the verdict store and the request log of one app."""

    counters: collections.Counter = field(default_factory=collections.Counter)
    plans: collections.Counter = field(default_factory=collections.Counter)
    recent: collections.deque = field(default_factory=lambda: collections.deque(maxlen=RECENT_CAPACITY))
    store: VerdictStore = field(default_factory=VerdictStore)
    inflight: int = 0
    hanging: int = 0
    started: float = field(default_factory=time.time)
    log: IO[str] | None = None
    # (dialect, marker token, nonce length) -> Shape, or None when it cannot be
    # templated; a pure function of the settings, so reset() keeps it
    shapes: dict[tuple[str, str | None, int], "Shape | None"] = field(default_factory=dict)
    # a tool loop's plan by its input's text: its K+1 requests plan once (a
    # !loop64:64 plan is 4,096 calls); bounded by the calls held, oldest dropped
    loop_plans: collections.OrderedDict[str, Plan] = field(default_factory=collections.OrderedDict)
    loop_plan_calls: int = 0
    # the rate limit's token bucket (mock/faults.py): --rate-limit's, or the one
    # POST /_mock/rate_limit set at run time; None without one
    bucket: Any = None

    def reset(self) -> None:
        self.counters.clear()
        self.plans.clear()
        self.recent.clear()
        self.store.clear()

    def commit(self, ex: "Exchange", status: int) -> None:
        """Record a request for good: its status and byte times in the store,
        its line in the ring and the log. Called right before the last byte of
        its response is written (or when it ends without one), never after:
        whoever got the response can query the mock about it at once."""
        ex.committed = True
        rec = ex.rec
        rec["status"] = status
        rec["t_arrival"] = ex.arrival
        rec["t_first_byte"] = ex.first_byte
        rec["t_last_byte"] = ex.last_byte
        rec["ms"] = int((time.monotonic() - ex.arrival) * 1e6) / 1e3
        r = ex.record
        if r is not None:
            r[STATUS], r[FIRST_BYTE], r[LAST_BYTE] = status, ex.first_byte, ex.last_byte
        self.recent.append(rec)
        if self.log is not None:
            self.log.write(json.dumps(rec, separators=(",", ":")) + "\n")

    def snapshot(self) -> dict[str, Any]:
        return {
            "uptime_s": round(time.time() - self.started, 3),
            "inflight": self.inflight,
            "hanging": self.hanging,
            "nonces_tracked": len(self.store),
            "nonces_evicted": self.store.evicted,
            "shapes_cached": sum(1 for v in self.shapes.values() if v is not None),
            **dict(self.counters),
            "plans": dict(self.plans),
        }


class Exchange:
    """One request on its way: its log line, its store entry and record, and
    when its bytes went out."""

    __slots__ = ("rec", "arrival", "entry", "record", "first_byte", "last_byte", "committed", "tool_stream", "fault")

    def __init__(self, rec: dict[str, Any], arrival: float) -> None:
        self.rec = rec
        self.arrival = arrival
        self.entry: Entry | None = None
        self.record: list[Any] | None = None
        self.first_byte: float | None = None
        self.last_byte: float | None = None
        self.committed = False
        # this response carries tool calls: its last byte starts the nonce's tool phase
        self.tool_stream = False
        # a fault schedule's stall or truncation for this attempt's reply (markers.Fault)
        self.fault: Any = None

    def attach(self, entry: Entry, turn: Turn, dialect: str) -> Entry:
        self.entry = entry
        self.record = entry.add_record(self.arrival, turn.followup, dialect, turn.stream)
        return entry

    def sent(self, first: float | None, last: float) -> None:
        """The response's first and last bytes are being handed to the socket now."""
        self.first_byte = last if first is None else first
        self.last_byte = last
        if self.tool_stream and self.entry is not None:
            self.entry.tool_stream_end = last


def begin(state: MockState, path: str, dialect: Dialect) -> Exchange:
    state.inflight += 1
    state.counters["requests"] += 1
    t0 = time.monotonic()
    # int()/1e6 rather than round(x, 6): the same digits, but round() with
    # ndigits goes through a decimal conversion that cost 5% of the mock's
    # requests/s under make bench
    return Exchange({"ts": int(time.time() * 1e6) / 1e6, "path": path, "dialect": dialect.name}, t0)


def end(state: MockState, ex: Exchange, status: int) -> None:
    state.inflight -= 1
    if not ex.committed:
        state.commit(ex, status)
