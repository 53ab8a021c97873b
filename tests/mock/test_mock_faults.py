"""Faults on demand (!err:KIND, !hang[:MS]) as the pinned openai SDK sees them
(max_retries=0, so each fault surfaces once), and as raw bytes."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import time

import openai
import pytest

from mock.markers import ERR_KINDS, compose

# kind -> (exception the SDK raises for a streamed request, for a non-stream one,
#          HTTP status the error carries, or None)
SDK_EFFECTS = {
    "500": (openai.InternalServerError, openai.InternalServerError, 500),
    "429": (openai.RateLimitError, openai.RateLimitError, 429),
    "503": (openai.InternalServerError, openai.InternalServerError, 503),
    # an error event inside a 200 stream: the base class itself, no status
    "midstream": (openai.APIError, openai.InternalServerError, None),
    "disconnect": (openai.APIConnectionError, openai.APIConnectionError, None),
    "malformed": (json.JSONDecodeError, json.JSONDecodeError, None),
}


def test_every_fault_kind_is_covered() -> None:
    assert sorted(SDK_EFFECTS) == sorted(ERR_KINDS)


def _stream(client: openai.OpenAI, text: str):
    with client.chat.completions.stream(model="kst-test", messages=[{"role": "user", "content": text}]) as s:
        return s.get_final_completion()


def _create(client: openai.OpenAI, text: str):
    return client.chat.completions.create(model="kst-test", messages=[{"role": "user", "content": text}])


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("kind", ERR_KINDS)
def test_fault_seen_through_the_sdk(client: openai.OpenAI, mock_server, kind: str, stream: bool) -> None:
    exc_stream, exc_plain, status = SDK_EFFECTS[kind]
    want = exc_stream if stream else exc_plain
    before = mock_server.stats()
    with pytest.raises(want) as info:
        (_stream if stream else _create)(client, compose(f"!err:{kind}", f"f-{kind}-{stream}"))
    assert type(info.value) is want, f"expected exactly {want.__name__}, got {type(info.value).__name__}: {info.value}"
    err = info.value
    if status is not None:
        assert isinstance(err, openai.APIStatusError) and err.status_code == status
        assert err.body["message"].startswith(f"kstress mock: injected HTTP {kind}")
    if kind == "429":
        assert err.response.headers["retry-after"] == "1"
    if kind == "503":
        assert err.body["code"] == "overloaded"
    if kind == "midstream" and stream:
        assert "injected mid-stream error" in err.message and err.body["type"] == "server_error"
    after = mock_server.stats()
    assert after["errors_injected"] == before.get("errors_injected", 0) + 1
    if kind == "disconnect":
        assert after["disconnects_injected"] == before.get("disconnects_injected", 0) + 1


def test_err_without_kind_is_500(client: openai.OpenAI) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        _create(client, compose("!err", "f-default"))
    assert info.value.status_code == 500


# --- the raw bytes -------------------------------------------------------------


def test_midstream_sends_an_error_event_after_partial_arguments(mock_server) -> None:
    reply = mock_server.chat(compose("!err:midstream", "raw-mid"))
    assert reply.status == 200
    events = reply.events()
    assert all(data != "[DONE]" for _, data in events)
    chunks = reply.chunks()
    frags = [c["choices"][0]["delta"]["tool_calls"][0] for c in chunks if c.get("choices") and "tool_calls" in c["choices"][0]["delta"]]
    assert frags[0]["id"] == "call_raw-mid_0" and len(frags) == 2  # header and one argument piece
    assert json.loads(json.dumps(frags[1]["function"]["arguments"]))  # a real piece, cut short
    assert set(chunks[-1]) == {"error"} and chunks[-1]["error"]["type"] == "server_error"


def test_malformed_sends_a_chunk_that_is_not_json(mock_server) -> None:
    reply = mock_server.chat(compose("!err:malformed", "raw-bad"))
    datas = [d for _, d in reply.events()]
    bad = [d for d in datas if d != "[DONE]" and not _is_json(d)]
    assert len(bad) == 1 and bad[0].startswith('{"id"')


def _is_json(s: str) -> bool:
    try:
        json.loads(s)
    except ValueError:
        return False
    return True


def test_disconnect_cuts_the_connection_mid_stream(mock_server) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", mock_server.port, timeout=10)
    try:
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": compose("!err:disconnect", "raw-cut")}]})
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        with pytest.raises(http.client.IncompleteRead) as info:
            resp.read()
        partial = info.value.partial
        assert b"call_raw-cut_0" in partial and b"[DONE]" not in partial
    finally:
        conn.close()


# --- !hang ----------------------------------------------------------------------


def test_hang_with_ms_delays_then_answers(client: openai.OpenAI) -> None:
    t0 = time.monotonic()
    reply = _create(client, compose("!hang:300", "hang-ms"))
    assert time.monotonic() - t0 >= 0.3
    assert reply.choices[0].finish_reason == "stop"
    assert "KST nonce=hang-ms plan=text ok" in reply.choices[0].message.content


async def test_cancelled_hang_leaves_no_task_behind(mock_server) -> None:
    before = await asyncio.to_thread(mock_server.stats)
    client = mock_server.async_client()
    try:
        task = asyncio.create_task(
            client.chat.completions.create(
                model="kst-test", messages=[{"role": "user", "content": compose("!hang", "hang-cancel")}], stream=True
            )
        )
        # the request is really hanging on the server before we give up
        await asyncio.to_thread(mock_server.wait_stats, lambda s: s["hanging"] == 1, "the request to hang")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await client.close()
    after = await asyncio.to_thread(
        mock_server.wait_stats,
        lambda s: s["inflight"] == 0 and s["hanging"] == 0,
        "the server to release the hung request",
    )
    assert after["disconnects"] >= before.get("disconnects", 0) + 1


def test_hang_released_when_the_client_times_out(mock_server) -> None:
    before = mock_server.stats()
    client = mock_server.client(timeout=0.3)
    try:
        with pytest.raises(openai.APITimeoutError):
            _create(client, compose("!hang", "hang-timeout"))
    finally:
        client.close()
    after = mock_server.wait_stats(
        lambda s: s["inflight"] == 0 and s["hanging"] == 0, "the server to release the timed-out request"
    )
    assert after["disconnects"] >= before.get("disconnects", 0) + 1


def test_hang_released_when_the_socket_closes(mock_server) -> None:
    """The bare-socket version: no HTTP client library in between."""
    before = mock_server.stats()
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": compose("!hang", "hang-sock")}]}).encode()
    with socket.create_connection(("127.0.0.1", mock_server.port), timeout=5) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        mock_server.wait_stats(lambda s: s["hanging"] == 1, "the request to hang")
    after = mock_server.wait_stats(lambda s: s["inflight"] == 0 and s["hanging"] == 0, "the hung request to be released")
    assert after["disconnects"] == before.get("disconnects", 0) + 1
