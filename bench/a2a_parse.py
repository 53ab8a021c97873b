#!/usr/bin/env python3
"""The A2A driver's parse cost per turn (issue 23 item 7's A2A half, the
pure part): the driver's SSE parser and reader (harness/wire/a2a.py) on a
turn's recorded stream, against what a2a-sdk 1.x would cost for the same
bytes (its JSON-RPC client: json.loads of each event's data, then
parse_lenient into the StreamResponse protobuf), when a2a-sdk is importable.

The transcripts are fasta2a 2.1.1's, as the research doc recorded them (a
task, working, 20 append chunks, the whole answer again, completed), and an
a2a-sdk 0.3 server's (kind, CRLF, first chunk append false).

    bench/a2a_parse.py [--answer-bytes 400] [--turns 2000]
    PYTHONPATH=... bench/a2a_parse.py   # with a2a-sdk on the path: its numbers too
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness.wire.a2a import SSEParser, TurnReader, feed_event  # noqa: E402


class NullSink:
    def frame(self, event, size): pass
    def delta(self, text): pass
    def tool(self, *a, **k): pass
    def done(self, text): pass
    def error(self, code, message): raise AssertionError((code, message))


def fasta2a(answer: str, v1: bool) -> list[bytes]:
    st = (lambda s: "TASK_STATE_" + s.upper()) if v1 else (lambda s: s)
    ids = {"taskId": "99b4", "contextId": "570e"}
    ev = [{"task": {"id": "99b4", "contextId": "570e", "status": {"state": st("submitted")}, "history": [{"role": "ROLE_USER" if v1 else "user", "parts": [{"text": "!batch4 #abc123"}], "messageId": "83fc"}]}},
          {"statusUpdate": {**ids, "status": {"state": st("working")}}}]
    n = len(answer)
    for i in range(20):
        ev.append({"artifactUpdate": {**ids, "artifact": {"artifactId": "d30b", "parts": [{"text": answer[i * n // 20:(i + 1) * n // 20]}]}, "append": True, "lastChunk": False}})
    ev.append({"artifactUpdate": {**ids, "artifact": {"artifactId": "d30b", "name": "result", "parts": [{"text": answer}]}, "append": False, "lastChunk": True}})
    ev.append({"statusUpdate": {**ids, "status": {"state": st("completed")}}})
    return [b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": e}).encode() + b"\n\n" for e in ev]


def ours(chunks: list[bytes]) -> None:
    sse, reader = SSEParser(), TurnReader(NullSink())
    for c in chunks:
        for data in sse.feed(c):
            feed_event(data, reader)
    reader.finish()
    assert reader.ended


def sdk_parser():
    try:
        from a2a.types.a2a_pb2 import StreamResponse
        from a2a.utils.proto_utils import parse_lenient
    except ImportError:
        return None

    def sdk(chunks: list[bytes]) -> None:
        # its client's per-event work alone (json.loads, then the protobuf):
        # the SSE split and the turn's logic would come on top
        for c in chunks:
            data = c[6:].strip()
            parse_lenient(json.loads(data)["result"], StreamResponse())
    return sdk


def per_turn(fn, chunks: list[bytes], turns: int) -> float:
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(turns):
            fn(chunks)
        best = min(best, (time.perf_counter() - t0) / turns)
    return best * 1e6


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--answer-bytes", type=int, default=400)
    ap.add_argument("--turns", type=int, default=2000)
    a = ap.parse_args()
    answer = ("KST nonce=abc123 plan=batch expected=4 got=4 ids=ok args=ok order=ok errors=0 tool_ms=23\n" * 100)[: a.answer_bytes]
    sdk = sdk_parser()
    for name, v1 in (("fasta2a 0.3 names", False), ("fasta2a 1.0 names", True)):
        chunks = fasta2a(answer, v1)
        line = f"{name}: {len(chunks)} events, {sum(map(len, chunks))} bytes; kstress {per_turn(ours, chunks, a.turns):.1f} us/turn"
        if sdk is not None and v1:
            line += f"; a2a-sdk parse alone {per_turn(sdk, chunks, a.turns):.1f} us/turn"
        print(line)


if __name__ == "__main__":
    main()
