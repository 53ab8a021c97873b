#!/usr/bin/env python3
"""Kernels that misbehave on purpose, for the fault suite: protocol v1 on a
unix socket, started like the reference kernel (`--socket S --llm-url U
--data-dir D [--token T]`, or the token from $REFKERNEL_TOKEN).

    mute       accepts connections and never reads a byte
    flood      authenticates, then sends small notify frames for ever
    flood-answer  answers the first input with small deltas of its own id, for ever
    flood-stray   answers the first input with 512 KiB frames for ids nobody sent, for ever
    flood-notes   answers the first input with 512 KiB notify frames, for ever
    oversize   authenticates, then answers every input with a 2 MiB line
    stats-only authenticates and answers stats frames, never an input

Stdlib only: the sandbox runs it with the project's interpreter.
"""

from __future__ import annotations

import asyncio
import json

from kernelmain import kernel_args, serve_unix

ACK = b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n'


async def authed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    try:
        frame = json.loads(await reader.readuntil(b"\n"))
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        return False
    if frame.get("type") != "auth":
        return False
    writer.write(ACK)
    return True


async def serve(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        if mode == "mute":
            await asyncio.Event().wait()  # hold the connection, read nothing
        if not await authed(reader, writer):
            return
        if mode == "flood":
            note = b'{"type":"notify","text":"' + b"x" * 64 + b'"}\n'
            while True:
                writer.write(note * 64)
                await writer.drain()
        while True:
            frame = json.loads(await reader.readuntil(b"\n"))
            if mode in FLOODS and frame.get("type") == "input":
                await flood(mode, json.dumps(frame.get("id")).encode(), writer)
            if frame.get("type") == "stats":
                writer.write(b'{"type":"stats","executed":0}\n')
            elif mode == "oversize":
                writer.write(b'{"type":"delta","id":' + json.dumps(frame.get("id")).encode() + b',"text":"' + b"y" * (2 << 20))
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError, asyncio.CancelledError):
        pass  # the client went, or the server is closing: either ends this connection
    finally:
        writer.close()


FLOODS = ("flood-answer", "flood-stray", "flood-notes")


async def flood(mode: str, fid: bytes, writer: asyncio.StreamWriter) -> None:
    """Frames after an input, for ever: what a harness holds of them must stay bounded."""
    big = b"s" * (512 << 10)
    n = 0
    while True:
        n += 1
        if mode == "flood-answer":
            writer.write((b'{"type":"delta","id":' + fid + b',"text":"' + b"z" * 16 + b'"}\n') * 64)
        elif mode == "flood-stray":
            writer.write(b'{"type":"delta","id":"nobody-%d","text":"' % n + big + b'"}\n')
        else:
            writer.write(b'{"type":"notify","text":"' + big + b'"}\n')
        await writer.drain()


if __name__ == "__main__":
    a = kernel_args(("mute", "flood", *FLOODS, "oversize", "stats-only"))
    asyncio.run(serve_unix(a.socket, lambda r, w: serve(a.mode, r, w), f"bad kernel ({a.mode})"))
