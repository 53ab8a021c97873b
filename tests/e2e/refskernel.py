#!/usr/bin/env python3
"""A sessions kernel on the Responses API that keeps each session's history
the way the Responses API invites: the user messages as they were, each
earlier answer as an ``item_reference`` to the output item the API returned
(the API, which stores responses, would resolve it; the stateless mock
cannot). Protocol v1 on a unix socket, started like the reference kernel
(`--socket S --llm-url U --data-dir D`); text turns only (it runs no tools).

    refs   earlier answers as {"type": "item_reference", "id": <msg id>}
    full   earlier answers as the assistant message items themselves (the control)

Before issue 22 the `refs` kernel passed `sessions` with history=ok.
Stdlib only.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from kernelmain import kernel_args, serve_unix

ACK = b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n'


def ask(url: str, items: list[dict]) -> dict:
    body = json.dumps({"model": "refs", "input": items}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/responses", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def answer_of(response: dict) -> tuple[str, dict]:
    """The reply's text and its output message item."""
    msg = next(o for o in response["output"] if o.get("type") == "message")
    return "".join(p.get("text", "") for p in msg["content"]), msg


async def serve(mode: str, llm_url: str, histories: dict[str, list[dict]], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        if json.loads(await reader.readuntil(b"\n")).get("type") != "auth":
            return
        writer.write(ACK)
        while True:
            frame = json.loads(await reader.readuntil(b"\n"))
            if frame.get("type") == "stats":
                writer.write(b'{"type":"stats","executed":0}\n')
                continue
            if frame.get("type") != "input":
                continue
            session = frame.get("session")
            history = histories.setdefault(session, []) if session is not None else []
            user = {"role": "user", "content": frame.get("text") or ""}
            text, msg = answer_of(await asyncio.to_thread(ask, llm_url, [*history, user]))
            kept = {"type": "item_reference", "id": msg["id"]} if mode == "refs" else {"type": "message", "role": "assistant", "content": msg["content"]}
            history += [user, kept]
            writer.write(json.dumps({"type": "response", "id": frame.get("id"), "text": text}).encode() + b"\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


if __name__ == "__main__":
    a = kernel_args(("refs", "full"))
    histories: dict[str, list[dict]] = {}
    asyncio.run(serve_unix(a.socket, lambda r, w: serve(a.mode, a.llm_url, histories, r, w), f"item-reference kernel ({a.mode})"))
