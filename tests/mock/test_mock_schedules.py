"""Fault schedules (issue 24 item 1): !flaky:KINDxN[:ra=S], !stall:MS[xN] and
!truncate per nonce and per attempt on all three dialects, and the
provider-wide --rate-limit. A real aiohttp client against MockServer on
loopback; what each attempt got is read back from /_mock/verdicts."""

from __future__ import annotations

import json
import math
import time
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from mock import ConfigError, MockServer, MockSettings
from mock.__main__ import main as mock_main
from mock.errors import MarkerError
from mock.faults import TokenBucket, parse_rate, retry_after_headers
from mock.markers import DIALECTS, FAULT_MARKERS, build_plan, compose, parse_markers

from mockhelpers import PATHS, first_body, followup_body
from waiting import await_until

# each dialect's terminal event: what !truncate must leave out and a whole stream has
TERMINAL = {"chat": b"data: [DONE]", "anthropic": b"event: message_stop", "responses": b"event: response.completed"}


# --- the grammar ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "kind", "label", "count", "retry_after", "stall_ms"),
    [
        ("!flaky:429x2", "flaky", "429", 2, 1, 0),
        ("!flaky:429x1:ra=3", "flaky", "429", 1, 3, 0),
        ("!flaky:429x1:ra=0", "flaky", "429", 1, 0, 0),
        ("!flaky:529x1", "flaky", "529", 1, None, 0),
        ("!flaky:503x64:ra=5", "flaky", "503", 64, 5, 0),
        ("!flaky:500x3", "flaky", "500", 3, None, 0),
        ("!flaky:reset", "flaky", "reset", 1, None, 0),
        ("!flaky:resetx2", "flaky", "reset", 2, None, 0),
        ("!stall:2000", "stall", "stall", 1, None, 2000),
        ("!stall:50x3", "stall", "stall", 3, None, 50),
        ("!truncate", "truncate", "truncate", 1, None, 0),
    ],
)
def test_fault_markers_parse(text: str, kind: str, label: str, count: int, retry_after, stall_ms: int) -> None:
    plan = build_plan(f"{text} #n")
    f = plan.fault
    assert plan.kind == "text" and f is not None
    assert (f.kind, f.label, f.count, f.retry_after_s, f.stall_ms, f.token) == (kind, label, count, retry_after, stall_ms, text)


def test_a_fault_marker_rides_beside_a_plan_marker() -> None:
    plan = build_plan("go !batch2 !flaky:429x1 #n1")
    assert plan.kind == "batch" and plan.marker == "!batch2" and len(plan.calls) == 2
    assert plan.fault is not None and plan.fault.token == "!flaky:429x1"
    # the calls are the plan's own, as without the fault marker (the follow-up is judged against them)
    assert plan.calls == build_plan("go !batch2 #n1").calls
    assert parse_markers("!truncate !loop2 #n")[0].token == "!loop2"
    # without an explicit nonce the hash is of the whole text, fault marker and all
    assert build_plan("!truncate !batch1").nonce == build_plan("!truncate !batch1").nonce


