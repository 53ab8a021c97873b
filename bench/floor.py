"""The floor for `make bench`: the least an aiohttp server can do per streamed
chat request. It reads and JSON-parses the body, then writes a prebuilt SSE
reply in one write: the same 23 events as the mock's 20-chunk text reply (role,
20 content pieces, finish, [DONE]). Whatever the mock does beyond this is its
own cost.

    python bench/floor.py [--port 0]    prints `floor listening on http://HOST:PORT`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal

from aiohttp import web

TEXT_CHUNKS = 20


def prebuilt_reply(pieces: int = TEXT_CHUNKS) -> bytes:
    head = {"id": "chatcmpl-floor", "object": "chat.completion.chunk", "created": 1700000000, "model": "floor"}

    def event(delta: dict, finish: str | None = None) -> bytes:
        obj = {**head, "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
        return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"

    text = "This is the floor server answering a benchmark request with a fixed reply of twenty pieces. " * 2
    size = len(text) // pieces
    events = [event({"role": "assistant", "content": None})]
    events += [event({"content": text[k * size : (k + 1) * size]}) for k in range(pieces)]
    events += [event({}, "stop"), b"data: [DONE]\n\n"]
    return b"".join(events)


REPLY = prebuilt_reply()


async def chat(request: web.Request) -> web.StreamResponse:
    body = json.loads(await request.read())
    if not body.get("messages"):
        return web.json_response({"error": {"message": "no messages"}}, status=400)
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
    try:
        await resp.prepare(request)
        # one write: headers, the reply and the chunked terminator together,
        # the way the mock sends an unpaced reply
        await resp.write_eof(REPLY)
    except ConnectionResetError:  # wrk closes its connections at the end of a run
        pass
    return resp


async def serve(host: str, port: int) -> None:
    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, host, port, backlog=4096)
        await site.start()
        h, p = runner.addresses[0][:2]
        print(f"floor listening on http://{h}:{p}", flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    args = ap.parse_args()
    asyncio.run(serve(args.host, args.port))


if __name__ == "__main__":
    main()
