"""The floor of the driver benchmark: the least an asyncio client can do per
turn of protocol v1. C connections, each authenticates, then sends K inputs
one after another, each with its own nonce, and reads the answer line.

    python bench/bare_client.py --socket PATH --token T --conns C --inputs K
    prints one JSON line: {"turns": N, "seconds": S, "turns_per_s": R}
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time


async def one(path: str, token: str, inputs: int, conn: int) -> int:
    reader, writer = await asyncio.open_unix_connection(path, limit=1 << 21)
    writer.write(json.dumps({"type": "auth", "token": token}).encode() + b"\n")
    await reader.readuntil(b"\n")
    ok = 0
    for k in range(inputs):
        nonce = f"b{conn}x{k}"
        writer.write(json.dumps({"type": "input", "id": nonce, "text": f"kstress #{nonce}"}).encode() + b"\n")
        await writer.drain()
        answer = json.loads(await reader.readuntil(b"\n"))
        ok += answer.get("id") == nonce
    writer.close()
    return ok


async def main(path: str, token: str, conns: int, inputs: int) -> None:
    t0 = time.monotonic()
    done = await asyncio.gather(*(one(path, token, inputs, c) for c in range(conns)))
    dt = time.monotonic() - t0
    turns = sum(done)
    print(json.dumps({"turns": turns, "seconds": round(dt, 4), "turns_per_s": round(turns / dt, 1)}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--conns", type=int, default=32)
    ap.add_argument("--inputs", type=int, default=100)
    a = ap.parse_args()
    asyncio.run(main(a.socket, a.token, a.conns, a.inputs))