def test_fault_schedule_in_every_attempt_order() -> None:
    flaky = build_plan("!flaky:500x2 #n").fault
    assert [flaky.applies(a) for a in (1, 2, 3, 4)] == [True, True, False, False]
    truncate = build_plan("!truncate #n").fault
    assert all(truncate.applies(a) for a in (1, 2, 50))


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("!flaky:429x", "attempts '' after 'x' must be a whole number from 1 to 64"),
        ("!flaky:429x0", "attempts '0'"),
        ("!flaky:429x65", "attempts '65'"),
        ("!flaky:418x1", "unknown fault '418'"),
        ("!flaky:429", "'429' needs its number of attempts"),
        ("!flaky", "needs a fault"),
        ("!flaky:429x1:ra=x", "'ra=x' is not ra=S"),
        ("!flaky:429x1:ra=601", "'ra=601'"),
        ("!flaky:429x1:wait=1", "'wait=1' is not ra=S"),
        ("!flaky:reset:ra=1", "a reset sends no response, so no Retry-After"),
        ("!stall", "needs a duration"),
        ("!stall:abc", "duration 'abc' is not whole milliseconds from 1 to 600000"),
        ("!stall:0", "duration '0'"),
        ("!stall:100x0", "attempts '0'"),
        ("!truncate:1", "!truncate takes no ':' arguments"),
        ("!flaky:429x1 !truncate", "plus at most one fault marker"),
        ("!flaky:429x1 !batch1 !batch2", "holds 3 markers"),
        ("!flaky:429x1 !err:500", "cannot join '!err:500'"),
        ("!stall:10 !hang", "cannot join '!hang'"),
    ],
)
def test_bad_fault_markers_name_value_rule_and_fix(text: str, words: str) -> None:
    with pytest.raises(MarkerError) as info:
        build_plan(text + " #n")
    msg = str(info.value)
    assert words in msg
    # every message but the composition ones shows the form to write
    assert "write !" in msg or "pair it with" in msg or "at most one" in msg


def test_the_fault_marker_family() -> None:
    assert FAULT_MARKERS == ("flaky", "stall", "truncate")


# --- the rate limit's pieces ------------------------------------------------------


def test_token_bucket_passes_a_burst_then_computes_the_wait() -> None:
    b = TokenBucket(2.0, now=100.0)
    assert b.take(100.0) is None and b.take(100.0) is None  # one second's worth
    assert b.take(100.0) == pytest.approx(0.5)
    assert b.take(100.25) == pytest.approx(0.25)  # half a token back
    assert b.take(100.5) is None
    assert b.take(100.4) == pytest.approx(0.5)  # an earlier arrival adds nothing
    slow = TokenBucket(0.1, now=0.0)  # below 1/s: holds one token
    assert slow.take(0.0) is None and slow.take(0.0) == pytest.approx(10.0)


def test_retry_after_headers_round_the_seconds_up() -> None:
    assert retry_after_headers(1) == {"retry-after": "1", "retry-after-ms": "1000"}
    assert retry_after_headers(0.2501) == {"retry-after": "1", "retry-after-ms": "251"}
    assert retry_after_headers(0) == {"retry-after": "0", "retry-after-ms": "0"}


