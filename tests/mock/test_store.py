"""mock/store.py: bounded per-nonce entries and their JSON form."""

from __future__ import annotations

import json

import pytest

from mock.markers import VerdictLine
from mock.store import MAX_RECORDS, RECORD_FIELDS, Entry, VerdictStore

ENTRY_KEYS = {
    "nonce", "plan", "marker", "quirk", "quirk_applied", "requests", "verdict", "verdicts", "text_verdict",
    "fault", "hung", "error", "tool_stream_end", "records", "records_dropped",
    "history", "loop_step", "step_tool_ms", "past_final", "stamps",
    "schedule",  # issue 24: a fault schedule's, else null
}  # fmt: skip


def test_oldest_nonce_is_dropped_first() -> None:
    store = VerdictStore(capacity=3)
    for n in "abcd":
        store.entry(n).plan = "batch"
    assert len(store) == 3 and "a" not in store and store.evicted == 1
    # seeing a kept nonce again does not make it new: first sight orders them
    store.entry("b")
    store.entry("e")
    assert list(store.query("abcde").values()) == [None, None, store.query("c")["c"], store.query("d")["d"], store.query("e")["e"]]
    store.clear()
    assert len(store) == 0 and store.evicted == 0


def test_records_are_bounded_and_counted() -> None:
    e = Entry("n")
    for k in range(MAX_RECORDS + 5):
        rec = e.add_record(float(k), k % 2 == 1, "chat", True)
    assert rec == [float(MAX_RECORDS + 4), None, None, 0, False, "chat", True]
    assert e.requests == MAX_RECORDS + 5 and e.records_dropped == 5
    assert len(e.records) == MAX_RECORDS and e.records[0][0] == 5.0, "the newest records are kept"


def test_entry_json_schema() -> None:
    e = Entry("n1")
    assert set(e.as_json()) == ENTRY_KEYS
    e.plan, e.marker = "batch", "!batch2"
    rec = e.add_record(10.0, True, "anthropic", False)
    rec[1:4] = [10.5, 10.5, 200]
    e.verdict = VerdictLine("n1", "batch", 2, 1, True, True, False, 1, 12)
    e.fault = "429"
    out = json.loads(json.dumps(e.as_json()))  # JSON-ready as it is
    assert out["verdict"] == {
        "line": "KST nonce=n1 plan=batch expected=2 got=1 ids=ok args=ok order=bad errors=1 tool_ms=12",
        "expected": 2, "got": 1, "ids": True, "args": True, "order": False, "errors": 1, "tool_ms": 12, "all_ok": False,
    }  # fmt: skip
    assert out["records"] == [dict(zip(RECORD_FIELDS, [10.0, 10.5, 10.5, 200, True, "anthropic", False]))]
    assert out["fault"] == {"kind": "429", "injected": True} and out["requests"] == 1


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        VerdictStore(capacity=0)
