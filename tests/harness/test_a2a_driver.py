"""The A2A driver (harness/wire/a2a.py, issue 23): its pure parts on the
transcripts of /work/shared/research/agent-protocols.md (fasta2a 2.1.1, both
method sets, streaming and polled), and the whole driver against an instant
A2A agent (tests/harness/a2aserver.py) whose LLM is the real mock, each
failure name shown by a variant that misbehaves on purpose."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import aiohttp
import pytest

from harness.errors import UsageError
from harness.wire.a2a import A2ADriver, Endpoint, SSEParser, TurnReader, cancel_outcome, card_urls, feed_event, norm_state, parse_card
from harness.wire.client import Turn, new_nonce
from mock.markers import compose
from mock.server import MockServer, MockSettings

from a2aserver import A2AAgent, Behaviour
from waiting import await_until


class Sink:
    """A TurnSink that records every call."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []
        self.deltas: list[str] = []
        self.tools: list[tuple] = []
        self.ends: list[tuple[str, Any, Any]] = []  # ("done", text, None) | ("error", code, message)

    def frame(self, event: dict[str, Any], size: int) -> None:
        self.frames.append(event)

    def delta(self, text: str) -> None:
        self.deltas.append(text)

    def tool(self, call_id, name, phase, *, ok=None, arguments=None) -> None:
        self.tools.append((call_id, name, phase))

    def done(self, text: str | None) -> None:
        self.ends.append(("done", text, None))

    def error(self, code: str, message: str) -> None:
        self.ends.append(("error", code, message))

    @property
    def reply(self) -> str:
        """As Turn.reply reads it: the whole text when given, else the deltas."""
        assert len(self.ends) == 1, self.ends
        kind, text, _ = self.ends[0]
        assert kind == "done", self.ends
        return text if text else "".join(self.deltas)

    @property
    def code(self) -> str | None:
        assert len(self.ends) == 1, self.ends
        return self.ends[0][1] if self.ends[0][0] == "error" else None


# -- the transcripts (research doc, section 2) --------------------------------

ANSWER = "KST nonce=abc123 plan=batch expected=4 got=4 ids=ok args=ok order=ok errors=0 tool_ms=23\n--- call_abc123_0\nfound abc123/0: item 0"


