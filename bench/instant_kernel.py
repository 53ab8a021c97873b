"""An agent kernel that answers instantly, for the driver benchmark: protocol
v1 over a unix socket, every input answered at once with the text verdict the
mock would have produced for it (`KST nonce=N plan=text ok`), no LLM behind it.
Whatever time a driver spends per turn against it is the driver's own, so the
kernel itself must cost far less per turn than any driver: an asyncio Protocol
(no streams), input frames picked apart with two byte regexes instead of a
JSON parse.

    python bench/instant_kernel.py --socket PATH [--token T]
    prints `instant kernel listening on PATH`
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal

from mock.markers import VERDICT_KEY_ENV, sign, verdict_key

ID_RE = re.compile(rb'"id":("(?:[^"\\]|\\.)*"|-?\d+)')
NONCE_RE = re.compile(rb'#([A-Za-z0-9_-]+)"')
# it stands in for the mock too: its lines carry the tag the run's key
# verifies (the driver bench gives both the same KSTRESS_VERDICT_KEY)
KEY = verdict_key(os.environ.get(VERDICT_KEY_ENV))
ACK = b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n'
DENIED = b'{"type":"error","code":"auth_failed","message":"wrong token"}\n'
STATS = b'{"type":"stats","executed":0}\n'


class Instant(asyncio.Protocol):
    def __init__(self, token: str | None) -> None:
        self.token = token
        self.buf = b""
        self.authed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        *lines, self.buf = (self.buf + data).split(b"\n")
        out = []
        for line in lines:
            if not self.authed:
                frame = json.loads(line)
                if frame.get("type") != "auth" or (self.token is not None and frame.get("token") != self.token):
                    self.transport.write(DENIED)
                    self.transport.close()
                    return
                self.authed = True
                out.append(ACK)
            elif b'"type":"stats"' in line:
                out.append(STATS)
            else:
                i, n = ID_RE.search(line), NONCE_RE.search(line)
                if i is None or n is None:  # not the harness's compact encoding: parse it
                    frame = json.loads(line)
                    ident = json.dumps(frame.get("id")).encode()
                    nonce = (re.findall(r"#([A-Za-z0-9_-]+)", frame.get("text", "")) or ["none"])[-1].encode()
                else:
                    ident, nonce = i.group(1), n.group(1)
                line = sign(f"KST nonce={nonce.decode()} plan=text ok", KEY).encode()
                out.append(b'{"type":"response","id":' + ident + b',"text":"' + line + b'"}\n')
        if out:
            self.transport.write(b"".join(out))


async def main(path: str, token: str | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    server = await loop.create_unix_server(lambda: Instant(token), path, backlog=4096)
    print(f"instant kernel listening on {path}", flush=True)
    async with server:
        await stop.wait()
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--token")
    a = ap.parse_args()
    asyncio.run(main(a.socket, a.token))
