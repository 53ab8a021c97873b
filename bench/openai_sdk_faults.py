"""What the installed openai SDK does with each of the mock's fault schedules
(issue 24 item 5; the findings are in docs/resilience-pydantic-ai.md).

    .venv/bin/python bench/openai_sdk_faults.py [--max-retries 2] [--timeout 3] [--rate-limit 2/s]

Starts its own mock on 127.0.0.1 (with --rate-limit if given), sends each fault
marker through an `AsyncOpenAI(max_retries=..., timeout=...)` client, once as
pydantic-ai's `Agent.run` sends it (chat completions, not streamed) and once
streamed (`stream=True`, as an agent that shows deltas does), and prints per
case: the attempts the mock saw (its own clock: arrival from the first
attempt, fault, status, the gap since the previous attempt's last byte) and
what the client got. With --rate-limit it also sends a burst of plain requests
that the token bucket must refuse in part. Measures; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from openai import AsyncOpenAI

MARKERS = ["!flaky:429x2", "!flaky:429x2:ra=3", "!flaky:500x3", "!flaky:503x1", "!flaky:529x1",
           "!flaky:resetx1", "!flaky:resetx3", "!stall:5000", "!stall:1000", "!truncate"]


def start_mock(log: Path, rate_limit: str | None) -> tuple[subprocess.Popen[str], str]:
    argv = [sys.executable, "-m", "mock", "--host", "127.0.0.1", "--port", "0", "--log", str(log)]
    if rate_limit:
        argv += ["--rate-limit", rate_limit]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # the mock prints exactly one ready line
    if not line.startswith("mock listening on "):
        proc.kill()
        raise SystemExit(f"the mock did not start: {line!r}")
    return proc, line.split()[-1]


def describe(exc: BaseException) -> str:
    chain, cur = [], exc
    while cur is not None and len(chain) < 4:
        chain.append(f"{type(cur).__name__}: {str(cur)[:80]}")
        cur = cur.__cause__ or cur.__context__
    return " <- ".join(chain)


async def one(client: AsyncOpenAI, text: str, stream: bool) -> str:
    t0 = time.monotonic()
    try:
        if stream:
            parts, finish = [], None
            async for chunk in await client.chat.completions.create(
                    model="kstress-mock", messages=[{"role": "user", "content": text}], stream=True):
                for ch in chunk.choices:
                    parts.append(ch.delta.content or "")
                    finish = ch.finish_reason or finish
            got = f"answer ({len(''.join(parts))} chars, finish_reason={finish}, verdict line={'KST nonce=' in ''.join(parts)})"
        else:
            r = await client.chat.completions.create(model="kstress-mock", messages=[{"role": "user", "content": text}])
            c = r.choices[0]
            calls = len(c.message.tool_calls or [])
            got = f"answer (finish_reason={c.finish_reason}, {calls} tool calls)"
    except Exception as exc:  # noqa: BLE001 - what the client got is the measurement
        got = "raised " + describe(exc)
    return f"client after {time.monotonic() - t0:.3f} s: {got}"


def attempts(url: str, nonce: str) -> list[dict]:
    """The mock store's records of one nonce (docs/mock.md, The entry)."""
    with urllib.request.urlopen(f"{url}/_mock/verdicts?nonce={nonce}", timeout=10) as r:
        entry = json.load(r)["verdicts"][nonce]
    return entry["records"] if entry else []


def timeline(rs: list[dict]) -> str:
    t0, prev, parts = rs[0]["arrival"], None, []
    for r in rs:
        # the gap from the previous attempt's last byte (its arrival for a reset, which sent none)
        gap = "" if prev is None else f" (+{r['arrival'] - (prev.get('last_byte') or prev['arrival']):.3f})"
        ra = "" if r.get("retry_after") is None else f" retry-after {r['retry_after']:g}"
        parts.append(f"t={r['arrival'] - t0:.3f}{gap} {r.get('fault')}/{r['status']}{ra}")
        prev = r
    return f"{len(rs)} attempts: " + ", ".join(parts)


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--max-retries", type=int, default=2, help="[default: 2, the SDK's]")
    p.add_argument("--timeout", type=float, default=3.0, help="the client's timeout in seconds [default: 3]")
    p.add_argument("--rate-limit", help="start the mock with --rate-limit N/s and send a burst of 6")
    p.add_argument("--only", help="one marker instead of the whole list")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "mock.jsonl"
        mock, url = start_mock(log, a.rate_limit)
        try:
            client = AsyncOpenAI(base_url=f"{url}/v1", api_key="kstress", max_retries=a.max_retries, timeout=a.timeout)
            print(f"max_retries={a.max_retries} timeout={a.timeout:g}")
            for marker in [a.only] if a.only else ([] if a.rate_limit else MARKERS):
                for stream in (False, True):
                    nonce = f"{'s' if stream else 'n'}{abs(hash((marker, time.time()))) % 10**8}"
                    got = await one(client, f"{marker} !batch2 #{nonce}" if not stream else f"{marker} #{nonce}", stream)
                    print(f"{marker:20} {'stream' if stream else 'whole '} {timeline(attempts(url, nonce))}\n{'':28}{got}")
            if a.rate_limit:
                nonces = [f"rl{i}x{int(time.time())}" for i in range(6)]
                gots = await asyncio.gather(*(one(client, f"hello #{n}", False) for n in nonces))
                for n, got in zip(nonces, gots):
                    print(f"burst {n}: {timeline(attempts(url, n))}\n{'':28}{got}")
            await client.close()
        finally:
            mock.terminate()
            mock.wait(timeout=10)


if __name__ == "__main__":
    asyncio.run(main())
