#!/usr/bin/env python3
"""Placeholder demo until the sandbox and scenarios land: start the mock, stream
one `!slowbatch4` through the official openai SDK, run the four tool calls as a
kernel would, and print the mock's verdict line."""
import asyncio
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import openai  # noqa: E402

from mock import MockServer, markers  # noqa: E402


def drive(url: str) -> int:
    client = openai.OpenAI(base_url=url + "/v1", api_key="demo", max_retries=0)
    messages = [{"role": "user", "content": markers.compose("!slowbatch4", "demo1")}]
    with client.chat.completions.stream(model="demo", messages=messages) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    print(f"streamed {len(calls)} tool calls: {[c.function.name for c in calls]}")
    procs = [subprocess.Popen(["/bin/sh", "-c", json.loads(c.function.arguments)["command"]], stdout=subprocess.PIPE, text=True) for c in calls]
    outputs = [p.communicate()[0] for p in procs]
    messages.append({"role": "assistant", "content": None, "tool_calls": [c.model_dump(exclude_none=True) for c in calls]})
    messages += [{"role": "tool", "tool_call_id": c.id, "content": out} for c, out in zip(calls, outputs)]
    reply = client.chat.completions.create(model="demo", messages=messages).choices[0].message.content or ""
    line = markers.parse_verdict(reply)
    print(reply.splitlines()[0])
    return 0 if line is not None and line.all_ok and line.errors == 0 else 1


async def main() -> int:
    async with MockServer() as server:
        print(f"mock listening on {server.url}")
        return await asyncio.to_thread(drive, server.url)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
