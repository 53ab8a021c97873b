"""In-process tests of the kernel's parts (the other files drive the real
process): the stream accumulators, the tools' limits, the batch rule, dedup, the
WebSocket oversize watch."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from refkernel.convo import ToolCall
from refkernel.dialects.chat import _Accumulator, _NaiveAccumulator
from refkernel.procs import MediaWorker, Residents
from refkernel.scheduler import Dedup
from refkernel.settings import KernelSettings
from refkernel.tools import MAX_OUTPUT, Toolbox, schedule
from rkhelpers import procs_in
from waiting import await_until


def frag(index=None, id_=None, name=None, args=None):
    f = {"function": {}}
    if index is not None:
        f["index"] = index
    if id_ is not None:
        f["id"] = id_
        f["type"] = "function"
    if name is not None:
        f["function"]["name"] = name
    if args is not None:
        f["function"]["arguments"] = args
    return f


def calls(acc, frags):
    for f in frags:
        acc.add(f)
    return [(c.id, c.name, c.arguments) for c in acc.result()]


def test_accumulator_interleaved_by_index():
    frags = [
        frag(0, "a", "lookup", ""), frag(1, "b", "cmd_run", ""),
        frag(0, args='{"key":'), frag(1, args='{"command":'), frag(0, args='"x"}'), frag(1, args='"ls"}'),
    ]
    assert calls(_Accumulator(), frags) == [("a", "lookup", '{"key":"x"}'), ("b", "cmd_run", '{"command":"ls"}')]


def test_accumulator_quirks():
    # every call at index 0, each with its own id
    assert calls(_Accumulator(), [frag(0, "a", "f", ""), frag(0, args="{}"), frag(0, "b", "g", ""), frag(0, args='{"k":1}')]) == [
        ("a", "f", "{}"), ("b", "g", '{"k":1}')]
    # no index at all
    assert calls(_Accumulator(), [frag(None, "a", "f", '{"x"'), frag(None, args=":1}"), frag(None, "b", "g", "{}")]) == [
        ("a", "f", '{"x":1}'), ("b", "g", "{}")]
    # a "{}" placeholder before the real arguments; the name repeated; arguments as an object
    assert calls(_Accumulator(), [frag(0, "a", "f", "{}"), frag(0, name="f", args='{"k"'), frag(0, args=":2}")]) == [("a", "f", '{"k":2}')]
    assert calls(_Accumulator(), [frag(0, "a", "f", {"k": 3})]) == [("a", "f", '{"k": 3}')]
    # no id at all: one is made up, unique per call
    got = calls(_Accumulator(), [frag(0, None, "f", "{}"), frag(1, None, "g", "{}")])
    assert [c[0] for c in got] == ["call_refkernel_0", "call_refkernel_1"]


def test_naive_accumulator_glues_every_call_into_the_first():
    frags = [frag(0, "a", "lookup", ""), frag(0, args='{"k":0}'), frag(1, "b", "lookup", ""), frag(1, args='{"k":1}')]
    assert calls(_NaiveAccumulator(), frags) == [("a", "lookup", '{"k":0}{"k":1}')]


@pytest.fixture
async def toolbox(tmp_path: Path):
    made = []

    async def make(*faults: str, **kw) -> Toolbox:
        s = KernelSettings(socket=tmp_path / "k.sock", llm_url="http://127.0.0.1:9/v1", data_dir=tmp_path / "data",
                           faults=frozenset(faults), **kw)
        s.data_dir.mkdir(exist_ok=True)
        res, media = Residents(s.data_dir, s.max_residents, leak=False), MediaWorker(s.data_dir)
        made.append((res, media))
        return Toolbox(s, res, media, broadcast=lambda frame: 0)

    yield make
    for res, media in made:
        await res.aclose(1.0)
        await media.aclose(1.0)


def call(tool: str, /, **args) -> ToolCall:
    return ToolCall(index=0, id="c0", name=tool, arguments=json.dumps(args))


async def test_cmd_run_output_status_and_error_convention(toolbox):
    tb = await toolbox()
    ok = await tb.run(call("cmd_run", command="echo hi; echo there >&2"))
    assert (ok.ok, ok.content) == (True, "hi\nthere\n")
    bad = await tb.run(call("cmd_run", command="echo partial; exit 3"))
    assert not bad.ok and bad.content.startswith("ERROR: command exited with status 3") and "partial" in bad.content
    # a successful output that reads like an error is marked as output
    looks_bad = await tb.run(call("cmd_run", command="echo error: not really"))
    assert looks_bad.ok and looks_bad.content.startswith("output:\n")
    big = await tb.run(call("cmd_run", command="head -c 300000 /dev/zero | tr '\\0' a"))
    assert big.ok and big.content.count("a") == MAX_OUTPUT and "bytes of output dropped" in big.content


async def test_cmd_run_cancelled_while_spawning_leaves_nothing(toolbox, tmp_path, monkeypatch):
    # A turn cancelled (client gone, shutdown) while its shell is being spawned:
    # the child exists already, but create_subprocess_exec has not returned it.
    # A loop slow to finish the spawn makes that window wide enough to hit.
    real = asyncio.create_subprocess_exec
    spawned = asyncio.Event()

    async def slow_spawn(*args, **kw):
        proc = await real(*args, **kw)
        spawned.set()
        await asyncio.sleep(0.5)
        return proc

    monkeypatch.setattr(asyncio, "create_subprocess_exec", slow_spawn)
    tb = await toolbox()
    data = tmp_path / "data"
    task = asyncio.ensure_future(tb.run(call("cmd_run", command="sleep 30 & sleep 30")))
    await asyncio.wait_for(spawned.wait(), 10)
    await await_until(lambda: len(procs_in(data)) >= 2, 10, "the shell and what it forked")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await await_until(lambda: procs_in(data) == [], 5, "the spawned group to be gone")
    assert tb.cmd_running == 0


async def test_cmd_run_timeout_kills_the_whole_group(toolbox, tmp_path):
    tb = await toolbox(tool_timeout=0.5)
    t0 = time.monotonic()
    res = await tb.run(call("cmd_run", command="sleep 30 & sleep 30; echo never"))
    assert time.monotonic() - t0 < 5
    assert not res.ok and "timed out after 0.5 s" in res.content
    assert procs_in(tmp_path / "data") == []  # the backgrounded sleep too


async def test_tool_argument_errors(toolbox):
    tb = await toolbox()
    cases = [
        (ToolCall(0, "c", "nope", "{}"), "unknown tool 'nope'"),
        (ToolCall(0, "c", "lookup", '{"key":'), "not valid JSON"),
        (ToolCall(0, "c", "lookup", "[1]"), "must be a JSON object"),
        (call("lookup", key=5), "argument 'key' must be a string"),
        (call("knowledge_create", title="../etc/passwd", content="x"), "not usable as a file name"),
        (call("resident_start", name="r", argv=[]), "argv must be a non-empty list"),
    ]
    for c, message in cases:
        res = await tb.run(c)
        assert not res.ok and res.content.startswith("ERROR: ") and message in res.content, (c, res.content)


async def test_swallow_tool_errors_reports_failure_as_success(toolbox):
    tb = await toolbox("swallow-tool-errors")
    res = await tb.run(call("cmd_run", command="exit 4"))
    assert res.ok and not res.content.startswith("ERROR") and "status 4" in res.content


async def test_knowledge_create_writes_file_and_index(toolbox, tmp_path):
    tb = await toolbox()
    for title in ("kst-a-1", "kst-a-2", "kst-a-1"):
        res = await tb.run(call("knowledge_create", title=title, content=f"about {title}\n"))
        assert res.ok and title in res.content
    assert (tmp_path / "data/knowledge/kst-a-2.md").read_text() == "about kst-a-2\n"
    assert (tmp_path / "data/knowledge/INDEX").read_text() == "kst-a-1\nkst-a-2\n"


async def test_resident_names_are_unique_and_bounded(toolbox):
    tb = await toolbox(max_residents=1)
    first = await tb.run(call("resident_start", name="r1", argv=["sleep", "60"]))
    assert first.ok and "pid" in first.content
    again = await tb.run(call("resident_start", name="r1", argv=["sleep", "60"]))
    assert not again.ok and "already running" in again.content
    more = await tb.run(call("resident_start", name="r2", argv=["sleep", "60"]))
    assert not more.ok and "--max-residents" in more.content
    missing = await tb.run(call("resident_start", name="r3", argv=["/no/such/binary"]))
    assert not missing.ok


@pytest.mark.parametrize(
    "faults, names, serial",
    [
        ((), ["lookup"], True),
        ((), ["lookup", "cmd_run"], False),
        ((), ["cmd_run", "knowledge_create", "cmd_run"], True),
        ((), ["lookup", "mystery"], True),
        (("serial-tools",), ["lookup", "lookup"], True),
        (("always-parallel",), ["cmd_run", "knowledge_create"], False),
        (("always-parallel",), ["knowledge_create"], True),
    ],
)
async def test_batch_rule(toolbox, faults, names, serial):
    tb = await toolbox(*faults)
    steps = schedule([ToolCall(i, f"c{i}", n, "{}") for i, n in enumerate(names)], tb.mode)
    assert steps == ([[i] for i in range(len(names))] if serial else [list(range(len(names)))])


S, U = "cmd_run", "knowledge_create"  # parallel-safe, not parallel-safe


@pytest.mark.parametrize(
    "mode, names, steps",
    [
        ("whole-batch", [S, S, U, S], [[0], [1], [2], [3]]),
        ("whole-batch", [S, S, S], [[0, 1, 2]]),
        ("barrier", [S, S, U, S], [[0, 1], [2], [3]]),
        ("barrier", [S, S, S, U], [[0, 1, 2], [3]]),
        ("barrier", [U, U, S, S, U], [[0], [1], [2, 3], [4]]),
        ("barrier", [S, "mystery", S], [[0], [1], [2]]),  # unknown = unsafe = a barrier
        ("barrier", [S, S], [[0, 1]]),
        ("parallel", [S, U, S, U], [[0, 1, 2, 3]]),
        ("serial", [S, S, S], [[0], [1], [2]]),
        ("parallel", [U], [[0]]),
        ("barrier", [], []),
    ],
)
def test_batch_modes_as_steps(mode, names, steps):
    assert schedule([ToolCall(i, f"c{i}", n, "{}") for i, n in enumerate(names)], mode) == steps


@pytest.mark.parametrize(
    "batch, faults, mode",
    [
        ("barrier", (), "barrier"),
        ("barrier", ("serial-tools",), "serial"),
        ("parallel", ("serial-tools",), "serial"),
        ("serial", ("always-parallel",), "parallel"),
        ("whole-batch", ("serial-tools", "always-parallel"), "serial"),
    ],
)
async def test_scheduling_faults_replace_the_mode(toolbox, batch, faults, mode):
    assert (await toolbox(*faults, batch=batch)).mode == mode


def test_dedup_window_and_capacity(monkeypatch):
    now = [100.0]
    monkeypatch.setattr("refkernel.scheduler.time.monotonic", lambda: now[0])
    d = Dedup(window=10, capacity=2)
    d.remember("a")
    assert d.seen("a") and not d.seen("b")
    now[0] += 10.5
    assert not d.seen("a")
    for t in ("x", "y", "z"):
        d.remember(t)
    assert len(d) == 2 and not d.seen("x") and d.seen("z")
    assert not Dedup(window=0).seen("a")


def test_refkernel_imports_only_stdlib_aiohttp_psutil():
    """It stands in for someone else's binary: no harness, no mock, no click."""
    import ast
    import subprocess
    import sys

    code = (
        "import sys, refkernel, refkernel.__main__, refkernel.kernel;"
        "print(sorted({m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(ast.literal_eval(out))
    assert not loaded & {"harness", "mock", "click", "pyroute2"}, loaded
    third_party = {m for m in loaded if m not in sys.stdlib_module_names and not m.startswith("_")}
    allowed = {"refkernel", "aiohttp", "psutil", "multidict", "yarl", "frozenlist", "aiosignal", "attr", "propcache",
               "aiohappyeyeballs", "idna", "typing_extensions", "async_timeout", "sitecustomize", "usercustomize",
               "cython_runtime"}  # cython_runtime: aiohttp's compiled speedups
    assert third_party <= allowed, third_party - allowed


@pytest.mark.parametrize(
    "spec, scheme, host, port, path, ready",
    [
        ("tcp:127.0.0.1:0", "tcp", "127.0.0.1", 0, "/", "tcp:127.0.0.1:0"),
        ("tcp:[::1]:8765", "tcp", "::1", 8765, "/", "tcp:[::1]:8765"),
        ("ws:127.0.0.1:8765/kernel", "ws", "127.0.0.1", 8765, "/kernel", "ws://127.0.0.1:8765/kernel"),
        ("ws:localhost:0", "ws", "localhost", 0, "/", "ws://localhost:0/"),
        ("ws://127.0.0.1:8765/kernel", "ws", "127.0.0.1", 8765, "/kernel", "ws://127.0.0.1:8765/kernel"),  # as the ready line says it
        ("unix:/tmp/rk/k.sock", "unix", "", 0, "/", "/tmp/rk/k.sock"),
    ],
)
def test_listen_forms(spec, scheme, host, port, path, ready):
    from refkernel.settings import Listen

    ln = Listen.parse(spec)
    assert (ln.scheme, ln.host, ln.port, ln.url_path, ln.ready_name) == (scheme, host, port, path, ready)
    assert Listen.parse(str(ln)) == ln


def test_socket_is_listen_unix_and_exactly_one_is_given(tmp_path):
    from refkernel import ConfigError
    from refkernel.settings import Listen

    kw = dict(llm_url="http://127.0.0.1:9/v1", data_dir=tmp_path)
    a = KernelSettings(socket=tmp_path / "k.sock", **kw)
    b = KernelSettings(listen=f"unix:{tmp_path / 'k.sock'}", **kw)
    assert a.listen == b.listen == Listen("unix", path=tmp_path / "k.sock") and a.socket == b.socket
    assert KernelSettings(listen="tcp:127.0.0.1:0", **kw).socket is None
    with pytest.raises(ConfigError, match="not both"):
        KernelSettings(socket=tmp_path / "k.sock", listen="tcp:127.0.0.1:0", **kw)
    with pytest.raises(ConfigError, match="not neither"):
        KernelSettings(**kw)
    with pytest.raises(ConfigError, match="data_dir"):
        KernelSettings(listen="tcp:127.0.0.1:0", llm_url="http://127.0.0.1:9/v1")


def _turn_msgs(t: str) -> list[dict]:
    return [{"role": "user", "content": t}, {"role": "assistant", "content": t.upper()}]


def test_sessions_keep_whole_turns_and_forget_the_least_recently_used():
    from refkernel.sessions import Sessions

    s = Sessions(turns=2, capacity=2)
    for t in ("a1", "a2", "a3"):
        s.record("a", _turn_msgs(t))
    assert s.history("a") == _turn_msgs("a2") + _turn_msgs("a3")  # the oldest turn dropped, whole
    s.record("b", _turn_msgs("b1"))
    s.history("a")  # reading is a use: b is now the least recently used
    s.record("c", _turn_msgs("c1"))
    assert (len(s), s.evictions, "a" in s, "b" in s, "c" in s) == (2, 1, True, False, True)
    assert s.history("b") == [] and "b" not in s  # reading an unknown session creates nothing
    s.record("a", _turn_msgs("a4"), last_only=True)  # the drop-history fault
    assert s.history("a") == _turn_msgs("a4")


def test_dedup_remembers_a_session_text_for_that_session():
    d = Dedup(30)
    d.remember("t")
    d.remember("u", "A")
    assert (d.seen("t"), d.seen("t", "A"), d.seen("u"), d.seen("u", "A"), d.seen("u", "B")) == (True, False, False, True, False)
    d.remember("b", "a")
    assert not d.seen("ab") and not d.seen("b", "a\0") and not d.seen("", "ab")  # no pair reads as another


@pytest.mark.parametrize("field, value", [("session_turns", 0), ("session_turns", True), ("session_turns", 100_001),
                                          ("max_sessions", 0), ("max_sessions", 2.0), ("max_steps", 101)])
def test_session_and_step_limits_are_checked(tmp_path, field, value):
    from refkernel import ConfigError

    with pytest.raises(ConfigError, match=f"{field}={value!r} is invalid: use 1 to"):
        KernelSettings(listen="tcp:127.0.0.1:0", llm_url="http://127.0.0.1:9/v1", data_dir=tmp_path, **{field: value})
    d = KernelSettings(listen="tcp:127.0.0.1:0", llm_url="http://127.0.0.1:9/v1", data_dir=tmp_path)
    assert (d.max_steps, d.session_turns, d.max_sessions) == (32, 64, 10_000)


def _ws_head(opcode: int, n: int, fin: bool = True) -> bytes:
    """A masked client frame's header (RFC 6455 5.2); the watch never looks past headers."""
    head = bytes([(0x80 if fin else 0) | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 1 << 16:
        head += bytes([0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([0x80 | 127]) + n.to_bytes(8, "big")
    return head + b"mask"


class _Inner(asyncio.Protocol):
    def __init__(self) -> None:
        self.got = bytearray()
        self.lost = False

    def data_received(self, data: bytes) -> None:
        self.got += data

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


def _feed(watch, data: bytes, sizes=(1, 3, 65536, 7, 100_000, 2)) -> None:
    """In reads of uneven sizes, so that headers split across them."""
    pos, i = 0, 0
    while pos < len(data):
        watch.data_received(data[pos:pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1


def test_ws_oversize_watch_ends_with_the_last_byte_of_the_message_over_the_limit():
    from refkernel.settings import MAX_FRAME
    from refkernel.transport import _OversizeWatch

    inner = _Inner()
    watch = _OversizeWatch(inner)
    half = MAX_FRAME // 2 + 1
    stream = (
        _ws_head(0x1, 20) + b"x" * 20
        + _ws_head(0x1, MAX_FRAME) + b"x" * MAX_FRAME  # at the limit: allowed
        + _ws_head(0x1, half, fin=False) + b"x" * half
        + _ws_head(0x9, 4) + b"ping"  # a control frame between the fragments
        + _ws_head(0x0, half) + b"x" * half  # the two fragments sum to one byte over
    )
    _feed(watch, stream[:-1])
    assert not watch.ended.is_set()
    watch.data_received(stream[-1:])
    assert watch.ended.is_set()
    watch.data_received(_ws_head(0x1, 2) + b"{}")
    assert bytes(inner.got) == stream + _ws_head(0x1, 2) + b"{}"  # aiohttp's protocol gets every byte


def test_ws_oversize_watch_gives_up_after_its_bytes_and_passes_connection_lost_on():
    from refkernel.transport import WS_DRAIN_MAX, _OversizeWatch

    watch = _OversizeWatch(inner := _Inner())
    watch.data_received(_ws_head(0x1, 1 << 62))  # a message that never ends
    block = b"x" * (1 << 20)
    for _ in range(WS_DRAIN_MAX // len(block)):
        watch.data_received(block)
    assert not watch.ended.is_set()
    watch.data_received(b"x")
    assert watch.ended.is_set()
    other = _OversizeWatch(_Inner())
    other.connection_lost(None)
    assert other.ended.is_set() and other.inner.lost and not inner.lost
