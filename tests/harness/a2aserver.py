#!/usr/bin/env python3
"""An instant A2A agent for the driver's tests: aiohttp on loopback, JSON-RPC
with either method set, streaming or not, blocking or submitted-then-poll,
whose LLM is the real kstress mock (a chat-completions loop running the
catalog's `lookup` tool), and which misbehaves on purpose when told to.

    async with A2AAgent(mock_url, Behaviour(version="0.3", submit=True)) as agent:
        agent.url  # the base URL; its card at /.well-known/agent-card.json
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from agentserver import run_tool  # the tools the AG-UI test agent runs: cmd_run really sleeps

V1_METHODS = {"SendMessage": "send", "SendStreamingMessage": "stream", "GetTask": "get", "CancelTask": "cancel"}
V03_METHODS = {"message/send": "send", "message/stream": "stream", "tasks/get": "get", "tasks/cancel": "cancel"}


@dataclass
class Behaviour:
    version: str = "1.0"  # the card's protocolVersion, the method set and the enums answered
    streaming: bool = True  # capabilities.streaming
    submit: bool = False  # message/send answers `submitted` at once (fasta2a); else it blocks until the end
    end: str = "completed"  # the state a task ends in (failed, rejected, canceled, input-required, auth-required)
    # jsonrpc: a JSON-RPC error to every send; http500: HTTP 500 with a text body;
    # cut: the stream closes after `working`; copy-new-id: the full copy under a new artifact id;
    # shared-history: every context continues one history (a planted isolation bug);
    # huge: an SSE event over the frame limit
    fault: str | None = None
    # the card: "ok", "404" (no card anywhere), "html", "no-rpc", "remote-rpc", "wrong-rpc"
    # (an address nobody serves), "grpc-only", "legacy" (only at /.well-known/agent.json)
    card: str = "ok"
    cancel: str = "honour"  # honour: the task is cancelled; noop: wait for it, answer completed (fasta2a)
    chunks: int = 5


@dataclass
class Task:
    id: str
    context_id: str
    state: str = "submitted"
    answer: str = ""
    run: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class A2AAgent:
    def __init__(self, mock_url: str, b: Behaviour | None = None, port: int = 0) -> None:
        self.mock_url = mock_url.rstrip("/")
        self.port = port
        self.b = b or Behaviour()
        self.tasks: dict[str, Task] = {}
        self.histories: dict[str, list[dict[str, Any]]] = {}
        self.contexts_received: list[str | None] = []  # the contextId each send carried
        self.methods: list[str] = []
        self.headers: list[dict[str, str]] = []
        self._runner: web.AppRunner | None = None
        self._http: aiohttp.ClientSession | None = None
        self.url = ""

    async def __aenter__(self) -> "A2AAgent":
        app = web.Application()
        app.router.add_get("/.well-known/agent-card.json", self._card)
        app.router.add_get("/.well-known/agent.json", self._card_legacy)
        app.router.add_post("/rpc", self._rpc)
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", self.port)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._http = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        for t in self.tasks.values():
            if t.run is not None and not t.run.done():
                t.run.cancel()
                with contextlib.suppress(BaseException):
                    await t.run
        if self._http is not None:
            await self._http.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the card -------------------------------------------------------------

    def card(self) -> dict[str, Any]:
        rpc = {"ok": self.url + "/rpc", "legacy": self.url + "/rpc", "remote-rpc": "http://10.1.2.3:8000/rpc",
               "wrong-rpc": self.url + "/nothing-here", "grpc-only": self.url + "/rpc"}.get(self.b.card)
        caps = {"streaming": self.b.streaming, "pushNotifications": False}
        if self.b.version == "1.0":
            card: dict[str, Any] = {"name": "kst-a2a", "capabilities": caps, "skills": []}
            if rpc is not None:
                binding = "GRPC" if self.b.card == "grpc-only" else "JSONRPC"
                card["supportedInterfaces"] = [{"protocolBinding": binding, "url": rpc, "protocolVersion": "1.0"}]
            return card
        card = {"name": "kst-a2a", "protocolVersion": "0.3.0", "capabilities": caps, "skills": []}
        if rpc is not None:
            card.update(url=rpc, preferredTransport="GRPC" if self.b.card == "grpc-only" else "JSONRPC")
        return card

    async def _card(self, request: web.Request) -> web.StreamResponse:
        if self.b.card in ("404", "legacy"):
            raise web.HTTPNotFound(text="404: Not Found")
        if self.b.card == "html":
            return web.Response(text="<!doctype html><html><body>my app</body></html>", content_type="text/html")
        return web.json_response(self.card())

    async def _card_legacy(self, request: web.Request) -> web.StreamResponse:
        if self.b.card != "legacy":
            raise web.HTTPNotFound(text="404: Not Found")
        return web.json_response(self.card())

    # -- the wire shapes of this version ------------------------------------

    def state(self, s: str) -> str:
        return "TASK_STATE_" + s.upper().replace("-", "_") if self.b.version == "1.0" else s

    def wrap(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """A result: 1.0 wraps it ({"task": ...}); 0.3 tags it with `kind`."""
        if self.b.version == "1.0":
            return {{"task": "task", "status-update": "statusUpdate", "artifact-update": "artifactUpdate", "message": "message"}[kind]: obj}
        return {"kind": kind, **obj}

    def task_obj(self, t: Task) -> dict[str, Any]:
        obj: dict[str, Any] = {"id": t.id, "contextId": t.context_id, "status": {"state": self.state(t.state)}}
        if t.state == "completed":
            part = {"text": t.answer} if self.b.version == "1.0" else {"kind": "text", "text": t.answer}
            obj["artifacts"] = [{"artifactId": "a-" + t.id, "name": "result", "parts": [part]}]
        return obj

    def status(self, t: Task, final: bool = False) -> dict[str, Any]:
        u = {"taskId": t.id, "contextId": t.context_id, "status": {"state": self.state(t.state)}}
        if self.b.version != "1.0":
            u["final"] = final
        return self.wrap("status-update", u)

    def chunk(self, t: Task, text: str, append: bool, last: bool, aid: str | None = None) -> dict[str, Any]:
        part = {"text": text} if self.b.version == "1.0" else {"kind": "text", "text": text}
        return self.wrap("artifact-update", {"taskId": t.id, "contextId": t.context_id, "artifact": {"artifactId": aid or "a-" + t.id, "parts": [part]}, "append": append, "lastChunk": last})

    # -- the agent: the mock as its LLM -------------------------------------

    async def agent(self, t: Task, text: str) -> None:
        history = self.histories.setdefault("one" if self.b.fault == "shared-history" else t.context_id, [])
        messages: list[dict[str, Any]] = [{"role": "system", "content": "kst"}, *history, {"role": "user", "content": text}]
        turn = [{"role": "user", "content": text}]
        t.state = "working"
        assert self._http is not None
        for _ in range(8):
            async with self._http.post(self.mock_url + "/v1/chat/completions", json={"model": "kst", "messages": messages}) as r:
                reply = (await r.json())["choices"][0]["message"]
            calls = reply.get("tool_calls") or []
            step = {"role": "assistant", "content": reply.get("content"), **({"tool_calls": calls} if calls else {})}
            messages.append(step)
            turn.append(step)
            if not calls:
                break
            # the calls of a step at once, as a parallel agent runs them
            outs = await asyncio.gather(*(run_tool(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}")) for c in calls))
            for c, out in zip(calls, outs):
                msg = {"role": "tool", "tool_call_id": c["id"], "content": out}
                messages.append(msg)
                turn.append(msg)
        t.answer = reply.get("content") or ""
        t.state = self.b.end
        if t.state == "completed":
            history.extend(turn)

    def start(self, params: dict[str, Any]) -> Task:
        msg = params["message"]
        ctx = msg.get("contextId")
        self.contexts_received.append(ctx)
        text = "".join(p.get("text", "") for p in msg["parts"])
        t = Task(uuid.uuid4().hex, ctx or uuid.uuid4().hex)
        self.tasks[t.id] = t

        async def run() -> None:
            try:
                await self.agent(t, text)
            except asyncio.CancelledError:
                t.state = "canceled"
            finally:
                t.done.set()

        t.run = asyncio.ensure_future(run())
        return t

    # -- JSON-RPC ---------------------------------------------------------------

    async def _rpc(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid, method, params = body.get("id"), body.get("method"), body.get("params") or {}
        self.methods.append(method)
        self.headers.append(dict(request.headers))
        table = V1_METHODS if self.b.version == "1.0" else V03_METHODS
        if method not in table:
            return web.json_response({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": f"Method not found: {method}"}})
        op = table[method]
        if op in ("send", "stream") and self.b.fault == "jsonrpc":
            return web.json_response({"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "Internal error: the agent broke"}})
        if op in ("send", "stream") and self.b.fault == "http500":
            return web.Response(status=500, text="Internal Server Error")
        if op == "get":
            t = self.tasks.get(params.get("id"))
            if t is None:
                return web.json_response({"jsonrpc": "2.0", "id": rid, "error": {"code": -32001, "message": "Task not found"}})
            result = self.task_obj(t) if self.b.version == "1.0" else {"kind": "task", **self.task_obj(t)}
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result})
        if op == "cancel":
            t = self.tasks.get(params.get("id"))
            if t is None:
                return web.json_response({"jsonrpc": "2.0", "id": rid, "error": {"code": -32001, "message": "Task not found"}})
            if self.b.cancel == "honour" and t.run is not None:
                t.run.cancel()
            await t.done.wait()  # noop: fasta2a's broker queues the cancel behind the running task
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": self.task_obj(t)})
        t = self.start(params)
        if op == "send":
            if not self.b.submit:
                await t.done.wait()
            result = self.task_obj(t)
            if self.b.version == "1.0":
                result = {"task": result}
            else:
                result = {"kind": "task", **result}
            return web.json_response({"jsonrpc": "2.0", "id": rid, "result": result})
        return await self._stream(request, rid, t)

    async def _stream(self, request: web.Request, rid: Any, t: Task) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)

        async def send(result: dict[str, Any]) -> None:
            await resp.write(b"data: " + json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode() + b"\n\n")

        await send(self.wrap("task", {"id": t.id, "contextId": t.context_id, "status": {"state": self.state("submitted")}}))
        t.state = "working" if t.state == "submitted" else t.state
        await send(self.status(t))
        if self.b.fault == "cut":
            return resp  # closes the stream with the task still working
        if self.b.fault == "huge":  # one event over the 1 MiB frame limit, never ended
            await resp.write(b'data: {"jsonrpc":"2.0","id":1,"result":{"x":"' + b"x" * ((1 << 20) + 4096))
            return resp
        await t.done.wait()
        if t.state == "completed":
            n = max(1, min(self.b.chunks, len(t.answer)))
            size = -(-len(t.answer) // n)
            pieces = [t.answer[i:i + size] for i in range(0, len(t.answer), size)]
            for i, p in enumerate(pieces):
                # a2a-sdk style: the first chunk opens the artifact (append false), the rest append
                await send(self.chunk(t, p, append=i > 0, last=False))
            if self.b.fault == "copy-new-id":
                await send(self.chunk(t, t.answer, append=False, last=True, aid="result-" + t.id))
            else:
                await send(self.chunk(t, t.answer, append=False, last=True))  # fasta2a's full copy
        await send(self.status(t, final=True))
        return resp


async def _main(argv: list[str] | None = None) -> None:
    import argparse
    import signal

    ap = argparse.ArgumentParser(description="an instant A2A agent whose LLM is the kstress mock")
    ap.add_argument("--llm-url", required=True, help="the mock's base URL (with or without /v1)")
    ap.add_argument("--version", default="1.0", choices=("1.0", "0.3"))
    ap.add_argument("--mode", default="stream", choices=("stream", "block", "submit"))
    ap.add_argument("--end", default="completed")
    ap.add_argument("--fault", default=None)
    ap.add_argument("--card", default="ok")
    ap.add_argument("--cancel", default="honour", choices=("honour", "noop"))
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args(argv)
    b = Behaviour(version=a.version, streaming=a.mode == "stream", submit=a.mode == "submit", end=a.end, fault=a.fault, card=a.card, cancel=a.cancel)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with A2AAgent(a.llm_url.removesuffix("/v1"), b, a.port) as agent:
        print(f"agent listening on {agent.url}", flush=True)
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(_main())
