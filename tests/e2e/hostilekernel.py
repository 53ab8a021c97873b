#!/usr/bin/env python3
"""A kernel whose every word is an attack on the report that quotes it:
protocol v1 on a unix socket, started like the reference kernel (`--socket S
--llm-url U --data-dir D [--token T]`). A plain input gets HOSTILE as its
reply; an input with a marker (`!`) an error frame with code HOSTILE_CODE and
message HOSTILE; a stats frame carries HOSTILE as its llm_state. Every report
must show these as text (tests/e2e/test_report_escaping.py).

Stdlib only: the sandbox runs it with the project's interpreter.
"""

from __future__ import annotations

import asyncio
import json

from kernelmain import kernel_args, serve_unix

# a tag that navigates the page away, a table-cell splitter, a newline, a quote, a backslash, a code span
HOSTILE = '<meta http-equiv="refresh" content="0;url=http://x">|a\nb"c\\d `e`'
# no space: the failure name (the first word) is error_frame:<the whole code>
HOSTILE_CODE = 'bad"code\\|<b>'
ACK = b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n'


async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        first = json.loads(await reader.readuntil(b"\n"))
        if first.get("type") != "auth":
            return
        writer.write(ACK)
        while True:
            frame = json.loads(await reader.readuntil(b"\n"))
            if frame.get("type") == "stats":
                answer = {"type": "stats", "executed": 0, "llm_state": HOSTILE}
            elif frame.get("type") == "input":
                fid = frame.get("id")
                answer = ({"type": "error", "id": fid, "code": HOSTILE_CODE, "message": HOSTILE} if "!" in str(frame.get("text"))
                          else {"type": "response", "id": fid, "text": HOSTILE})
            else:
                continue
            writer.write(json.dumps(answer).encode() + b"\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, ValueError, asyncio.LimitOverrunError, asyncio.CancelledError):
        pass  # the client went, or the server is closing: either ends this connection
    finally:
        writer.close()


if __name__ == "__main__":
    asyncio.run(serve_unix(kernel_args().socket, serve, "hostile kernel"))
