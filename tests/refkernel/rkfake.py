"""A scripted fake LLM for the session and tool-loop tests, and the checks
that read its recording.

It speaks OpenAI chat completions, streamed, in the wire format of
docs/wire.md (one tool-call fragment per chunk, a named header per call,
arguments cut in several pieces, a finish chunk, usage, ``[DONE]``), records
every request body, and answers from a script written in the latest user
message, so that a test decides what each turn does by what it sends:

    ``loop=K``   K tool steps before the answer (default 0: answer at once)
    ``calls=N``  N calls per step (default 1), ``lookup`` each ...
    ``writer``   ... except a ``knowledge_create`` in the middle of every odd step
    ``fail``     HTTP 500 instead of a reply
    ``hold``     the turn's first request waits until the test calls ``release``
    ``#NONCE``   the turn's name: in every call id and argument of the turn

The step a request is for is read from the request itself (the assistant
messages after its user message, and the step numbers in the fake's own call
ids), so a kernel that drops or renames part of the loop still gets an answer
and the recording shows what it sent. Unlike the mock (``mock/``), it checks
nothing itself: the checks below compare the recording with the script.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

Message = dict[str, Any]


@dataclass(frozen=True)
class Script:
    nonce: str
    steps: int = 0
    calls: int = 1
    writer: bool = False
    fail: bool = False
    hold: bool = False

    @classmethod
    def parse(cls, text: str) -> "Script":
        words = text.split()
        opts = dict(w.split("=", 1) for w in words if "=" in w)
        nonces = [w[1:] for w in words if w.startswith("#") and len(w) > 1]
        return cls(nonce=nonces[-1] if nonces else "", steps=int(opts.get("loop", 0)), calls=int(opts.get("calls", 1)),
                   writer="writer" in words, fail="fail" in words, hold="hold" in words)

    def call(self, step: int, i: int) -> dict[str, Any]:
        """Call i of step ``step`` (0-based), as the assistant message must carry it back."""
        cid = f"call_{self.nonce}_{step}_{i}"
        if self.writer and step % 2 == 1 and i == self.calls // 2:
            name, args = "knowledge_create", {"title": f"k-{self.nonce}-{step}-{i}", "content": f"step {step} \"of\"\tloop"}
        else:  # quotes and a tab: the pieces cut inside JSON escapes
            name, args = "lookup", {"key": f"{self.nonce}/{step}/{i}", "query": f"step {step} \"call\" {i}\t{self.nonce}"}
        return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}

    def calls_of(self, step: int) -> list[dict[str, Any]]:
        return [self.call(step, i) for i in range(self.calls)]

    @property
    def answer(self) -> str:
        return f"answer {self.nonce} after {self.steps} steps"


def text(nonce: str | None = None, **script: Any) -> tuple[str, str]:
    """An input text for the fake, and its nonce: ``text(loop=3, calls=2)``."""
    n = nonce or uuid.uuid4().hex[:12]
    words = [f"{k}={v}" for k, v in script.items() if not isinstance(v, bool)]
    words += [k for k, v in script.items() if v is True]
    return " ".join(["please", *words, f"#{n}"]), n


def turn_part(messages: list[Message]) -> list[Message]:
    """The messages of the request's own turn: from its (last) user message on."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    assert users, f"a request without a user message: {messages}"
    return messages[users[-1]:]


_OWN_ID = re.compile(r"call_(?P<nonce>[0-9A-Za-z]+)_(?P<step>\d+)_\d+")


def step_of(messages: list[Message], nonce: str) -> int:
    part = turn_part(messages)
    assistants = [m for m in part if m.get("role") == "assistant"]
    seen = [int(m["step"]) for a in assistants for c in a.get("tool_calls") or ()
            if (m := _OWN_ID.fullmatch(str(c.get("id")))) and m["nonce"] == nonce]
    return max(len(assistants), 1 + max(seen, default=-1))


@dataclass
class Recorded:
    nonce: str
    body: dict[str, Any]
    at: float

    @property
    def messages(self) -> list[Message]:
        return self.body["messages"]


