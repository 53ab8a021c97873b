"""The per-nonce verdict store: the mock's own record of what happened to each input.

Many kernels reword the model's final answer instead of echoing it, so a
harness cannot rely on reading the verdict line back from the kernel's reply.
It asks the mock instead (``/_mock/verdicts``), by nonce. The server fills an
:class:`Entry` *before* it writes the bytes of the response that carries the
entry's news, so a query made after a turn ended never races the store.

Bounded: the newest ``capacity`` nonces (by first sight; the oldest is dropped
first), and per nonce the newest ``max_records`` request records (``requests``
still counts them all). Times are ``time.monotonic()`` seconds:
CLOCK_MONOTONIC is one clock for every process of a Linux host, so a harness
in another process can put them on its own timeline.

Pure bookkeeping: no I/O and no aiohttp, so it can be tested alone.
"""

from __future__ import annotations

import collections
from typing import Any, Iterable

from .markers import VerdictLine, text_verdict

CAPACITY = 65_536
MAX_RECORDS = 64
QUERY_LIMIT = 10_000

# A request record is a list (mutable: the status of a request whose client went
# away is set after the fact) in this field order; as_json() names the fields.
RECORD_FIELDS = ("arrival", "first_byte", "last_byte", "status", "followup", "dialect", "stream")
ARRIVAL, FIRST_BYTE, LAST_BYTE, STATUS, FOLLOWUP, DIALECT, STREAM = range(len(RECORD_FIELDS))
# Appended only to the records of a nonce with a fault schedule, and of a
# request the rate limit refused (issue 24): the fault the attempt got (None:
# none, the normal reply) and the Retry-After it was sent, in seconds (None:
# no header). Every other record keeps its seven fields and costs nothing more.
FAULT_FIELDS = ("fault", "retry_after")


def _rare(name: str) -> property:
    """An Entry attribute kept in its ``_more`` dict: AttributeError until set, as a slot."""

    def fget(self: "Entry") -> Any:
        try:
            return self._more[name]
        except KeyError:
            raise AttributeError(name) from None

    def fset(self: "Entry", value: Any) -> None:
        try:
            more = self._more
        except AttributeError:
            more = self._more = {}
        more[name] = value

    return property(fget, fset)


