#!/usr/bin/env python3
"""The OpenAI-compatible drivers' cost per turn (issue 23 item 7, for
``openai-chat`` and ``openai-responses``; harness/wire/openai_compat.py), two
ways, as bench/agui_client.py does for AG-UI:

1. end to end: ``HttpAgentClient`` with the protocol's driver against a bare
   aiohttp client reading the same stream to its end as one body (``bare``,
   the floor bench/a2a_client.py uses) and one reading it line by line with
   aiohttp's readline (``bare-lines``, bench/agui_client.py's floor; since the
   driver splits chunks itself it can beat this one, so the target is held
   to the other), through one instant server of that protocol in this process
   (``/v1/chat/completions`` or ``/v1/responses``, a prebuilt stream per
   POST, no LLM), the same connections (one keep-alive connection each,
   opened before the clock starts), rounds interleaved ABC CBA; the ratio is
   bare time / ours (the issue's target: >= 0.5);
2. the parse alone: the driver's orjson per event against the ``openai``
   package's own per-event path (json.loads, then ``construct_type`` into
   ``ChatCompletionChunk`` / ``ResponseStreamEvent``, what its ``Stream``
   does unless strict) and its validated types, when it is importable --
   why the driver does not use the SDK's types.

The answer is the mock's own text answer with its verdict line (the mock's
``text_reply``), streamed in 20 deltas as the mock streams it, in the full
shapes OpenAI's API sends (ids, indexes, sequence numbers, and on Responses
the whole text again in output_text.done, content_part.done,
output_item.done and response.completed): a server's real stream, not a
minimal one the driver would find cheaper. Before measuring, one turn of
each client is checked: the driver must assemble the answer exactly and the
verdict line must parse, the bare client must read every byte.

    bench/openai_client.py [--protocol both|chat|responses] [--conns 4] [--turns 300] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import aiohttp  # noqa: E402
import orjson  # noqa: E402
from aiohttp import web  # noqa: E402

from harness.wire.agents import HttpAgentClient, agent_driver  # noqa: E402
from mock.dialects.base import text_reply  # noqa: E402
from mock.markers import parse_text_verdict  # noqa: E402

NONCE = "bench"
ANSWER = text_reply(NONCE)
PIECES = 20
_step = -(-len(ANSWER) // PIECES)
DELTAS = [ANSWER[i:i + _step] for i in range(0, len(ANSWER), _step)]
CREATED = 1700000000
USAGE = {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0}, "output_tokens": 40,
         "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 60}


def _chat_events() -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": CREATED, "model": "agent",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": d}) for d in DELTAS]
    events.append(chunk({}, "stop"))
    return [orjson.dumps(e) for e in events]


def _responses_events() -> list[tuple[str, bytes]]:
    seq = iter(range(10_000))
    where = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    part = {"type": "output_text", "text": ANSWER, "annotations": []}
    item = {"id": "msg_bench", "type": "message", "status": "completed", "role": "assistant", "content": [part]}

    def response(status: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
        return {"id": "resp_bench", "object": "response", "created_at": CREATED, "status": status, "model": "agent",
                "output": output, "usage": usage, "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}

    def ev(kind: str, **f: Any) -> tuple[str, bytes]:
        return kind, orjson.dumps({"type": kind, "sequence_number": next(seq), **f})

    events = [
        ev("response.created", response=response("in_progress", [])),
        ev("response.in_progress", response=response("in_progress", [])),
        ev("response.output_item.added", output_index=0, item={**item, "status": "in_progress", "content": []}),
        ev("response.content_part.added", **where, part={**part, "text": ""}),
        *(ev("response.output_text.delta", **where, delta=d, logprobs=[]) for d in DELTAS),
        ev("response.output_text.done", **where, text=ANSWER, logprobs=[]),
        ev("response.content_part.done", **where, part=part),
        ev("response.output_item.done", output_index=0, item=item),
        ev("response.completed", response=response("completed", [item], USAGE)),
    ]
    return events


CHAT_EVENTS = _chat_events()
RESPONSES_EVENTS = _responses_events()
# name -> (path, the stream, the body the bare client posts: what the driver sends)
PROTOCOLS = {
    "chat": ("/v1/chat/completions", b"".join(b"data: " + e + b"\n\n" for e in CHAT_EVENTS) + b"data: [DONE]\n\n",
             {"model": "agent", "messages": [{"role": "user", "content": f"kstress #{NONCE}"}], "stream": True}),
    "responses": ("/v1/responses", b"".join(b"event: " + k.encode() + b"\ndata: " + e + b"\n\n" for k, e in RESPONSES_EVENTS),
                  {"model": "agent", "input": [{"type": "message", "role": "user", "content": f"kstress #{NONCE}"}], "stream": True, "store": False}),
}
DRIVERS = {"chat": "openai-chat", "responses": "openai-responses"}


async def instant(streams: dict[str, bytes] | None = None) -> tuple[web.AppRunner, str]:
    """One server with both endpoints; a body without messages/input (the
    driver's probe of ``{}``) gets the 400 an OpenAI server answers.
    ``streams`` (protocol -> bytes) replaces a stream: the tests plant a
    broken one to see the checks fail."""
    streams = {k: v[1] for k, v in PROTOCOLS.items()} | (streams or {})

    def route(key: str, stream: bytes) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            body = orjson.loads(await request.read())
            if key not in body:
                return web.json_response({"error": {"message": f"{key} is required", "type": "invalid_request_error"}}, status=400)
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await resp.write(stream)
            await resp.write_eof()
            return resp

        return handler

    app = web.Application()
    app.router.add_post(PROTOCOLS["chat"][0], route("messages", streams["chat"]))
    app.router.add_post(PROTOCOLS["responses"][0], route("input", streams["responses"]))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def ours(proto: str, base: str, conns: int, turns: int, check: bool = False) -> float:
    url = base + PROTOCOLS[proto][0]
    cs = [await HttpAgentClient(agent_driver(DRIVERS[proto], url)).connect() for _ in range(conns)]
    try:
        for c in cs:
            await c.prepare(10)  # as a run does, once per connection; off the clock
        if check:
            t = await cs[0].turn("", 10)
            assert t.outcome == "response", (t.outcome, t.error_code, t.error_message, t.conn_error)
            got = t.response_text if t.response_text is not None else "".join(t.deltas)
            assert got == ANSWER, f"{proto}: the driver assembled {got!r}"
            assert parse_text_verdict(got) == NONCE, f"{proto}: no passing verdict line in {got!r}"
            return 0.0

        async def loop(c: HttpAgentClient) -> None:
            for _ in range(turns):
                t = await c.turn("", 10)
                assert t.outcome == "response", (t.outcome, t.error_code, t.error_message, t.conn_error)

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(c) for c in cs))
        return time.perf_counter() - t0
    finally:
        for c in cs:
            await c.aclose()


async def bare(proto: str, base: str, conns: int, turns: int, check: bool = False, lines: bool = False) -> float:
    """A bare aiohttp client: each turn's stream read as one body
    (bench/a2a_client.py's floor), or, ``lines``, line by line with the
    stream's readline (bench/agui_client.py's floor)."""
    path, stream, body = PROTOCOLS[proto]
    url, data = base + path, orjson.dumps(body)
    headers = {"Accept": "text/event-stream", "Content-Type": "application/json"}
    ss = [aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) for _ in range(conns)]
    try:
        for s in ss:  # open each connection off the clock, as ours does
            async with s.post(url, data=b"{}", headers=headers) as resp:
                await resp.read()
        if check:
            async with ss[0].post(url, data=data, headers=headers) as resp:
                n = 0
                async for line in resp.content:
                    n += len(line)
            assert n == len(stream), f"{proto}: the bare client read {n} of {len(stream)} bytes"
            return 0.0

        async def loop(s: aiohttp.ClientSession) -> None:
            for _ in range(turns):
                async with s.post(url, data=data, headers=headers) as resp:
                    if lines:
                        async for _line in resp.content:
                            pass
                    else:
                        await resp.read()

        t0 = time.perf_counter()
        await asyncio.gather(*(loop(s) for s in ss))
        return time.perf_counter() - t0
    finally:
        for s in ss:
            await s.close()


def _raw(proto: str) -> list[bytes]:
    return CHAT_EVENTS if proto == "chat" else [e for _, e in RESPONSES_EVENTS]


def sdk_model(proto: str) -> Any:
    """The openai package's type of one stream event, or None when it is not
    importable here."""
    try:
        if proto == "chat":
            from openai.types.chat import ChatCompletionChunk as Model
        else:
            from openai.types.responses import ResponseStreamEvent as Model
    except ImportError:
        return None
    return Model


def sdk_adapter(proto: str) -> Any:
    model = sdk_model(proto)
    if model is None:
        return None
    from pydantic import TypeAdapter  # openai's own dependency

    return TypeAdapter(model)


def check_shapes(proto: str) -> None:
    """Every event of the stream is one the openai SDK accepts: the bench
    measures a real stream, not a minimal one cheaper to read."""
    ta = sdk_adapter(proto)
    if ta is None:
        return
    from pydantic import ValidationError

    for e in _raw(proto):
        try:
            ta.validate_json(e)
        except ValidationError as exc:
            raise SystemExit(f"bench/openai_client.py: the {proto} stream has an event the openai SDK refuses "
                             f"({exc.error_count()} errors): {e[:120]!r}") from None


def _per_turn_us(f: Any, raw: list[bytes], budget_s: float = 0.5) -> float:
    """µs to read one turn's events with ``f``, looped for about ``budget_s``
    (a slow reader gets fewer loops, not a longer bench)."""
    n, t0 = 0, time.perf_counter()
    while True:
        for e in raw:
            f(e)
        n += 1
        dt = time.perf_counter() - t0
        if dt >= budget_s and n >= 10:
            return dt / n * 1e6


def parse_cost(proto: str) -> None:
    raw = _raw(proto)
    ours_us = _per_turn_us(orjson.loads, raw)
    print(f"  parse, orjson (the driver): {ours_us:.1f} us a turn of {len(raw)} events")
    ta = sdk_adapter(proto)
    if ta is None:
        print("  parse, openai SDK types: not importable here (pip install openai)")
        return
    import json

    from openai._models import construct_type  # what openai's Stream does per event unless strict

    model = sdk_model(proto)
    built_us = _per_turn_us(lambda e: construct_type(type_=model, value=json.loads(e)), raw)
    strict_us = _per_turn_us(ta.validate_json, raw)
    print(f"  parse, the openai SDK's own path (json.loads + construct_type): {built_us:.1f} us a turn ({built_us / ours_us:.1f}x); "
          f"validated (TypeAdapter.validate_json): {strict_us:.1f} us ({strict_us / ours_us:.1f}x)")


async def main(a: argparse.Namespace) -> int:
    protos = ["chat", "responses"] if a.protocol == "both" else [a.protocol]
    runner, base = await instant()
    low = []
    try:
        for proto in protos:
            check_shapes(proto)
            await ours(proto, base, 1, 1, check=True)
            await bare(proto, base, 1, 1, check=True)
            res: dict[str, list[float]] = {"ours": [], "bare": [], "bare-lines": []}
            for rnd in range(a.rounds):
                order = [("ours", ours, {}), ("bare", bare, {}), ("bare-lines", bare, {"lines": True})]
                for name, f, kw in order if rnd % 2 == 0 else order[::-1]:  # ABC CBA
                    res[name].append(await f(proto, base, a.conns, a.turns, **kw))
            n = a.conns * a.turns
            _, stream, _ = PROTOCOLS[proto]
            events = len(CHAT_EVENTS) + 1 if proto == "chat" else len(RESPONSES_EVENTS)
            print(f"{DRIVERS[proto]} ({events} events, {len(stream)} bytes a turn; {a.conns} connections x {a.turns} turns):")
            for k, v in res.items():
                print(f"  {k}: " + ", ".join(f"{x * 1e6 / n:.0f}" for x in v) + f" us a turn (median {statistics.median(v) * 1e6 / n:.0f})")
            ratio = statistics.median(res["bare"]) / statistics.median(res["ours"])
            by_line = statistics.median(res["bare-lines"]) / statistics.median(res["ours"])
            print(f"  ratio bare/ours (median): {ratio:.2f} (target >= 0.5); bare-lines/ours: {by_line:.2f}")
            if ratio < 0.5:
                low.append(DRIVERS[proto])
            if not a.no_parse:
                parse_cost(proto)
    finally:
        await runner.cleanup()
    if low:
        print(f"below the target ratio 0.5: {', '.join(low)}")
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=("both", "chat", "responses"), default="both")
    ap.add_argument("--conns", type=int, default=4)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-parse", action="store_true", help="skip the parse-alone comparison")
    args = ap.parse_args()
    for flag, value, least in (("--conns", args.conns, 1), ("--turns", args.turns, 1), ("--rounds", args.rounds, 2)):
        if value < least:  # argparse's usage error: exit 2
            ap.error(f"{flag} {value}: must be at least {least} ({'medians of interleaved rounds' if flag == '--rounds' else 'something to measure'}); e.g. {flag} {max(least, 2)}")
    sys.exit(asyncio.run(main(args)))