class FakeLLM:
    """``async with FakeLLM() as llm``: ``llm.url + "/v1"`` is the kernel's
    ``--llm-url``; ``llm.requests`` everything it was sent, in arrival order."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self._holds: dict[str, asyncio.Event] = {}
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def __aenter__(self) -> "FakeLLM":
        app = web.Application()
        app.router.add_get("/v1", self._alive)  # GET also answers the kernel's HEAD probe
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner = web.AppRunner(app, handle_signals=False)
        try:
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
        except BaseException:
            await self.aclose()
            raise
        host, port = self._runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        for ev in self._holds.values():
            ev.set()  # a held handler must not keep the cleanup waiting
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    # --- the test's side ----------------------------------------------------------

    def release(self, nonce: str) -> None:
        self._holds.setdefault(nonce, asyncio.Event()).set()

    def requests_for(self, nonce: str) -> list[list[Message]]:
        return [r.messages for r in self.requests if r.nonce == nonce]

    def holding(self, nonce: str) -> bool:
        """The held turn's first request has arrived (and waits)."""
        return bool(self.requests_for(nonce)) and not self._holds.setdefault(nonce, asyncio.Event()).is_set()

    # --- the LLM's side -----------------------------------------------------------

    async def _alive(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        user = turn_part(body["messages"])[0]["content"]
        script = Script.parse(user)
        self.requests.append(Recorded(script.nonce, body, time.monotonic()))
        if script.fail:
            return web.json_response({"error": {"message": "scripted failure", "type": "server_error", "param": None,
                                                "code": None}}, status=500)
        step = step_of(body["messages"], script.nonce)
        if script.hold and step == 0:
            await self._holds.setdefault(script.nonce, asyncio.Event()).wait()
        return await self._stream(request, body, script.calls_of(step) if step < script.steps else None, script.answer)

    async def _stream(self, request: web.Request, body: dict[str, Any], calls: list[dict[str, Any]] | None,
                      answer: str) -> web.StreamResponse:
        rid, created, model = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time()), body.get("model", "fake")
        usage = bool((body.get("stream_options") or {}).get("include_usage"))

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            obj: dict[str, Any] = {"id": rid, "object": "chat.completion.chunk", "created": created, "model": model,
                                   "system_fingerprint": "fp_rkfake",
                                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if usage:
                obj["usage"] = None
            return b"data: " + json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode() + b"\n\n"

        events = [chunk({"role": "assistant", "content": None})]
        if calls is None:
            events += [chunk({"content": piece}) for piece in _pieces(answer)]
        else:
            for i, c in enumerate(calls):
                events.append(chunk({"tool_calls": [{"index": i, "id": c["id"], "type": "function",
                                                     "function": {"name": c["function"]["name"], "arguments": ""}}]}))
                events += [chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                           for piece in _pieces(c["function"]["arguments"])]
        events.append(chunk({}, "stop" if calls is None else "tool_calls"))
        if usage:
            events.append(b"data: " + json.dumps({"id": rid, "object": "chat.completion.chunk", "created": created,
                                                   "model": model, "system_fingerprint": "fp_rkfake", "choices": [],
                                                   "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                                             "total_tokens": 2}}).encode() + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        await resp.write(b"".join(events))
        await resp.write_eof()
        return resp


def _pieces(s: str) -> list[str]:
    """Cut at 3 characters, a half and three quarters (as the mock does): never one piece."""
    cuts = sorted({c for c in (3, len(s) // 2, 3 * len(s) // 4) if 0 < c < len(s)})
    bounds = [0, *cuts, len(s)]
    return [s[a:b] for a, b in zip(bounds, bounds[1:])]


# --- the checks -------------------------------------------------------------------


def _result_ok(call: dict[str, Any], msg: Message) -> bool:
    """A tool result is the one for ``call``: its id, and the output that tool gives for these arguments."""
    args = json.loads(call["function"]["arguments"])
    want = {"lookup": f"lookup {args.get('key')}: entry ", "knowledge_create": f"created knowledge entry {args.get('title')} "}
    return (msg.get("role") == "tool" and msg.get("tool_call_id") == call["id"]
            and str(msg.get("content", "")).startswith(want[call["function"]["name"]]))


def check_loop(llm: FakeLLM, text_sent: str) -> None:
    """The turn's tool loop went right, request by request: request s (0-based)
    carries, after the turn's user message, steps 0..s-1 each as exactly the
    calls the fake sent and one result per call, in declared order, unchanged
    since the request that first carried it; every id distinct across steps."""
    script = Script.parse(text_sent)
    reqs = llm.requests_for(script.nonce)
    assert len(reqs) == script.steps + 1, f"{len(reqs)} requests for a {script.steps}-step loop"
    for s, req in enumerate(reqs):
        part = turn_part(req)
        assert part[0] == {"role": "user", "content": text_sent}, part[0]
        at = 1
        for earlier in range(s):
            calls = script.calls_of(earlier)
            got = part[at] if at < len(part) else None
            assert got == {"role": "assistant", "content": None, "tool_calls": calls}, (
                f"request {s}: step {earlier}'s assistant message is {got} (expected the fake's calls {calls})")
            results = part[at + 1:at + 1 + len(calls)]
            assert len(results) == len(calls) and all(_result_ok(c, r) for c, r in zip(calls, results)), (
                f"request {s}: step {earlier}'s results are {results}")
            at += 1 + len(calls)
        assert at == len(part), f"request {s}: unexpected messages after step {s - 1}: {part[at:]}"
        if s:
            assert req[:len(reqs[s - 1])] == reqs[s - 1], f"request {s} does not extend request {s - 1} unchanged"
    ids = [c["id"] for m in turn_part(reqs[-1]) for c in m.get("tool_calls") or ()]
    assert len(ids) == len(set(ids)) == script.steps * script.calls, ids


def exchange(llm: FakeLLM, text_sent: str) -> list[Message]:
    """What a completed turn adds to its session's history, as the kernel sent
    it to the LLM: its user message and every step (all in its last request),
    then the fake's final answer."""
    script = Script.parse(text_sent)
    reqs = llm.requests_for(script.nonce)
    assert reqs, f"the fake never saw turn {script.nonce}"
    return [*turn_part(reqs[-1]), {"role": "assistant", "content": script.answer}]


def check_history(llm: FakeLLM, text_sent: str, earlier: list[str]) -> None:
    """Every request of the turn carries, between the system prompt and its own
    user message, exactly the turns ``earlier`` (their texts), in order."""
    script = Script.parse(text_sent)
    want = [m for t in earlier for m in exchange(llm, t)]
    reqs = llm.requests_for(script.nonce)
    assert reqs, f"the fake never saw turn {script.nonce}"
    for s, req in enumerate(reqs):
        assert req[0]["role"] == "system", req[0]
        got = req[1:len(req) - len(turn_part(req))]
        assert got == want, (
            f"request {s} of {script.nonce} carries {_names(got)}, expected {_names(want)}:\n{got}\n!=\n{want}")


def _names(history: list[Message]) -> list[str]:
    """The turns a history holds, by nonce (a readable summary for failures)."""
    return [Script.parse(m["content"]).nonce for m in history if m.get("role") == "user"]


# --- scenarios (shared by the session tests and the fault tests) ------------------


async def session_turn(conn: Any, session: str | None, **script: Any) -> str:
    """One turn of ``session`` on ``conn`` (an rkclient.KernelConn) that must
    end with a response; its text, for the checks above."""
    t, _ = text(**script)
    turn = await conn.turn(t, session=session)
    assert turn.kind == "response" and not turn.terminal.get("duplicate"), turn.frames[-1]
    return t


async def interleaved_sessions(k: Any) -> dict[str, tuple[str, list[str]]]:
    """Sessions A and B interleaved on one connection, then A resumed on a
    second one (a client reconnecting): turn name -> (its text, the turns its
    history must hold). Each turn has tool steps of its own, so a history
    carries assistant tool-call messages and results, not only text."""
    c1, c2 = await k.connect(), await k.connect()
    a1 = await session_turn(c1, "A", loop=2, calls=2)
    b1 = await session_turn(c1, "B", loop=1, calls=3)
    a2 = await session_turn(c1, "A")
    b2 = await session_turn(c1, "B", loop=1)
    a3 = await session_turn(c2, "A", loop=1, calls=2)
    b3 = await session_turn(c1, "B")
    return {"A1": (a1, []), "B1": (b1, []), "A2": (a2, [a1]), "B2": (b2, [b1]), "A3": (a3, [a1, a2]), "B3": (b3, [b1, b2])}


def history_failures(llm: FakeLLM, expected: dict[str, tuple[str, list[str]]]) -> dict[str, str]:
    """check_history for each turn of a scenario: the failing turns, with why."""
    out = {}
    for name, (t, earlier) in expected.items():
        try:
            check_history(llm, t, earlier)
        except AssertionError as exc:
            out[name] = str(exc)
    return out
