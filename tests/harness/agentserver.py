#!/usr/bin/env python3
"""An instant agent served over AG-UI or an OpenAI-compatible API (issue 23):
what a team's production agent looks like from outside, with no kstress code
in it. Its LLM is the real kstress mock (``--llm-url``): it sends the user's
text, runs the tool calls that come back (the mock catalog's default names:
lookup, cmd_run, knowledge_create, ...) concurrently, sends the results, and
streams the final answer, showing its tool calls as the protocol does.

    python agentserver.py --protocol agui --llm-url http://127.0.0.1:P/v1 [--fault F]

prints ``agent listening on http://127.0.0.1:PORT/PATH`` (PATH: /agui,
/v1/chat/completions or /v1/responses). ``--fault`` makes it misbehave on
purpose, one way each, to see kstress name it:

    run_error      AG-UI: RUN_ERROR in place of RUN_FINISHED
    cut            the stream ends before its end (no RUN_FINISHED / [DONE] / response.completed)
    no_result      AG-UI: the first tool call gets no TOOL_CALL_RESULT
    dup_result     AG-UI: the first tool call gets two
    wrong_id       AG-UI: tool calls shown under ids of the agent's own
    wrong_args     AG-UI: tool calls shown with other arguments than the LLM gave
    hide_tools     AG-UI: no TOOL_CALL_* events at all
    html           every path answers a web page
    json           the endpoint answers plain JSON (the answer) where SSE was due
    error_event    OpenAI: an error event in place of the end
    shared_history AG-UI: one history for every thread (the last run's input leaks into the next run's)
    ignore_cancel  AG-UI: a run goes on to its end when its client closes the stream (no cancel)

Importable too: ``make_app(protocol, llm_url, fault)`` for an in-process server.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import uuid

from aiohttp import ClientSession, ClientTimeout, web

PATHS = {"agui": "/agui", "openai-chat": "/v1/chat/completions", "openai-responses": "/v1/responses"}


async def run_tool(name: str, args: dict) -> str:
    if name == "lookup":
        return f"lookup {args.get('key')}: entry (query {args.get('query')!r})"
    if name == "cmd_run":
        proc = await asyncio.create_subprocess_exec("/bin/sh", "-c", str(args.get("command", "")), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            proc.kill()
            await proc.wait()
            raise
        return out.decode(errors="replace") or "(no output)"
    if name == "knowledge_create":
        return f"created note {args.get('title')}"
    if name == "resident_start":
        return f"started {args.get('name')}"
    if name == "notify":
        return "notified"
    return f"ERROR: {name} has no model here"


class Agent:
    """The agent loop: LLM, tools, LLM, ... (at most 8 steps)."""

    def __init__(self, llm_url: str) -> None:
        self.llm_url = llm_url.rstrip("/")
        self.http: ClientSession | None = None

    async def llm(self, messages: list[dict]) -> dict:
        if self.http is None:
            self.http = ClientSession(timeout=ClientTimeout(total=60))
        async with self.http.post(f"{self.llm_url}/chat/completions", json={"model": "agent", "messages": messages}) as r:
            if r.status != 200:
                raise RuntimeError(f"LLM answered {r.status}: {(await r.text())[:200]}")
            return (await r.json())["choices"][0]["message"]

    async def run(self, messages: list[dict], emit) -> str:
        """``emit(kind, **fields)`` is told tool_start(id, name, args),
        tool_result(id, content) and text(delta); returns the answer."""
        msgs = [{"role": "system", "content": "You are an agent."}, *messages]
        for _ in range(8):
            msg = await self.llm(msgs)
            calls = msg.get("tool_calls") or []
            if not calls:
                text = msg.get("content") or ""
                for i in range(0, len(text), 64):
                    await emit("text", delta=text[i:i + 64])
                return text
            msgs.append({"role": "assistant", "content": msg.get("content"), "tool_calls": calls})
            for c in calls:
                await emit("tool_start", id=c["id"], name=c["function"]["name"], args=c["function"]["arguments"])

            async def one(c: dict) -> tuple[str, str]:
                out = await run_tool(c["function"]["name"], json.loads(c["function"]["arguments"] or "{}"))
                await emit("tool_result", id=c["id"], content=out)
                return c["id"], out

            results = dict(await asyncio.gather(*(one(c) for c in calls)))
            msgs += [{"role": "tool", "tool_call_id": c["id"], "content": results[c["id"]]} for c in calls]
        raise RuntimeError("more than 8 steps")

    async def aclose(self) -> None:
        if self.http is not None:
            await self.http.close()


def chat_message(m: dict) -> dict:
    """An AG-UI message as a chat completions one (what a stateless agent does
    with the history its client sends)."""
    if m["role"] == "tool":
        return {"role": "tool", "tool_call_id": m["toolCallId"], "content": m.get("content") or ""}
    if m.get("toolCalls"):
        return {"role": "assistant", "content": m.get("content") or None, "tool_calls": m["toolCalls"]}
    return {"role": m["role"], "content": m.get("content") or ""}


def sse(obj: dict) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def make_app(protocol: str, llm_url: str, fault: str = "none") -> web.Application:
    agent = Agent(llm_url)
    shared: list[dict] = []  # the shared_history fault's
    app = web.Application()

    runs: set[asyncio.Future] = set()  # the ignore_cancel fault's runs, on after their requests

    async def close(_app: web.Application) -> None:
        for run in list(runs):
            run.cancel()
        await asyncio.gather(*runs, return_exceptions=True)
        await agent.aclose()

    app.on_cleanup.append(close)

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        return resp

    async def agui(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not isinstance(body, dict) or not {"threadId", "runId", "messages"} <= body.keys():
            return web.json_response({"detail": "not a RunAgentInput"}, status=422)
        messages = [chat_message(m) for m in body["messages"] if m.get("role") in ("user", "assistant", "tool")]
        if fault == "shared_history":
            # a planted bug: a history held per process, not per threadId
            leaked, shared[:] = list(shared), [m for m in messages if m["role"] == "user"][-1:]
            messages = leaked + messages
        if fault == "json":
            answer = await agent.run(messages, _no_emit)
            return web.json_response({"answer": answer})
        resp = await stream(request)
        first: list[str] = []

        async def emit(kind: str, **f) -> None:
            if kind == "text":
                await resp.write(sse({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": f["delta"]}))
                return
            if fault == "hide_tools":
                return
            cid = "mine_" + f["id"][-6:] if fault == "wrong_id" else f["id"]
            if kind == "tool_start":
                first.append(cid)
                await resp.write(sse({"type": "TOOL_CALL_START", "toolCallId": cid, "toolCallName": f["name"]}))
                await resp.write(sse({"type": "TOOL_CALL_ARGS", "toolCallId": cid, "delta": '{"key": "other"}' if fault == "wrong_args" else f["args"]}))
                await resp.write(sse({"type": "TOOL_CALL_END", "toolCallId": cid}))
            elif kind == "tool_result":
                n = 0 if fault == "no_result" and cid == first[0] else 2 if fault == "dup_result" and cid == first[0] else 1
                for _ in range(n):
                    await resp.write(sse({"type": "TOOL_CALL_RESULT", "messageId": uuid.uuid4().hex, "toolCallId": cid, "content": f["content"], "role": "tool"}))

        await resp.write(sse({"type": "RUN_STARTED", "threadId": body["threadId"], "runId": body["runId"]}))
        try:
            await resp.write(sse({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}))
            if fault == "ignore_cancel":
                # a planted bug: the run is not the request's; a closed stream
                # cancels the handler, not the run, which goes on to its end
                async def deaf(kind: str, **f) -> None:
                    with contextlib.suppress(ConnectionError, RuntimeError):
                        await emit(kind, **f)

                run = asyncio.ensure_future(agent.run(messages, deaf))
                runs.add(run)
                run.add_done_callback(runs.discard)
                await asyncio.shield(run)
            else:
                await agent.run(messages, emit)
            await resp.write(sse({"type": "TEXT_MESSAGE_END", "messageId": "m1"}))
        except RuntimeError as exc:
            await resp.write(sse({"type": "RUN_ERROR", "message": str(exc)}))
            return resp
        if fault == "run_error":
            await resp.write(sse({"type": "RUN_ERROR", "message": "planted: the run failed"}))
        elif fault != "cut":
            await resp.write(sse({"type": "RUN_FINISHED", "threadId": body["threadId"], "runId": body["runId"]}))
        await resp.write_eof()
        return resp

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not isinstance(body, dict) or "messages" not in body:
            return web.json_response({"error": {"message": "messages is required"}}, status=400)
        if fault == "json":
            answer = await agent.run(body["messages"], _no_emit)
            return web.json_response({"choices": [{"message": {"role": "assistant", "content": answer}}]})
        resp = await stream(request)

        async def emit(kind: str, **f) -> None:
            if kind == "text":
                await resp.write(sse({"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": f["delta"]}}]}))

        await agent.run(body["messages"], emit)
        if fault == "error_event":
            await resp.write(sse({"error": {"message": "planted: the agent failed"}}))
        elif fault != "cut":
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def responses(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not isinstance(body, dict) or "input" not in body:
            return web.json_response({"error": {"message": "input is required"}}, status=400)
        messages = [{"role": i["role"], "content": i["content"]} for i in body["input"] if i.get("type", "message") == "message"]
        resp = await stream(request)

        async def emit(kind: str, **f) -> None:
            if kind == "text":
                await resp.write(sse({"type": "response.output_text.delta", "delta": f["delta"]}))
            elif kind == "tool_start":
                item = {"type": "function_call", "id": "fc_" + f["id"], "call_id": f["id"], "name": f["name"], "arguments": f["args"]}
                await resp.write(sse({"type": "response.output_item.added", "item": {**item, "arguments": ""}}))
                await resp.write(sse({"type": "response.output_item.done", "item": item}))
            elif kind == "tool_result":
                await resp.write(sse({"type": "response.output_item.done", "item": {"type": "function_call_output", "call_id": f["id"], "output": f["content"]}}))

        await resp.write(sse({"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}}))
        await agent.run(messages, emit)
        if fault == "error_event":
            await resp.write(sse({"type": "error", "message": "planted: the agent failed"}))
        elif fault != "cut":
            await resp.write(sse({"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}}))
        await resp.write_eof()
        return resp

    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<!DOCTYPE html><html><body>Welcome</body></html>", content_type="text/html")

    if fault == "html":
        app.router.add_route("*", "/{tail:.*}", html)
    else:
        app.router.add_post(PATHS[protocol], {"agui": agui, "openai-chat": chat, "openai-responses": responses}[protocol])
    return app


async def _no_emit(kind: str, **f) -> None:
    return None


async def serve(protocol: str, llm_url: str, fault: str, port: int = 0) -> tuple[web.AppRunner, str]:
    """An in-process server on 127.0.0.1: (runner to clean up, its URL)."""
    runner = web.AppRunner(make_app(protocol, llm_url, fault), handler_cancellation=True, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    host, bound = runner.addresses[0][:2]
    return runner, f"http://{host}:{bound}{PATHS[protocol]}"


async def main(a: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runner, url = await serve(a.protocol, a.llm_url, a.fault, a.port)
    print(f"agent listening on {url}", flush=True)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--protocol", choices=sorted(PATHS), required=True)
    ap.add_argument("--llm-url", required=True)
    ap.add_argument("--fault", default="none")
    ap.add_argument("--port", type=int, default=0)
    asyncio.run(main(ap.parse_args()))