class Entry:
    """What the mock knows about one nonce."""

    # Only what most entries carry has a slot; the rarer news (a quirk, a fault,
    # a hang, a refusal, a session turn's or a tool loop's fields) lives in one
    # dict made on first use: 65,536 entries are held, and every slot costs
    # each of them 8 bytes whether set or not.
    __slots__ = (
        "nonce",
        "plan",
        "marker",
        "requests",
        "verdict",
        "verdicts",
        "text_verdict",
        "tool_stream_end",
        "records",
        "records_dropped",
        "_more",
    )

    def __init__(self, nonce: str) -> None:
        # only what every entry needs; the news slots are set when there is news
        # (read through get): an entry is made per request on the hot path
        self.nonce = nonce
        self.plan: str | None = None
        self.marker: str | None = None
        self.requests = 0
        self.records: list[list[Any]] = []
        self.records_dropped = 0

    # the news slots, unset until there is news
    verdict: VerdictLine | None
    verdicts: int
    text_verdict: bool  # served; the line is rendered on query, not kept per nonce
    tool_stream_end: float | None
    _more: dict[str, Any]

    # the rarer news (read them through get, like the slots)
    quirk = _rare("quirk")
    quirk_applied = _rare("quirk_applied")
    fault = _rare("fault")
    hung = _rare("hung")
    error = _rare("error")
    history = _rare("history")  # a session turn's: its first history problem, else "ok"
    user_text = _rare("user_text")  # a session turn's input as first seen (later turns compare)
    loop_step = _rare("loop_step")  # a tool loop's: the last step the mock asked for
    step_tool_ms = _rare("step_tool_ms")  # a tool loop's: each step's tool time, ms
    past_final = _rare("past_final")  # requests after a final answer (a tool loop run past it)
    stamps = _rare("stamps")  # the slow tools' KST-S/KST-E ns by call stamp, from the results the kernel sent
    schedule = _rare("schedule")  # a fault schedule's: markers.Fault
    attempts = _rare("attempts")  # a fault schedule's: the attempts it has decided (rate-limited ones not counted)

    def get(self, name: str, default: Any = None) -> Any:
        return getattr(self, name, default)

    def add_record(self, arrival: float, followup: bool, dialect: str, stream: bool) -> list[Any]:
        """A new request record (status 0 and no bytes sent yet); also counts the request."""
        self.requests += 1
        rec = [arrival, None, None, 0, followup, dialect, stream]
        records = self.records
        records.append(rec)
        if len(records) > MAX_RECORDS:
            del records[0]
            self.records_dropped += 1
        return rec

    def as_json(self) -> dict[str, Any]:
        get = self.get
        v = get("verdict")
        verdict = None
        if v is not None:
            verdict = {
                "line": v.format(),
                "expected": v.expected,
                "got": v.got,
                "ids": v.ids,
                "args": v.args,
                "order": v.order,
                "errors": v.errors,
                "tool_ms": v.tool_ms,
                "all_ok": v.all_ok,
            }
            # as in the log line's "check": a tool loop's and a session turn's fields only there
            if v.loop is not None:
                verdict.update(steps=v.steps, steps_total=v.steps_total, loop=v.loop)
            if v.history is not None:
                verdict["history"] = v.history
        return {
            "nonce": self.nonce,
            "plan": self.plan,
            "marker": self.marker,
            "quirk": get("quirk"),
            "quirk_applied": get("quirk_applied"),
            "requests": self.requests,
            "verdict": verdict,
            "verdicts": get("verdicts", 0),
            "text_verdict": text_verdict(self.nonce, get("history")) if get("text_verdict") else None,
            "fault": None if get("fault") is None else {"kind": self.fault, "injected": True},
            "hung": get("hung", False),
            "error": get("error"),
            "tool_stream_end": get("tool_stream_end"),
            "records": [_record_json(r) for r in self.records],
            "records_dropped": self.records_dropped,
            "history": get("history"),
            "loop_step": get("loop_step"),
            "step_tool_ms": get("step_tool_ms"),
            "past_final": get("past_final", 0),
            "stamps": get("stamps"),
            "schedule": _schedule_json(get("schedule"), get("attempts", 0)),
        }


_N_FIELDS = len(RECORD_FIELDS)


def _record_json(r: list[Any]) -> dict[str, Any]:
    out = dict(zip(RECORD_FIELDS, r))
    if len(r) > _N_FIELDS:
        out.update(zip(FAULT_FIELDS, r[_N_FIELDS:]))
    return out


def _schedule_json(fault: Any, attempts: int) -> dict[str, Any] | None:
    if fault is None:
        return None
    return {
        "marker": fault.token,
        "kind": fault.kind,
        "fault": fault.label,
        # attempts that get the fault; None: every one (!truncate)
        "count": None if fault.kind == "truncate" else fault.count,
        "retry_after": fault.retry_after_s,
        "stall_ms": fault.stall_ms or None,
        "attempts": attempts,
    }


class VerdictStore:
    """Entries by nonce, the newest ``capacity`` of them."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError(f"capacity {capacity} must be at least 1")
        self.capacity = capacity
        # OrderedDict, not dict: dropping a plain dict's first key leaves a hole
        # that every later next(iter(d)) walks past (25 us per request once full,
        # measured); popitem(last=False) is O(1)
        self._entries: collections.OrderedDict[str, Entry] = collections.OrderedDict()
        self.evicted = 0

    def entry(self, nonce: str) -> Entry:
        """The nonce's entry, created (and the oldest dropped) on first sight."""
        e = self._entries.get(nonce)
        if e is None:
            e = self._entries[nonce] = Entry(nonce)
            if len(self._entries) > self.capacity:
                self._entries.popitem(last=False)
                self.evicted += 1
        return e

    def get(self, nonce: str) -> Entry | None:
        return self._entries.get(nonce)

    def query(self, nonces: Iterable[str]) -> dict[str, dict[str, Any] | None]:
        out: dict[str, dict[str, Any] | None] = {}
        for n in nonces:
            e = self._entries.get(n)
            out[n] = None if e is None else e.as_json()
        return out

    def clear(self) -> None:
        self._entries.clear()
        self.evicted = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, nonce: object) -> bool:
        return nonce in self._entries
