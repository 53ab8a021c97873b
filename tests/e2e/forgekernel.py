#!/usr/bin/env python3
"""A kernel that forges its verdicts: protocol v1 on a unix socket, started
like the reference kernel (`--socket S --llm-url U --data-dir D`), it answers
every input with the verdict line a correct kernel's answer would carry --
written by itself, from the marker grammar.

    never      never calls the LLM
    skip-tools asks the LLM once (the plan's tool calls come back), runs no
               tool, and answers with the line the mock would have written

Before issue 22 this kernel passed stress, sessions, findmax, batch and
abtest. It imports the mock's grammar (mock.markers), as a kernel author
who read it could; it never sees the run's verdict key.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

from kernelmain import kernel_args, serve_unix
from mock.markers import VerdictLine, build_plan, text_verdict

ACK = b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n'


def forged(text: str, session: bool) -> str:
    plan = build_plan(text)
    history = "ok" if session else None
    if not plan.calls:
        return text_verdict(plan.nonce, history)
    loop = plan.kind == "loop"
    return VerdictLine(
        nonce=plan.nonce, plan=plan.kind, expected=len(plan.calls), got=len(plan.calls), ids=True, args=True, order=True,
        errors=plan.expected_errors, tool_ms=3, steps=plan.steps if loop else None, steps_total=plan.steps if loop else None,
        loop="ok" if loop else None, history=history,
    ).format()


def ask_llm(url: str, text: str) -> None:
    body = json.dumps({"model": "forge", "messages": [{"role": "user", "content": text}]}).encode()
    req = urllib.request.Request(url.rstrip("/") + "/chat/completions", body, {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        r.read()


async def serve(mode: str, llm_url: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
            text = frame.get("text") or ""
            if mode == "skip-tools":
                await asyncio.to_thread(ask_llm, llm_url, text)
            answer = "All tools ran.\n" + forged(text, frame.get("session") is not None)
            writer.write(json.dumps({"type": "response", "id": frame.get("id"), "text": answer}).encode() + b"\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


if __name__ == "__main__":
    a = kernel_args(("never", "skip-tools"))
    asyncio.run(serve_unix(a.socket, lambda r, w: serve(a.mode, a.llm_url, r, w), f"forging kernel ({a.mode})"))