@pytest.mark.parametrize(("text", "rate"), [("50/s", 50.0), ("0.5/s", 0.5), ("7", 7.0)])
def test_parse_rate(text: str, rate: float) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0/s", "fast", "-1/s", "5/min", "2000000/s", ""])
def test_bad_rate_names_value_rule_and_fix(text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_rate(text)
    assert repr(text) in str(info.value) and "e.g. --rate-limit 50/s" in str(info.value)


def test_bad_rate_is_a_usage_error(capsys) -> None:
    assert mock_main(["--rate-limit", "lots"]) == 2
    assert "--rate-limit 'lots' is invalid" in capsys.readouterr().err


def test_rate_limit_setting_is_checked() -> None:
    with pytest.raises(ConfigError, match="rate_limit=0 is invalid"):
        MockSettings(rate_limit=0)


# --- the server ----------------------------------------------------------------------


async def _post(s: aiohttp.ClientSession, m: MockServer, dialect: str, body: dict[str, Any]) -> tuple[int, Any, bytes]:
    async with s.post(m.url + PATHS[dialect], json=body) as r:
        return r.status, r.headers, await r.read()


async def _entry(s: aiohttp.ClientSession, m: MockServer, nonce: str) -> dict[str, Any]:
    async with s.get(m.url + "/_mock/verdicts", params={"nonce": nonce}) as r:
        return (await r.json())["verdicts"][nonce]


def _text(dialect: str, body: bytes) -> str:
    """The text a streamed or whole reply carries, its deltas joined: the
    verdict line is split across them."""
    if not body.startswith((b"data:", b"event:")):
        return json.dumps(json.loads(body))
    out = []
    for line in body.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        ev = json.loads(line[6:])
        if dialect == "chat":
            for choice in ev.get("choices") or ():
                out.append((choice.get("delta") or {}).get("content") or "")
        elif dialect == "anthropic":
            if ev.get("type") == "content_block_delta":
                out.append(ev["delta"].get("text") or "")
        elif ev.get("type") == "response.output_text.delta":
            out.append(ev["delta"])
    return "".join(out)


def _error_of(dialect: str, body: bytes, status: int) -> str:
    """The error type (Anthropic) or code (OpenAI's forms) the body carries."""
    doc = json.loads(body)
    if dialect == "anthropic":
        assert doc["type"] == "error"
        return doc["error"]["type"]
    return doc["error"]["code"]


WANT_ERROR = {
    "anthropic": {"429": "rate_limit_error", "500": "api_error", "503": "overloaded_error", "529": "overloaded_error"},
    "chat": {"429": "rate_limit_exceeded", "500": "internal_error", "503": "overloaded", "529": "overloaded"},
}
WANT_ERROR["responses"] = WANT_ERROR["chat"]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("kind", ["429", "500", "503", "529"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_flaky_http_fails_n_attempts_then_answers(mock, session, dialect: str, kind: str, stream: bool) -> None:
    nonce = f"fl{kind}{dialect}{int(stream)}"
    text = compose(f"!flaky:{kind}x2", nonce)
    for attempt in (1, 2):
        status, headers, body = await _post(session, mock, dialect, first_body(dialect, text, stream))
        assert status == int(kind), f"attempt {attempt}: {status} {body[:200]!r}"
        assert _error_of(dialect, body, status) == WANT_ERROR[dialect][kind]
        assert f"on attempt {attempt} (marker !flaky:{kind}x2)".encode() in body
        if kind == "429":
            assert (headers["retry-after"], headers["retry-after-ms"]) == ("1", "1000")
        else:
            assert "retry-after" not in headers and "retry-after-ms" not in headers
    status, headers, body = await _post(session, mock, dialect, first_body(dialect, text, stream))
    assert status == 200 and f"KST nonce={nonce} plan=text ok" in _text(dialect, body)
    if stream:
        assert TERMINAL[dialect] in body
    e = await _entry(session, mock, nonce)
    assert [(r["status"], r["fault"], r["retry_after"]) for r in e["records"]] == [
        (int(kind), kind, 1 if kind == "429" else None)
    ] * 2 + [(200, None, None)]
    assert e["schedule"] == {
        "marker": f"!flaky:{kind}x2", "kind": "flaky", "fault": kind, "count": 2,
        "retry_after": 1 if kind == "429" else None, "stall_ms": None, "attempts": 3,
    }  # fmt: skip
    assert e["records"][0]["arrival"] < e["records"][1]["arrival"] < e["records"][2]["arrival"]


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_flaky_retry_after_argument(mock, session, dialect: str) -> None:
    text = compose("!flaky:503x1:ra=7", f"ra{dialect}")
    status, headers, _ = await _post(session, mock, dialect, first_body(dialect, text, True))
    assert status == 503 and (headers["retry-after"], headers["retry-after-ms"]) == ("7", "7000")
    e = await _entry(session, mock, f"ra{dialect}")
    assert e["records"][0]["retry_after"] == 7


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_flaky_batch_gives_its_calls_and_verdict_on_the_retry(mock, session, dialect: str) -> None:
    nonce = f"fb{dialect}"
    text = compose("!flaky:429x1 !batch2", nonce)
    status, _, _ = await _post(session, mock, dialect, first_body(dialect, text, True))
    assert status == 429
    status, _, body = await _post(session, mock, dialect, first_body(dialect, text, True))
    plan = build_plan(text)
    assert status == 200
    for call in plan.calls:
        assert call.id[5:].encode() in body  # each dialect's id form keeps call_'s tail
    status, _, body = await _post(session, mock, dialect, followup_body(dialect, plan, text, True))
    assert status == 200 and f"KST nonce={nonce} plan=batch expected=2 got=2" in _text(dialect, body)
    e = await _entry(session, mock, nonce)
    assert e["verdict"]["all_ok"] is True
    assert [(r["status"], r["fault"], r["followup"]) for r in e["records"]] == [(429, "429", False), (200, None, False), (200, None, True)]


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_flaky_reset_drops_the_first_attempt(mock, session, dialect: str, stream: bool) -> None:
    nonce = f"rs{dialect}{int(stream)}"
    text = compose("!flaky:reset", nonce)
    with pytest.raises(aiohttp.ClientError):  # ServerDisconnectedError: not a byte of a response
        await _post(session, mock, dialect, first_body(dialect, text, stream))
    status, _, body = await _post(session, mock, dialect, first_body(dialect, text, stream))
    assert status == 200 and f"KST nonce={nonce} plan=text ok" in _text(dialect, body)
    e = await _entry(session, mock, nonce)
    assert [(r["status"], r["fault"], r["first_byte"]) for r in e["records"]][0] == (0, "reset", None)
    assert [(r["status"], r["fault"]) for r in e["records"]][1] == (200, None)


STALL_MS = 300


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_stall_pauses_after_the_first_events_then_finishes(mock, session, dialect: str) -> None:
    nonce = f"st{dialect}"
    text = compose(f"!stall:{STALL_MS}", nonce)
    t0 = time.monotonic()
    async with session.post(mock.url + PATHS[dialect], json=first_body(dialect, text, True)) as r:
        assert r.status == 200
        body = await r.read()
        t_end = time.monotonic()
    # that the head went out before the pause is the mock's record below (first_byte
    # .. last_byte): on a loaded box the client may read head and rest at once
    assert t_end - t0 >= STALL_MS / 1000  # a lower bound only: the client's clock around the sleep
    assert TERMINAL[dialect] in body and f"KST nonce={nonce} plan=text ok" in _text(dialect, body)
    status, _, body = await _post(session, mock, dialect, first_body(dialect, text, True))
    assert status == 200 and TERMINAL[dialect] in body
    e = await _entry(session, mock, nonce)
    stalled, normal = e["records"]
    assert (stalled["fault"], normal["fault"]) == ("stall", None)
    # the mock's own times: the first byte went out, then the stall, then the last
    assert stalled["last_byte"] - stalled["first_byte"] >= STALL_MS / 1000
    assert e["schedule"]["stall_ms"] == STALL_MS


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_stall_without_a_stream_delays_the_answer(mock, session, dialect: str) -> None:
    nonce = f"sn{dialect}"
    t0 = time.monotonic()
    status, _, body = await _post(session, mock, dialect, first_body(dialect, compose(f"!stall:{STALL_MS}", nonce), False))
    assert time.monotonic() - t0 >= STALL_MS / 1000  # a lower bound only
    assert status == 200 and f"KST nonce={nonce} plan=text ok" in json.dumps(json.loads(body))


@pytest.mark.parametrize("plan_marker", ["", "!batch3"], ids=["text", "batch"])
@pytest.mark.parametrize("dialect", DIALECTS)
async def test_truncate_ends_every_attempt_without_its_terminal_event(mock, session, dialect: str, plan_marker: str) -> None:
    nonce = f"tr{dialect}{len(plan_marker)}"
    text = compose(f"!truncate {plan_marker}".strip(), nonce)
    for _ in range(2):
        status, _, body = await _post(session, mock, dialect, first_body(dialect, text, True))
        assert status == 200 and body.endswith(b"\n\n")  # a clean end of the HTTP body, on an event boundary
        assert TERMINAL[dialect] not in body
        assert "KST nonce=" not in _text(dialect, body)  # the reply's end is missing too
        assert body.count(b"\n\n") >= 1
    # the same input without the fault marker streams whole
    status, _, body = await _post(session, mock, dialect, first_body(dialect, compose(plan_marker or None, nonce + "w"), True))
    assert TERMINAL[dialect] in body
    e = await _entry(session, mock, nonce)
    assert [r["fault"] for r in e["records"]] == ["truncate", "truncate"]
    assert e["schedule"]["count"] is None


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_truncate_without_a_stream_cuts_the_json(mock, session, dialect: str) -> None:
    status, _, body = await _post(session, mock, dialect, first_body(dialect, compose("!truncate", f"tn{dialect}"), False))
    assert status == 200
    with pytest.raises(ValueError):
        json.loads(body)


async def test_nonces_without_a_fault_marker_keep_their_records(mock, session) -> None:
    await _post(session, mock, "chat", first_body("chat", compose("!batch1", "plain1"), True))
    e = await _entry(session, mock, "plain1")
    assert e["schedule"] is None and "fault" not in e["records"][0]


async def test_bad_fault_marker_is_a_400_naming_it(mock, session) -> None:
    for dialect in DIALECTS:
        status, _, body = await _post(session, mock, dialect, first_body(dialect, compose("!flaky:418x1", f"bad{dialect}"), True))
        assert status == 400 and b"unknown fault '418'" in body


# --- the provider-wide rate limit -----------------------------------------------------


RATE = 0.1  # one token, the next in 10 s: the test's requests come far sooner


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_rate_limit_answers_429_past_the_rate(session, dialect: str) -> None:
    async with MockServer(MockSettings(rate_limit=RATE)) as m:
        # streamed text: the shape the fast path would answer without the limit
        status, _, body = await _post(session, m, dialect, first_body(dialect, compose(None, "rl1"), True))
        assert status == 200 and TERMINAL[dialect] in body
        for k in (2, 3):
            status, headers, body = await _post(session, m, dialect, first_body(dialect, compose(None, f"rl{k}"), True))
            assert status == 429, body[:200]
            assert _error_of(dialect, body, status) == WANT_ERROR[dialect]["429"]
            ms = int(headers["retry-after-ms"])
            assert 0 < ms <= 1000 / RATE and headers["retry-after"] == str(math.ceil(ms / 1000))
            e = await _entry(session, m, f"rl{k}")
            (rec,) = e["records"]
            assert (rec["status"], rec["fault"], rec["retry_after"]) == (429, "rate_limit", ms / 1000)
        async with session.get(m.url + "/_mock/stats") as r:
            assert (await r.json())["rate_limited"] == 2


async def test_no_rate_limit_by_default(mock, session) -> None:
    for k in range(5):
        status, _, _ = await _post(session, mock, "chat", first_body("chat", compose(None, f"nl{k}"), True))
        assert status == 200


# --- the SDKs' own retries against a schedule -------------------------------------------


def _oa(m, retries: int) -> openai.OpenAI:
    return openai.OpenAI(base_url=m.url + "/v1", api_key="kst-test", max_retries=retries, timeout=20.0)


def _an(m, retries: int) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=m.url, api_key="kst-test", max_retries=retries, timeout=20.0)


def _gaps(records: list[dict[str, Any]]) -> list[float]:
    """Each retry's wait: from the last byte of an attempt to the next's arrival."""
    return [b["arrival"] - a["last_byte"] for a, b in zip(records, records[1:])]


def test_openai_sdk_retries_honour_the_retry_after(mock_server) -> None:
    text = compose("!flaky:429x2", "sdk-oa")
    with _oa(mock_server, 0) as c, pytest.raises(openai.RateLimitError):
        c.chat.completions.create(model="kst-test", messages=[{"role": "user", "content": compose("!flaky:429x1", "sdk-oa0")}])
    with _oa(mock_server, 2) as c:  # the SDK's default
        out = c.chat.completions.create(model="kst-test", messages=[{"role": "user", "content": text}])
    assert "KST nonce=sdk-oa plan=text ok" in out.choices[0].message.content
    records = mock_server.verdicts("sdk-oa")["sdk-oa"]["records"]
    assert [(r["status"], r["fault"], r["retry_after"]) for r in records] == [(429, "429", 1), (429, "429", 1), (200, None, None)]
    assert all(g >= 0.95 for g in _gaps(records)), _gaps(records)  # it waited the second it was told


def test_anthropic_sdk_retries_an_overload(mock_server) -> None:
    with _an(mock_server, 0) as c, pytest.raises(anthropic.OverloadedError):
        c.messages.create(model="kst-test", max_tokens=64, messages=[{"role": "user", "content": compose("!flaky:529x1", "sdk-an0")}])
    with _an(mock_server, 1) as c:
        out = c.messages.create(model="kst-test", max_tokens=64, messages=[{"role": "user", "content": compose("!flaky:529x1:ra=1", "sdk-an")}])
    assert "KST nonce=sdk-an plan=text ok" in out.content[0].text
    records = mock_server.verdicts("sdk-an")["sdk-an"]["records"]
    assert [(r["status"], r["fault"]) for r in records] == [(529, "529"), (200, None)]
    assert _gaps(records)[0] >= 0.95


def test_what_the_sdks_make_of_a_truncated_stream(mock_server) -> None:
    """The claim in docs/mock.md: chat and Anthropic streams cut short pass the
    SDKs silently (no finish/stop reason is the only sign), Responses' helper raises."""
    with _oa(mock_server, 0) as oa:
        chunks = list(oa.chat.completions.create(model="m", messages=[{"role": "user", "content": compose("!truncate", "sdk-t1")}], stream=True))
        assert chunks and all(c.choices[0].finish_reason is None for c in chunks if c.choices)
        assert "KST nonce=" not in "".join((c.choices[0].delta.content or "") for c in chunks if c.choices)
        with oa.chat.completions.stream(model="m", messages=[{"role": "user", "content": compose("!truncate", "sdk-t2")}]) as s:
            assert s.get_final_completion().choices[0].finish_reason is None
        with pytest.raises(RuntimeError, match="response.completed"), oa.responses.stream(model="m", input=compose("!truncate", "sdk-t3")) as s:
            s.get_final_response()
    with _an(mock_server, 0) as an:
        with an.messages.stream(model="m", max_tokens=64, messages=[{"role": "user", "content": compose("!truncate", "sdk-t4")}]) as s:
            assert s.get_final_message().stop_reason is None


async def test_a_client_that_gives_up_on_a_stall_is_recorded(mock, session) -> None:
    """A kernel's LLM timeout shorter than the stall: the mock records the
    attempt as abandoned (499) with its first byte and no last byte, and
    releases it at once; the retry gets the whole reply."""
    nonce = "stgone"
    text = compose("!stall:60000", nonce)
    with pytest.raises(TimeoutError):
        async with session.post(mock.url + PATHS["chat"], json=first_body("chat", text, True), timeout=aiohttp.ClientTimeout(sock_read=0.5)) as r:
            assert r.status == 200
            await r.read()

    async def abandoned() -> bool:
        e = await _entry(session, mock, nonce)
        return e["records"][0]["status"] == 499

    await await_until(abandoned, 20, "the stalled attempt recorded as abandoned (499)")
    async with session.get(mock.url + "/_mock/stats") as r:
        assert (await r.json())["inflight"] <= 1  # this stats request only
    status, _, body = await _post(session, mock, "chat", first_body("chat", text, True))
    assert status == 200 and TERMINAL["chat"] in body
    first, second = (await _entry(session, mock, nonce))["records"]
    assert (first["fault"], first["last_byte"], second["fault"]) == ("stall", None, None)
    assert first["first_byte"] is not None
