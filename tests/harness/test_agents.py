"""The agent-protocol client (harness/wire/agents.py) and its AG-UI and
OpenAI-compatible drivers (issue 23), against instant agents
(tests/harness/agentserver.py) whose LLM is the real mock, in this process.

Every failure name is seen twice: on the agent that misbehaves on purpose
(its --fault) and not on the same agent behaving."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import pytest
from aiohttp import web

from harness.errors import UsageError
from harness.judge.contract import OTHER, merged
from harness.judge.verdict import judge
from harness.wire import agents
from harness.wire.agents import AGENT_PROTOCOLS, Exchange, HttpAgentClient, agent_driver, check_agent_url
from harness.wire.agui import run_input
from harness.wire.client import TURN_BYTES_MAX, ConnError, Turn
from harness.wire.protocol import AGENT_NAMES, Protocol, load_protocol
from mock.markers import build_plan
from mock.server import MockServer, MockSettings
from waiting import await_until

sys.path.insert(0, str(Path(__file__).parent))
from agentserver import serve  # noqa: E402

PARALLEL = merged(OTHER, None, ("batch=parallel",))


@pytest.fixture
async def mock():
    async with MockServer(MockSettings(port=0, tool_ms=50)) as m:
        yield m


@contextlib.asynccontextmanager
async def agent(mock, protocol: str, fault: str = "none"):
    runner, url = await serve(protocol, mock.url + "/v1", fault)
    try:
        yield url
    finally:
        await runner.cleanup()


def failures(turn: Turn) -> list[str]:
    return [f.split(" ")[0] for f in judge(turn, build_plan(turn.text, tool_ms=50), contract=PARALLEL, authenticate=False).failures]


# --- names and URLs ---------------------------------------------------------------------------


@pytest.mark.parametrize("url, said", [
    ("http://10.0.0.7:8000/agui", "10.0.0.7 is not a loopback address"),
    ("http://example.com:8000/agui", "'example.com' is not a loopback address"),
    ("https://127.0.0.1:8000/agui", "https is not spoken"),
    ("ws://127.0.0.1:8000/agui", "the scheme is ws"),
    ("http://127.0.0.1/agui", "no port"),
    ("http://127.0.0.1:99999/agui", "the port is invalid"),
])
def test_a_url_off_loopback_or_not_http_is_refused_naming_value_rule_and_fix(url, said):
    with pytest.raises(UsageError) as info:
        check_agent_url(url)
    msg = str(info.value)
    assert url in msg and said in msg and "127.0.0.1" in msg, msg


def test_loopback_urls_are_taken():
    assert check_agent_url("http://localhost:8000/agui").host == "127.0.0.1"
    assert check_agent_url("http://[::1]:8000/x").host == "::1"
    assert check_agent_url("http://127.0.0.2:9/").port == 9


def test_the_protocol_names():
    assert AGENT_NAMES == AGENT_PROTOCOLS == ("agui", "a2a", "openai-chat", "openai-responses")
    assert type(load_protocol("kstress-v1")) is Protocol
    with pytest.raises(UsageError) as info:
        load_protocol("agx")
    assert "'agx' is unknown" in str(info.value) and "agui" in str(info.value) and "module:Class" in str(info.value)


def test_a_driver_not_built_yet_is_a_usage_error(monkeypatch):
    monkeypatch.setitem(agents.PROTOCOLS, "a2a", "harness.wire.no_such_driver:A2ADriver")
    with pytest.raises(UsageError) as info:
        agent_driver("a2a", "http://127.0.0.1:8000/")
    assert "not built yet" in str(info.value)


def test_run_input_carries_the_session_and_its_history():
    t = Turn(input_id="n1", text="hi #n1", nonce="n1")
    body = run_input(t, "s1", [("a #n0", "answer 0")])
    assert body["threadId"] == "s1" and body["runId"].startswith("r-n1-")
    assert [(m["role"], m["content"]) for m in body["messages"]] == [("user", "a #n0"), ("assistant", "answer 0"), ("user", "hi #n1")]
    steps = [[{"id": "call_n0_0", "name": "lookup", "args": '{"key": "n0/0"}', "content": "found"}]]
    body = run_input(t, "s1", [Exchange("a #n0", "answer 0", steps)])
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "tool", "assistant", "user"]
    call = body["messages"][1]["toolCalls"][0]
    assert call == {"id": "call_n0_0", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "n0/0"}'}}
    assert body["messages"][2]["toolCallId"] == "call_n0_0" and body["messages"][2]["content"] == "found"
    lone = run_input(t, None, None)
    assert lone["threadId"] == "t-n1" and len(lone["messages"]) == 1


# --- turns against instant agents ---------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["agui", "openai-chat", "openai-responses"])
async def test_a_good_agent_passes_on_one_kept_alive_connection(mock, protocol):
    async with agent(mock, protocol) as url:
        async with HttpAgentClient(agent_driver(protocol, url)) as c:
            await c.prepare(5)
            turns = [await c.turn(m, 20) for m in ("!batch4", "hello", "!slowbatch2")]
            assert [t.outcome for t in turns] == ["response"] * 3, [(t.outcome, t.error_code, t.error_message, t.conn_error) for t in turns]
            assert all(failures(t) == [] for t in turns), [failures(t) for t in turns]
            assert c.http.connector.dials == 1  # one keep-alive connection for every turn
            assert await c.stats() == {} and c.notify_count == 0 and c.connected
            t = turns[0]
            assert t.t_sent < t.t_first <= t.t_done and t.frames and "KST nonce=" in t.reply
            if protocol == "openai-chat":
                assert t.tools_shown is None  # chat completions show no tools: nothing to hold them to
            else:
                assert sorted(t.tools_shown) == [f"call_{t.nonce}_{i}" for i in range(4)]
        assert not c.connected


@pytest.mark.parametrize("protocol, fault, name", [
    ("agui", "run_error", "error_frame:run_error"),
    ("agui", "cut", "error_frame:stream_cut"),
    ("agui", "no_result", "tool_result_missing"),
    ("agui", "dup_result", "tool_result_repeated"),
    ("agui", "wrong_id", "tool_call_missing"),
    ("agui", "hide_tools", "tool_call_missing"),
    ("agui", "wrong_args", "tool_args_mismatch"),
    ("agui", "json", "error_frame:not_sse"),
    ("openai-chat", "cut", "error_frame:stream_cut"),
    ("openai-chat", "error_event", "error_frame:api_error"),
    ("openai-chat", "json", "error_frame:not_sse"),
    ("openai-responses", "cut", "error_frame:stream_cut"),
    ("openai-responses", "error_event", "error_frame:api_error"),
])
async def test_each_misbehaviour_is_a_failure_by_name(mock, protocol, fault, name):
    async with agent(mock, protocol, fault) as url:
        async with HttpAgentClient(agent_driver(protocol, url)) as c:
            t = await c.turn("!batch2", 20)
    assert failures(t) == [name], (t.outcome, t.error_code, t.error_message)


async def test_a_wrong_path_fails_each_turn_as_http_404(mock):
    async with agent(mock, "agui") as url:
        async with HttpAgentClient(agent_driver("agui", url + "x")) as c:
            t = await c.turn("hello", 10)
    assert failures(t) == ["error_frame:http_404"] and "404" in t.error_message


@pytest.mark.parametrize("fault, path, said", [
    ("none", "/nope", "HTTP 404 Not Found: there is no AG-UI endpoint at this path"),
    ("html", "/agui", "answered a web page (HTTP 200, text/html"),
])
async def test_prepare_refuses_what_is_not_an_agui_endpoint(mock, fault, path, said):
    async with agent(mock, "agui", fault) as url:
        bad = url.rsplit("/", 1)[0] + path
        async with HttpAgentClient(agent_driver("agui", bad)) as c:
            with pytest.raises(UsageError) as info:
                await c.prepare(5)
    assert bad in str(info.value) and said in str(info.value) and "give the URL" in str(info.value)


async def test_nobody_listening_is_refused_at_connect():
    with socket_closed() as port:
        with pytest.raises(ConnError) as info:
            await HttpAgentClient(agent_driver("agui", f"http://127.0.0.1:{port}/agui"), connect_timeout_s=2).connect()
    assert info.value.kind == "refused"


@contextlib.contextmanager
def socket_closed():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # bound and closed: nobody listens there
    yield port


@contextlib.asynccontextmanager
async def raw_server(handler):
    app = web.Application()
    app.router.add_post("/agui", handler)
    runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/agui"
    finally:
        await runner.cleanup()


async def test_a_flood_of_events_is_cut_at_the_turn_bound():
    sent = []

    async def flood(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = b'data: {"type":"TEXT_MESSAGE_CONTENT","delta":"' + b"x" * 65000 + b'"}\n\n'
        with contextlib.suppress(ConnectionError):
            for _ in range(2 * TURN_BYTES_MAX // len(chunk) + 10):
                await resp.write(chunk)
                sent.append(1)
        return resp

    async with raw_server(flood) as url:
        async with HttpAgentClient(agent_driver("agui", url)) as c:
            t = await c.turn("hello", 20)
    assert t.outcome == "flood" and str(TURN_BYTES_MAX) in t.conn_error
    assert t.bytes <= TURN_BYTES_MAX + 70_000


async def test_an_event_over_the_frame_limit_is_a_protocol_error():
    async def huge(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            await resp.write(b"data: " + b"x" * (1 << 20) + b"\n\n")
        return resp

    async with raw_server(huge) as url:
        async with HttpAgentClient(agent_driver("agui", url)) as c:
            t = await c.turn("hello", 20)
    assert t.outcome == "conn_error" and t.conn_kind == "protocol", (t.outcome, t.conn_error)


async def test_the_deadline_times_a_turn_out_and_closes_its_stream():
    closed = asyncio.Event()

    async def stall(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"type":"RUN_STARTED"}\n\n')
        try:
            await asyncio.Event().wait()  # never answers: the client's deadline ends it
        finally:
            closed.set()
        return resp

    async with raw_server(stall) as url:
        async with HttpAgentClient(agent_driver("agui", url)) as c:
            t = await c.turn("hello", 0.5)
            assert t.outcome == "timeout" and t.t_first is not None
            # closing the stream is AG-UI's cancel: the server's handler is released
            await asyncio.wait_for(closed.wait(), 10)


async def test_a_session_keeps_its_history_for_the_next_turn(mock):
    seen = []

    async def record(request):
        body = await request.json()
        seen.append(body)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = len(seen)
        await resp.write(b'data: {"type":"TEXT_MESSAGE_CONTENT","delta":"answer %d"}\n\n' % n)
        await resp.write(b'data: {"type":"RUN_FINISHED"}\n\n')
        return resp

    async with raw_server(record) as url:
        histories: dict = {}
        async with HttpAgentClient(agent_driver("agui", url), histories=histories) as c:
            t1 = await c.turn("one", 10, session="s1")
            await c.turn("other", 10)
        async with HttpAgentClient(agent_driver("agui", url), histories=histories) as c2:
            t2 = await c2.turn("two", 10, session="s1")  # another connection, the same session
    assert t1.reply == "answer 1" and t2.reply == "answer 3"
    assert [m["content"] for m in seen[2]["messages"]] == [t1.text, "answer 1", t2.text]
    assert seen[0]["threadId"] == seen[2]["threadId"] == "s1" != seen[1]["threadId"]
    assert histories == {"s1": [(t1.text, "answer 1"), (t2.text, "answer 3")]}


# --- target files ------------------------------------------------------------------------------


@pytest.mark.parametrize("target, said", [
    ('protocol = "agui"\nlisten = "tcp"\nenv = { PORT = "{port}" }', "needs url"),
    ('url = "http://127.0.0.1:{port}/agui"\nlisten = "tcp"\nenv = { PORT = "{port}" }', "is for an agent protocol"),
    ('protocol = "agui"\nurl = "http://127.0.0.1:8000/agui"\nlisten = "tcp"\nenv = { PORT = "{port}" }', "names no {port}"),
    ('protocol = "agui"\nurl = "http://127.0.0.1:{port}/agui"\nlisten = "ws"\nenv = { PORT = "{port}" }', 'set listen = "tcp"'),
    ('protocol = "agui"\nurl = "http://10.1.1.1:{port}/agui"\nlisten = "tcp"\nenv = { PORT = "{port}" }', "not a loopback address"),
    ('protocol = "agui"\nurl = "http://127.0.0.1:{prt}/agui"\nlisten = "tcp"\nenv = { PORT = "{port}" }', "prt"),
])
def test_a_target_files_agent_keys_are_checked(tmp_path, target, said):
    from harness.sandbox.target import load_target

    f = tmp_path / "t.toml"
    f.write_text(f'[target]\nbin = "python3"\n{target}\n')
    with pytest.raises(UsageError) as info:
        load_target(f)
    assert said in str(info.value) and str(f) in str(info.value), str(info.value)


def test_a_good_agent_target_file_loads(tmp_path):
    from harness.sandbox.target import load_target

    f = tmp_path / "t.toml"
    f.write_text('[target]\nbin = "python3"\nprotocol = "agui"\nlisten = "tcp"\nurl = "http://127.0.0.1:{port}/agui"\nenv = { PORT = "{port}" }\n')
    spec = load_target(f)
    assert (spec.protocol, spec.url) == ("agui", "http://127.0.0.1:{port}/agui")


async def test_a_server_that_does_not_speak_http_is_a_protocol_error():
    async def garbage(reader, writer):
        await reader.read(100)
        writer.write(b'{"type":"response","kind":"auth","ok":true,"protocol":1}\n')  # a protocol v1 kernel at the URL
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        async with HttpAgentClient(agent_driver("agui", f"http://127.0.0.1:{port}/agui")) as c:
            t = await c.turn("hello", 10)
    finally:
        server.close()
        await server.wait_closed()
    assert t.outcome == "conn_error" and t.conn_kind == "protocol" and "not an HTTP answer" in t.conn_error, (t.outcome, t.conn_error)


async def test_connected_says_whether_the_agent_still_holds_the_connection():
    peers = []

    async def accept(reader, writer):
        peers.append(writer)

    server = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        port = server.sockets[0].getsockname()[1]
        async with HttpAgentClient(agent_driver("agui", f"http://127.0.0.1:{port}/agui")) as c:
            await await_until(lambda: peers, 10, "the connection accepted")
            assert c.connected
            peers[0].close()  # the agent drops the idle connection (a keep-alive timeout)
            await await_until(lambda: not c.connected, 10, "connected to turn false")
        assert not c.connected
    finally:
        server.close()
        await server.wait_closed()
