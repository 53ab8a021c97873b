"""sse_events (harness/wire/agents.py), the SSE reader of the AG-UI and
OpenAI-compatible drivers: it splits the chunks as they arrive itself (not
with aiohttp's readline, the largest part of the drivers' cost per turn:
bench/openai_client.py), so every way a chunk can cut the stream must give
the events one chunk gives."""

from __future__ import annotations

import aiohttp
import pytest

from harness.wire.agents import StreamCut, sse_batches, sse_events
from harness.wire.client import ConnError
from harness.wire.protocol import MAX_FRAME


class _Content:
    def __init__(self, chunks: list[bytes], fail: BaseException | None = None) -> None:
        self.chunks, self.fail = list(chunks), fail

    async def readany(self) -> bytes:
        if self.chunks:
            return self.chunks.pop(0)
        if self.fail is not None:
            raise self.fail
        return b""


class _Resp:
    def __init__(self, chunks: list[bytes], fail: BaseException | None = None) -> None:
        self.content = _Content(chunks, fail)


async def events(chunks: list[bytes], fail: BaseException | None = None) -> list[tuple[str | None, str, int]]:
    return [e async for e in sse_events(_Resp(chunks, fail))]  # type: ignore[arg-type]


STREAM = (
    b": a comment\n"
    b"event: response.created\n"
    b'data: {"type":"response.created"}\n'
    b"\n"
    b"id: 7\n"
    b"retry: 100\n"
    b"data:no space\n"
    b"data:  two spaces\n"
    b"\n"
    b"\n"  # a blank line with no event before it
    b'data: {"delta":"caf\xc3\xa9 \xe2\x9c\x93"}\n'
    b"\n"
    b"data: [DONE]\n"
    b"\n"
)
EXPECTED = [
    ("response.created", '{"type":"response.created"}', len(b": a comment\nevent: response.created\n" b'data: {"type":"response.created"}\n\n')),
    (None, "no space\n two spaces", len(b"id: 7\nretry: 100\ndata:no space\ndata:  two spaces\n\n")),
    (None, '{"delta":"caf\u00e9 \u2713"}', len(b'data: {"delta":"caf\xc3\xa9 \xe2\x9c\x93"}\n\n')),
    (None, "[DONE]", len(b"data: [DONE]\n\n")),
]


async def test_one_chunk() -> None:
    assert await events([STREAM]) == EXPECTED
    assert sum(size for _, _, size in EXPECTED) == len(STREAM) - 1  # every byte once, but a blank line that ends no event


async def test_every_byte_its_own_chunk() -> None:
    # an event, a line, a field name and a UTF-8 character each cut across chunks
    assert await events([STREAM[i:i + 1] for i in range(len(STREAM))]) == EXPECTED


@pytest.mark.parametrize("cut", range(1, 60, 7))
async def test_two_chunks_cut_anywhere(cut: int) -> None:
    assert await events([STREAM[:cut], STREAM[cut:]]) == EXPECTED


async def test_crlf_lines_give_the_same_events_their_bytes_counted() -> None:
    crlf = STREAM.replace(b"\n", b"\r\n")
    got = await events([crlf[i:i + 5] for i in range(0, len(crlf), 5)])  # a CR and its LF in two chunks
    assert [(n, d) for n, d, _ in got] == [(n, d) for n, d, _ in EXPECTED]
    assert sum(s for _, _, s in got) == len(crlf) - 2


async def test_an_event_without_its_blank_line_at_the_end_is_not_taken() -> None:
    assert await events([b'data: {"a":1}\n\ndata: {"b":2}\n']) == [(None, '{"a":1}', 15)]


async def test_a_line_that_never_ends_is_a_protocol_error_at_the_frame_limit() -> None:
    # refused once past MAX_FRAME, not read to its end
    chunk = b"x" * 65536
    resp = _Resp([b"data: "] + [chunk] * (MAX_FRAME // len(chunk) + 4))
    with pytest.raises(ConnError) as exc:
        [e async for e in sse_events(resp)]  # type: ignore[arg-type]
    assert exc.value.kind == "protocol" and "frame limit" in str(exc.value)
    assert resp.content.chunks, "read to its end"


async def test_an_event_of_many_lines_over_the_frame_limit_is_a_protocol_error() -> None:
    line = b"data: " + b"x" * 1000 + b"\n"
    with pytest.raises(ConnError, match="frame limit"):
        await events([line * (MAX_FRAME // len(line) + 1) + b"\n"])


async def test_a_body_broken_off_is_a_stream_cut() -> None:
    with pytest.raises(StreamCut, match="broke off"):
        await events([b'data: {"a":1}\n\ndata: {"b"'], fail=aiohttp.ClientPayloadError("cut"))


async def test_the_events_before_an_event_over_the_limit_come_out_first() -> None:
    # as one event at a time they would: a driver that ends its turn on the first never sees the error
    line = b"data: " + b"x" * 1000 + b"\n"
    gen = sse_events(_Resp([b'data: {"a":1}\n\n' + line * (MAX_FRAME // len(line) + 1) + b"\n"]))  # type: ignore[arg-type]
    assert await gen.__anext__() == (None, '{"a":1}', 15)
    with pytest.raises(ConnError, match="frame limit"):
        await gen.__anext__()


async def test_a_chunk_s_events_come_as_one_batch() -> None:
    half = len(STREAM) // 2
    batches = [b async for b in sse_batches(_Resp([STREAM[:half], STREAM[half:]]))]  # type: ignore[arg-type]
    assert [e for b in batches for e in b] == EXPECTED and len(batches) == 2