def fasta2a_stream(answer: str = ANSWER, v1: bool = False, end: str = "completed") -> bytes:
    """fasta2a 2.1.1's message/stream (SendStreamingMessage when v1): 1.0's
    wrappers whichever names were used, lowercase states unless v1, twenty
    append chunks, then the whole answer again (append false, lastChunk true)."""
    st = (lambda s: "TASK_STATE_" + s.upper().replace("-", "_")) if v1 else (lambda s: s)
    ids = {"taskId": "99b4", "contextId": "570e"}
    role = "ROLE_USER" if v1 else "user"
    events: list[dict[str, Any]] = [
        {"task": {"id": "99b4", "contextId": "570e", "status": {"state": st("submitted")}, "history": [{"role": role, "parts": [{"text": "!batch4 #abc123"}], "messageId": "83fc"}]}},
        {"statusUpdate": {**ids, "status": {"state": st("working")}}},
    ]
    if end == "completed":
        n = len(answer)
        for i in range(20):
            events.append({"artifactUpdate": {**ids, "artifact": {"artifactId": "d30b", "parts": [{"text": answer[i * n // 20:(i + 1) * n // 20]}]}, "append": True, "lastChunk": False}})
        events.append({"artifactUpdate": {**ids, "artifact": {"artifactId": "d30b", "name": "result", "parts": [{"text": answer}]}, "append": False, "lastChunk": True}})
    events.append({"statusUpdate": {**ids, "status": {"state": st(end)}}})
    return b"".join(b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": e}).encode() + b"\n\n" for e in events)


def v03_stream(answer: str = ANSWER) -> bytes:
    """An a2a-sdk 0.3 server (strands, agno, CrewAI): `kind` on every result,
    the first chunk opening the artifact (append false), `final` on the last status."""
    ids = {"taskId": "t1", "contextId": "c1"}
    events = [
        {"kind": "task", "id": "t1", "contextId": "c1", "status": {"state": "submitted"}},
        {"kind": "status-update", **ids, "status": {"state": "working"}, "final": False},
        {"kind": "artifact-update", **ids, "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": answer[:10]}]}, "append": False, "lastChunk": False},
        {"kind": "artifact-update", **ids, "artifact": {"artifactId": "a", "parts": [{"kind": "text", "text": answer[10:]}]}, "append": True, "lastChunk": True},
        {"kind": "status-update", **ids, "status": {"state": "completed"}, "final": True},
    ]
    return b"".join(b"data: " + json.dumps({"jsonrpc": "2.0", "id": 1, "result": e}).encode() + b"\r\n\r\n" for e in events)


def read(stream: bytes, step: int | None = None) -> Sink:
    """Feed a recorded stream through the parser, ``step`` bytes at a time."""
    sink, sse = Sink(), SSEParser()
    reader = TurnReader(sink)
    step = step or len(stream)
    for i in range(0, len(stream), step):
        for data in sse.feed(stream[i:i + step]):
            feed_event(data, reader)
    for data in sse.end():
        feed_event(data, reader)
    reader.finish()
    return sink


@pytest.mark.parametrize("v1", [False, True], ids=["0.3-names", "1.0-names"])
@pytest.mark.parametrize("step", [None, 1, 7, 100])
def test_fasta2a_stream_answer_is_the_appended_chunks(v1, step):
    sink = read(fasta2a_stream(v1=v1), step)
    assert sink.ends == [("done", None, None)], "the full copy is not passed on top of the chunks"
    assert "".join(sink.deltas) == ANSWER and len(sink.deltas) == 20
    assert sink.reply == ANSWER
    assert len(sink.frames) == 2 + 20 + 1 + 1


def test_the_full_copy_rule_can_fail():
    """Switched off (every chunk taken as more answer), the answer is doubled:
    what the reply check above would catch."""
    class Naive(TurnReader):
        def _artifact(self, u):
            text = "".join(p["text"] for p in u["artifact"]["parts"])
            self._deltas.append(text)
            self.sink.delta(text)
            return False
    sink, sse = Sink(), SSEParser()
    reader = Naive(sink)
    for data in sse.feed(fasta2a_stream()):
        feed_event(data, reader)
    assert "".join(sink.deltas) == ANSWER + ANSWER


def test_v03_kind_stream_with_crlf():
    sink = read(v03_stream(), 3)
    assert sink.ends == [("done", None, None)] and "".join(sink.deltas) == ANSWER


def test_a_copy_that_differs_from_the_chunks_is_the_answer():
    """A replacement chunk (append false on an artifact begun) that says
    something else than what was streamed replaces it: done(text)."""
    s = fasta2a_stream().replace(json.dumps(ANSWER).encode(), json.dumps("something else").encode())
    sink = read(s)
    assert sink.ends == [("done", "something else", None)]


@pytest.mark.parametrize("end, code", [("failed", "task_failed"), ("rejected", "task_rejected"), ("canceled", "task_canceled"), ("input-required", "input_required"), ("auth-required", "auth_required")])
@pytest.mark.parametrize("v1", [False, True])
def test_each_final_state_but_completed_is_a_failure_by_name(end, code, v1):
    sink = read(fasta2a_stream(v1=v1, end=end))
    assert sink.code == code
    assert f"task 99b4 ended {end}" in sink.ends[0][2]


def test_a_stream_that_ends_before_a_final_state_is_cut():
    s = fasta2a_stream()
    cut = s[: s.index(b"artifactUpdate")]
    cut = cut[: cut.rindex(b"\n\n") + 2]
    sink = read(cut)
    assert sink.code == "stream_cut" and "'working'" in sink.ends[0][2]


def test_a_jsonrpc_error_is_named_by_its_code():
    sink = read(b'data: {"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"Task not found"}}\n\n')
    assert sink.code == "jsonrpc_-32001" and "Task not found" in sink.ends[0][2]


@pytest.mark.parametrize("data, why", [(b"data: not json\n\n", "not JSON"), (b'data: {"jsonrpc":"2.0","id":1}\n\n', "neither result nor error"), (b'data: {"jsonrpc":"2.0","id":1,"result":{"kind":"weird"}}\n\n', "unknown kind")])
def test_what_is_not_a2a_is_a_bad_response(data, why):
    sink = read(data)
    assert sink.code == "bad_response" and why in sink.ends[0][2]


def test_polled_task_answer_from_its_artifacts():
    """message/send answered `submitted`, then tasks/get: working, then
    completed with the answer in artifacts[0] and history = [user, agent]."""
    sink = Sink()
    reader = TurnReader(sink)
    assert not feed_event(b'{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t9","contextId":"c9","status":{"state":"submitted"}}}}', reader)
    assert reader.task_id == "t9" and reader.context_id == "c9"
    assert not feed_event(b'{"jsonrpc":"2.0","id":2,"result":{"id":"t9","contextId":"c9","status":{"state":"working"}}}', reader)
    done = {"id": "t9", "contextId": "c9", "status": {"state": "completed"}, "artifacts": [{"artifactId": "x", "name": "result", "parts": [{"text": ANSWER}]}],
            "history": [{"role": "user", "parts": [{"text": "q"}]}, {"role": "agent", "parts": [{"text": ANSWER}]}]}
    assert feed_event(json.dumps({"jsonrpc": "2.0", "id": 3, "result": done}).encode(), reader)
    assert sink.ends == [("done", ANSWER, None)] and sink.deltas == []


def test_a_message_result_is_the_whole_answer():
    sink = read(b'data: {"jsonrpc":"2.0","id":1,"result":{"message":{"role":"ROLE_AGENT","parts":[{"text":"hi"}],"messageId":"m"}}}\n\n')
    assert sink.ends == [("done", "hi", None)]


def test_states_of_both_versions():
    assert [norm_state(s) for s in ("TASK_STATE_INPUT_REQUIRED", "input-required", "TASK_STATE_CANCELLED", "completed", None)] == ["input-required", "input-required", "canceled", "completed", ""]


@pytest.mark.parametrize("raw, status, want", [
    (b'{"jsonrpc":"2.0","id":1,"result":{"id":"t","status":{"state":"TASK_STATE_CANCELED"}}}', 200, "canceled"),
    (b'{"jsonrpc":"2.0","id":1,"result":{"kind":"task","id":"t","status":{"state":"completed"}}}', 200, "completed"),
    (b'{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"Task cannot be canceled"}}', 200, "jsonrpc_-32002"),
    (b"Internal Server Error", 500, "http_500"),
])
def test_what_a_cancel_answer_says(raw, status, want):
    assert cancel_outcome(status, raw) == want


# -- the card --------------------------------------------------------------

FASTA2A_CARD = {"name": "kst-agent", "supportedInterfaces": [{"protocolBinding": "JSONRPC", "url": "http://127.0.0.1:8102", "protocolVersion": "1.0"}], "skills": [], "capabilities": {"streaming": True, "pushNotifications": False}}


def test_cards_of_both_versions():
    assert parse_card(FASTA2A_CARD, "http://127.0.0.1:8102/.well-known/agent-card.json") == Endpoint("http://127.0.0.1:8102/.well-known/agent-card.json", "http://127.0.0.1:8102", "1.0", True)
    v03 = {"name": "a", "protocolVersion": "0.3.0", "url": "http://localhost:9000/a2a", "preferredTransport": "JSONRPC", "capabilities": {}}
    assert parse_card(v03, "http://127.0.0.1:9000/.well-known/agent-card.json") == Endpoint("http://127.0.0.1:9000/.well-known/agent-card.json", "http://127.0.0.1:9000/a2a", "0.3", False)
    rel = {"protocolVersion": "0.3.0", "url": "/rpc", "preferredTransport": "GRPC", "additionalInterfaces": [{"transport": "JSONRPC", "url": "/jsonrpc"}]}
    assert parse_card(rel, "http://127.0.0.1:9/x/.well-known/agent-card.json").rpc_url == "http://127.0.0.1:9/jsonrpc"
    assert card_urls("http://127.0.0.1:9/a2a/agent/") == ["http://127.0.0.1:9/a2a/agent/.well-known/agent-card.json", "http://127.0.0.1:9/a2a/agent/.well-known/agent.json"]
    assert card_urls("http://127.0.0.1:9/api/.well-known/a1/agent-card.json") == ["http://127.0.0.1:9/api/.well-known/a1/agent-card.json"]


@pytest.mark.parametrize("card, said", [
    ({"name": "x", "capabilities": {}}, "names no RPC URL"),
    ({"supportedInterfaces": [{"protocolBinding": "GRPC", "url": "http://127.0.0.1:1"}]}, "declares only ['GRPC']"),
    ({"url": "http://10.0.0.5:80/", "protocolVersion": "0.3.0"}, "10.0.0.5 is not a loopback address"),
    ({"url": "http://agent.example.com/", "protocolVersion": "0.3.0"}, "agent.example.com is not a loopback address"),
    ([1, 2], "is not a JSON object"),
])
def test_bad_cards_name_what_is_wrong(card, said):
    with pytest.raises(UsageError) as e:
        parse_card(card, "http://127.0.0.1:1/.well-known/agent-card.json")
    assert said in str(e.value) and "http://127.0.0.1:1/.well-known/agent-card.json" in str(e.value)


# -- the driver against an instant agent -------------------------------------

@pytest.fixture
async def mock():
    server = MockServer(MockSettings(tool_ms=50))
    await server.start()
    try:
        yield server
    finally:
        await server.aclose()


def turn_for(marker: str | None) -> Turn:
    nonce = new_nonce("a")
    return Turn(input_id=nonce, text=compose(marker, nonce), nonce=nonce)


@contextlib.asynccontextmanager
async def driven(agent: A2AAgent, url: str | None = None):
    """A minimal runner: one keep-alive connection, prepare, then turns."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4)) as http:
        d = A2ADriver(url or agent.url)
        await d.prepare(http, 10)
        yield d, http


async def run(d: A2ADriver, http, turn: Turn, session: str | None = None) -> Sink:
    sink = Sink()
    await asyncio.wait_for(d.run_turn(http, turn, sink, session=session, history=None), 30)
    return sink


MODES = [
    pytest.param(Behaviour(version="1.0", streaming=True), id="1.0-stream"),
    pytest.param(Behaviour(version="0.3", streaming=True), id="0.3-stream"),
    pytest.param(Behaviour(version="1.0", streaming=False), id="1.0-blocking"),
    pytest.param(Behaviour(version="0.3", streaming=False), id="0.3-blocking"),
    pytest.param(Behaviour(version="1.0", streaming=False, submit=True), id="1.0-poll"),
    pytest.param(Behaviour(version="0.3", streaming=False, submit=True), id="0.3-poll"),
]


@pytest.mark.parametrize("b", MODES)
async def test_a_batch_turn_reaches_completed_with_the_mocks_verdict(mock, b):
    async with A2AAgent(mock.url, b) as agent, driven(agent) as (d, http):
        assert d.endpoint.version == b.version and d.endpoint.streaming == b.streaming
        t = turn_for("!batch4")
        sink = await run(d, http, t)
        reply = sink.reply
        assert reply.count(f"KST nonce={t.nonce} ") == 1, reply
        assert "expected=4 got=4 ids=ok args=ok" in reply, reply
        method = "SendStreamingMessage" if b.version == "1.0" and b.streaming else "message/stream" if b.streaming else "SendMessage" if b.version == "1.0" else "message/send"
        assert method in agent.methods
        polls = agent.methods.count("GetTask" if b.version == "1.0" else "tasks/get") - 1  # less prepare's probe
        assert (polls >= 1) == b.submit, agent.methods
        sent = agent.headers[-1]
        assert (sent.get("A2A-Version") == "1.0") == (b.version == "1.0")


async def test_the_full_copy_under_a_new_artifact_id_is_not_more_answer(mock):
    async with A2AAgent(mock.url, Behaviour(fault="copy-new-id")) as agent, driven(agent) as (d, http):
        t = turn_for(None)
        sink = await run(d, http, t)
        assert sink.reply.count(f"KST nonce={t.nonce} ") == 1


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "poll"])
@pytest.mark.parametrize("end, code", [("failed", "task_failed"), ("rejected", "task_rejected"), ("canceled", "task_canceled"), ("input-required", "input_required"), ("auth-required", "auth_required")])
async def test_an_agent_that_ends_otherwise_fails_by_name(mock, end, code, stream):
    async with A2AAgent(mock.url, Behaviour(end=end, streaming=stream, submit=not stream)) as agent, driven(agent) as (d, http):
        assert (await run(d, http, turn_for(None))).code == code
    async with A2AAgent(mock.url, Behaviour(streaming=stream, submit=not stream)) as agent, driven(agent) as (d, http):
        assert (await run(d, http, turn_for(None))).code is None  # the control


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "send"])
@pytest.mark.parametrize("fault, code", [("jsonrpc", "jsonrpc_-32603"), ("http500", "http_500")])
async def test_protocol_errors_fail_by_name(mock, fault, code, stream):
    async with A2AAgent(mock.url, Behaviour(fault=fault, streaming=stream)) as agent, driven(agent) as (d, http):
        sink = await run(d, http, turn_for(None))
        assert sink.code == code, sink.ends


async def test_a_stream_closed_while_working_is_cut(mock):
    async with A2AAgent(mock.url, Behaviour(fault="cut")) as agent, driven(agent) as (d, http):
        sink = await run(d, http, turn_for(None))
        assert sink.code == "stream_cut" and "'working'" in sink.ends[0][2]


@pytest.mark.parametrize("b", [MODES[0], MODES[3], MODES[5]])
async def test_one_context_per_session_the_one_the_server_minted(mock, b):
    async with A2AAgent(mock.url, b) as agent, driven(agent) as (d, http):
        for _ in range(2):
            for s in ("s1", "s2"):
                await run(d, http, turn_for(None), session=s)
        await run(d, http, turn_for(None))  # no session: a conversation of its own
        first, second = agent.contexts_received[:2], agent.contexts_received[2:4]
        assert first == [None, None], "a session's first turn lets the server mint its context"
        assert second[0] is not None and second[1] is not None and second[0] != second[1]
        assert second == [d.contexts["s1"], d.contexts["s2"]]
        assert agent.contexts_received[4] is None
        # the server kept the history under that context: turn 2 carried turn 1
        assert [len(agent.histories[d.contexts[s]]) for s in ("s1", "s2")] == [4, 4]


@pytest.mark.parametrize("b", [Behaviour(version="1.0"), Behaviour(version="0.3", streaming=False, submit=True)], ids=["1.0-stream", "0.3-poll"])
async def test_cancel_aborts_the_llm_request(mock, b):
    """CancelTask (tasks/cancel): the server answers `canceled`, the turn ends
    task_canceled, and the mock saw the hung LLM request go (499)."""
    async with A2AAgent(mock.url, b) as agent, driven(agent) as (d, http):
        t = turn_for("!hang:20000")
        sink = Sink()
        running = asyncio.ensure_future(d.run_turn(http, t, sink, session=None, history=None))
        try:
            await await_until(lambda: mock.state.inflight >= 1, 10, "the turn's LLM request at the mock")
            said = await asyncio.wait_for(d.cancel(http, t), 10)
            assert said == "canceled"
            await asyncio.wait_for(running, 10)
        finally:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
        assert sink.code == "task_canceled"
        assert "CancelTask" in agent.methods or "tasks/cancel" in agent.methods
        await await_until(lambda: any(r.get("nonce") == t.nonce and r.get("status") == 499 for r in mock.state.recent), 10, "the mock to log the cancelled request as 499")


async def test_a_cancel_the_agent_ignores_is_reported_as_it_answered(mock):
    """fasta2a's cancel: the broker queues it behind the task, which runs to
    its end; the answer is `completed`, which the caller sees."""
    async with A2AAgent(mock.url, Behaviour(cancel="noop")) as agent, driven(agent) as (d, http):
        t = turn_for("!hang:300")
        sink = Sink()
        running = asyncio.ensure_future(d.run_turn(http, t, sink, session=None, history=None))
        try:
            await await_until(lambda: any(tk.state == "working" for tk in agent.tasks.values()), 10, "the task working")
            assert await asyncio.wait_for(d.cancel(http, t), 10) == "completed"
            await asyncio.wait_for(running, 10)
        finally:
            running.cancel()
            with contextlib.suppress(BaseException):
                await running
        assert sink.code is None and f"nonce={t.nonce}" in sink.reply


async def test_cancel_of_a_turn_that_ended_says_none(mock):
    async with A2AAgent(mock.url) as agent, driven(agent) as (d, http):
        t = turn_for(None)
        await run(d, http, t)
        assert await d.cancel(http, t) is None


# -- bad input: prepare refuses, naming the URL, what came back, the fix -----

@pytest.mark.parametrize("card, said", [
    ("404", "answered 404"),
    ("html", "answered HTML"),
    ("no-rpc", "names no RPC URL"),
    ("remote-rpc", "10.1.2.3 is not a loopback address"),
    ("grpc-only", "declares only ['GRPC']"),
    ("wrong-rpc", "answered HTTP 404 that is not JSON-RPC"),
])
async def test_prepare_refuses_what_is_not_an_a2a_agent(mock, card, said):
    async with A2AAgent(mock.url, Behaviour(card=card)) as agent:
        async with aiohttp.ClientSession() as http:
            with pytest.raises(UsageError) as e:
                await A2ADriver(agent.url).prepare(http, 10)
    assert said in str(e.value), str(e.value)
    assert agent.url in str(e.value)
    assert e.value.exit_code == 2


async def test_prepare_falls_back_to_the_legacy_card_path(mock):
    async with A2AAgent(mock.url, Behaviour(card="legacy")) as agent, driven(agent) as (d, http):
        assert d.endpoint.card_url == agent.url + "/.well-known/agent.json"
        assert (await run(d, http, turn_for(None))).code is None


async def test_prepare_refuses_a_method_set_the_server_does_not_take(mock):
    """A card that says 1.0 on a server of 0.3 names: the probe's -32601."""
    async with A2AAgent(mock.url, Behaviour(version="0.3")) as agent:
        agent.card = lambda: {"supportedInterfaces": [{"protocolBinding": "JSONRPC", "url": agent.url + "/rpc", "protocolVersion": "1.0"}]}
        async with aiohttp.ClientSession() as http:
            with pytest.raises(UsageError, match="refused GetTask with JSON-RPC error -32601"):
                await A2ADriver(agent.url).prepare(http, 10)


async def test_prepare_refuses_a_non_loopback_url_and_nothing_listening():
    async with aiohttp.ClientSession() as http:
        with pytest.raises(UsageError, match="not a loopback address"):
            await A2ADriver("http://192.0.2.1:80/").prepare(http, 2)
        with pytest.raises(UsageError, match="could not be read .* start the agent first"):
            await A2ADriver("http://127.0.0.1:9/").prepare(http, 2)


async def test_a_driver_never_prepared_reads_the_card_at_its_first_turn(mock):
    """A launch probes readiness with one driver and runs with another: the
    second reads the card once, at its first turn, however many come at once."""
    async with A2AAgent(mock.url) as agent, aiohttp.ClientSession() as http:
        d = A2ADriver(agent.url)
        sinks = await asyncio.gather(*(run(d, http, turn_for(None)) for _ in range(3)))
        assert [s.code for s in sinks] == [None] * 3
        assert d.endpoint.rpc_url == agent.url + "/rpc"
        assert agent.methods.count("GetTask") == 1  # one probe, not one per turn
