"""OpenAI chat-completions wire format: SSE chunks, the non-stream object, quirks.

A reply is rendered into a list of *events*, each the exact bytes of one SSE
event (``data: <json>\\n\\n``), plus at most one :data:`CUT` sentinel that tells
the server to drop the connection there. Rendering is separate from sending so
that an unpaced reply goes out in a single write (one awaited write per chunk
caps aiohttp near 2,000 streams/s) and a paced one chunk by chunk.

docs/wire.md describes the format and every quirk for users.
"""

from __future__ import annotations

import functools
import json
import re
import time
from random import getrandbits as _getrandbits
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from .markers import Call

CUT = b""  # sentinel event: cut the TCP connection here
DONE = b"data: [DONE]\n\n"
FINGERPRINT = "fp_kstress"

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
# What _dumps does to a str (ensure_ascii=False), without the encoder's dispatch:
# the hot paths below build the JSON of fixed-shape deltas around it.
_str = json.encoder.encode_basestring
_ROLE_DELTA = _dumps({"role": "assistant", "content": None})
_FINISH = {f: _dumps(f) for f in ("stop", "tool_calls", "error", "length")}


def new_id() -> str:
    # unique per response, not a secret: the PRNG (seeded from the OS at
    # start) instead of a getrandom() syscall per response
    return f"chatcmpl-{_getrandbits(96):024x}"


def split_arguments(args: str) -> list[str]:
    """Cut a JSON argument string in several pieces, one of them inside the
    first key (mid-token) and one right after the first backslash (mid-escape),
    the way real providers stream them. Never one piece when len >= 2."""
    n = len(args)
    if n >= 8:
        # the same cuts as below, without the set: 3 < n//2 < 3n//4 here
        half, three_q = n // 2, (3 * n) // 4
        k = args.find("\\") + 1
        if k <= 0 or k >= n or k == 3 or k == half or k == three_q:
            return [args[:3], args[3:half], args[half:three_q], args[three_q:]]
        if k < 3:
            return [args[:k], args[k:3], args[3:half], args[half:three_q], args[three_q:]]
        if k < half:
            return [args[:3], args[3:k], args[k:half], args[half:three_q], args[three_q:]]
        if k < three_q:
            return [args[:3], args[3:half], args[half:k], args[k:three_q], args[three_q:]]
        return [args[:3], args[3:half], args[half:three_q], args[three_q:k], args[k:]]
    if n < 2:
        return [args]
    cuts = {min(3, n - 1), n // 2, (3 * n) // 4}
    backslash = args.find("\\")
    if 0 <= backslash < n - 1:
        cuts.add(backslash + 1)
    cuts.discard(0)  # n // 2 and 3n // 4 are < n; only n == 2, 3 can give a 0 cut
    points = sorted(cuts)
    return [args[a:b] for a, b in zip([0, *points], [*points, n])]


def split_text(text: str, pieces: int) -> list[str]:
    if pieces <= 1 or len(text) <= 1:
        return [text]
    pieces = min(pieces, len(text))
    size, extra = divmod(len(text), pieces)
    out, pos = [], 0
    for k in range(pieces):
        step = size + (1 if k < extra else 0)
        out.append(text[pos : pos + step])
        pos += step
    return out


def text_deltas(text: str, pieces: int) -> list[str]:
    """The JSON deltas of a text reply: role, then the text in pieces."""
    deltas = [_ROLE_DELTA]
    deltas += ['{"content":' + _str(p) + "}" for p in split_text(text, pieces)]
    return deltas


def tool_deltas(calls: Sequence[Call]) -> list[str]:
    """The JSON deltas of a correct tool-call stream: role, then per call a
    named header fragment and its argument pieces. Byte for byte
    _dumps({"tool_calls": [f]}) for f in fragments(calls), built directly."""
    deltas = [_ROLE_DELTA]
    for c in calls:
        idx = str(c.index)
        deltas.append(
            '{"tool_calls":[{"index":' + idx + ',"id":' + _str(c.id) + ',"type":"function","function":{"name":'
            + _str(c.name) + ',"arguments":""}}]}'
        )
        cont = '{"tool_calls":[{"index":' + idx + ',"function":{"arguments":'
        deltas += [cont + _str(p) + "}}]}" for p in split_arguments(c.arguments)]
    return deltas


NONCE_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"


class StreamTemplate:
    """The framed deltas of one reply *shape* with the nonce left as holes.

    Every input carries its own nonce, but inputs with the same marker and the
    same nonce length get replies that differ only in the nonce's characters
    (and the per-response id/created/model). The template is found by
    rendering the reply with two probe nonces that differ at every position
    and keeping what they share; :meth:`fill` then gives, for any nonce of that
    length, exactly what rendering it would (checked at build time against
    two more renders). A nonce cut in two by the argument splitter is two holes.

    Holes are control characters \\x01..\\x1f but \\n, and deltas are
    separated by NUL: JSON text never holds those raw, so filling is a few
    ``str.replace`` calls on a string that stays as narrow as the reply itself.
    A delta may hold raw newlines (whole SSE frames of the dialects that name
    their events); they stay text.
    """

    __slots__ = ("length", "_text", "_holes", "_bytes", "_bholes")

    _SEP = "\x00"
    _MARKS = tuple(chr(c) for c in range(1, 32) if c != 10)
    _MAX_HOLES = len(_MARKS)
    _CONTROL = re.compile("[\x00-\x09\x0b-\x1f]")

    def __init__(self, length: int, text: str, holes: tuple[tuple[str, int, int], ...]) -> None:
        self.length = length
        self._text = text
        self._holes = holes
        # the same in UTF-8, for the hot path: bytes.replace is ~2.7x faster than
        # str.replace on these texts, and a control byte is never part of a
        # multi-byte UTF-8 sequence, so the holes stay whole
        self._bytes = text.encode()
        self._bholes = tuple((mark.encode(), a, b) for mark, a, b in holes)

    def fill(self, nonce: str, head: str, tail: str) -> str:
        """head + (tail + head).join(deltas) + tail, for this nonce."""
        text = self._text
        for mark, a, b in self._holes:
            text = text.replace(mark, nonce[a:b])
        return head + text.replace(self._SEP, tail + head) + tail

    def _filled(self, nonce: str) -> bytes:
        data = self._bytes
        for mark, a, b in self._bholes:
            data = data.replace(mark, nonce[a:b].encode())
        return data

    def fill_bytes(self, nonce: str, head: bytes, tail: bytes) -> bytes:
        """``fill``, encoded: what the hot path writes."""
        return head + self._filled(nonce).replace(b"\x00", tail + head) + tail

    def parts_bytes(self, nonce: str) -> list[bytes]:
        """The deltas for this nonce, encoded, as a list."""
        return self._filled(nonce).split(b"\x00")

    @classmethod
    def build(cls, render: Callable[[str], list[str]], length: int) -> "StreamTemplate | None":
        """The template of ``render`` (nonce -> deltas) for nonces of
        ``length``; None when the reply depends on the nonce other than by
        copying its characters (then it cannot be templated)."""
        if not 1 <= length <= len(NONCE_ALPHABET):
            return None
        x1 = NONCE_ALPHABET[:length]
        x2 = (NONCE_ALPHABET[1:] + NONCE_ALPHABET[:1])[:length]
        d1, d2 = render(x1), render(x2)
        if len(d1) != len(d2) or any(cls._CONTROL.search(d) for d in d1):
            return None  # different event counts, or raw control characters (not JSON or SSE text)
        where = {c: j for j, c in enumerate(x1)}
        holes: dict[tuple[int, int], str] = {}
        parts: list[str] = []
        for k_delta, (a, b) in enumerate(zip(d1, d2)):
            if len(a) != len(b):
                return None
            if k_delta:
                parts.append(cls._SEP)
            k, n = 0, len(a)
            while k < n:
                if a[k] == b[k]:
                    start = k
                    while k < n and a[k] == b[k]:
                        k += 1
                    parts.append(a[start:k])
                    continue
                j0 = where.get(a[k])
                if j0 is None or b[k] != x2[j0]:
                    return None
                j = j0
                while k < n and j < length and a[k] == x1[j] and b[k] == x2[j]:
                    k += 1
                    j += 1
                mark = holes.get((j0, j))
                if mark is None:
                    if len(holes) >= cls._MAX_HOLES:
                        return None
                    mark = holes[(j0, j)] = cls._MARKS[len(holes)]
                parts.append(mark)
        template = cls(length, "".join(parts), tuple((mark, a, b) for (a, b), mark in holes.items()))
        # the proof: two more nonces that mix every character class, rendered
        # for real, come out the same
        x3 = "".join(NONCE_ALPHABET[(7 * j + 29) % 64] for j in range(length))
        x4 = "".join(NONCE_ALPHABET[(13 * j + 62) % 64] for j in range(length))
        for x, d in ((x1, d1), (x2, d2), (x3, render(x3)), (x4, render(x4))):
            want = "<H>" + "<T><H>".join(d) + "<T>"
            if template.fill(x, "<H>", "<T>") != want or template.fill_bytes(x, b"<H>", b"<T>") != want.encode():
                return None
        return template


@functools.lru_cache(maxsize=64)
def _chunk_parts(created: int, model: str, include_usage: bool) -> tuple[str, str, str]:
    """What follows the id in every chunk, the usage field of a non-final
    chunk, and what follows the delta in a plain chunk: the same for every
    response of one second, model and usage setting."""
    prefix_tail = (
        f',"object":"chat.completion.chunk","created":{created},"model":{_dumps(model)},'
        f'"system_fingerprint":"{FINGERPRINT}","choices":[{{"index":0,"delta":'
    )
    usage_tail = ',"usage":null' if include_usage else ""
    return prefix_tail, usage_tail, f',"logprobs":null,"finish_reason":null}}]{usage_tail}}}\n\n'


@dataclass
class Renderer:
    """Builds the chunks of one response; id/created/model are fixed per response."""

    model: str
    include_usage: bool = False
    id: str = ""
    created: int = 0
    per_chunk_id: bool = False
    event_line: str | None = None
    # join runs of chunks into one element: the same bytes in fewer, larger
    # events, for a reply that goes out in one write anyway (not when paced)
    coalesce: bool = False

    def __post_init__(self) -> None:
        self.id = self.id or new_id()
        self.created = self.created or int(time.time())
        self._prefix_tail, self._usage_tail, self._tail = _chunk_parts(self.created, self.model, self.include_usage)
        # chunk_json's output split around the delta, for _frame
        self._head = 'data: {"id":"' + self.id + '"' + self._prefix_tail

    def _event(self, body: str) -> bytes:
        if self.event_line:
            return f"event: {self.event_line}\ndata: {body}\n\n".encode()
        return f"data: {body}\n\n".encode()

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, extra: str = "") -> bytes:
        return self.chunk_json(_dumps(delta), finish_reason, extra)

    def chunk_json(self, delta_json: str, finish_reason: str | None = None, extra: str = "") -> bytes:
        """A chunk around a delta that is already JSON text."""
        cid = new_id() if self.per_chunk_id else self.id
        finish = "null" if finish_reason is None else _FINISH.get(finish_reason) or _dumps(finish_reason)
        body = (
            f'{{"id":"{cid}"{self._prefix_tail}{delta_json},"logprobs":null,'
            f'"finish_reason":{finish}}}]{self._usage_tail}{extra}}}'
        )
        return self._event(body)

    def _frame(self, deltas: list[str]) -> list[bytes]:
        """chunk_json(d) for each delta; the common case without per-chunk work."""
        if self.per_chunk_id or self.event_line:
            return [self.chunk_json(d) for d in deltas]
        head, tail = self._head, self._tail
        if self.coalesce:
            return [(head + (tail + head).join(deltas) + tail).encode()]
        return [(head + d + tail).encode() for d in deltas]

    def raw(self, obj: dict[str, Any]) -> bytes:
        return self._event(_dumps(obj))

    def usage_chunk(self, usage: dict[str, int]) -> bytes:
        return self._event(
            f'{{"id":"{self.id}","object":"chat.completion.chunk","created":{self.created},'
            f'"model":{_dumps(self.model)},"system_fingerprint":"{FINGERPRINT}","choices":[],'
            f'"usage":{_dumps(usage)}}}'
        )

    def done(self) -> bytes:
        # a provider that names its events names the terminator too
        return self._event("[DONE]") if self.event_line else DONE

    def role(self) -> bytes:
        return self.chunk_json(_ROLE_DELTA)

    # --- whole replies ---------------------------------------------------

    @property
    def head(self) -> str:
        """What precedes a delta in a plain chunk (for StreamTemplate.fill)."""
        return self._head

    @property
    def tail(self) -> str:
        """What follows a delta in a plain non-final chunk."""
        return self._tail

    def close_events(self, body: list[bytes], finish: str, usage: dict[str, int] | None) -> list[bytes]:
        """``body`` followed by the finish chunk, the usage chunk (when asked
        for) and [DONE]: the end every complete reply shares."""
        body.append(self.chunk_json("{}", finish))
        if usage is not None and self.include_usage:
            body.append(self.usage_chunk(usage))
        body.append(self.done())
        return body

    def text_events(self, text: str, pieces: int, usage: dict[str, int] | None, done: bool = True) -> list[bytes]:
        events = self._frame(text_deltas(text, pieces))
        if done:
            return self.close_events(events, "stop", usage)
        events.append(self.chunk_json("{}", "stop"))
        if usage is not None and self.include_usage:
            events.append(self.usage_chunk(usage))
        return events

    def tool_events(self, calls: Sequence[Call], usage: dict[str, int] | None, quirk: str | None = None) -> list[bytes]:
        finish = "tool_calls"
        done = True
        if quirk is None:
            return self.close_events(self._frame(tool_deltas(calls)), finish, usage)
        else:
            events = [self.role()]
            finish, done = self._quirk(events, calls, quirk)
            if finish is None:  # the quirk ended the stream itself
                return events
        events.append(self.chunk_json("{}", finish))
        if usage is not None and self.include_usage:
            events.append(self.usage_chunk(usage))
        if done:
            events.append(self.done())
        return events

    def _quirk(self, events: list[bytes], calls: Sequence[Call], quirk: str) -> tuple[str | None, bool]:
        """Add a quirky stream's tool-call chunks to ``events`` (its role chunk
        so far); the finish reason and whether [DONE] follows, or finish None
        when the quirk ended the stream itself. per_chunk_id and event_line
        are the Renderer's own settings: their chunks are the correct ones."""
        if quirk == "azure_prefilter":
            events.insert(0, self.raw(_AZURE_PREFILTER))
        events.extend(self.chunk({"tool_calls": tool_calls}) for tool_calls in _quirk_tool_calls(calls, quirk))
        if quirk == "midstream_error":
            events.append(self.chunk({}, "error", extra=_MIDSTREAM_ERROR))
            return None, False
        if quirk == "finish_stop":
            return "stop", True
        return "tool_calls", quirk != "nodone"


# the event an Azure OpenAI deployment sends before the first chunk
_AZURE_PREFILTER = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [
        {
            "prompt_index": 0,
            "content_filter_results": {k: {"filtered": False, "severity": "safe"} for k in ("hate", "self_harm", "sexual", "violence")},
        }
    ],
}
_MIDSTREAM_ERROR = ',"error":{"message":"upstream provider error (kstress quirk midstream_error)","code":502}'
# the quirks whose tool calls are the correct fragments; what sets them apart is around them
_CORRECT_FRAGMENTS = frozenset({"finish_stop", "midstream_error", "azure_prefilter", "per_chunk_id", "event_line", "nodone"})


def _quirk_tool_calls(calls: Sequence[Call], quirk: str) -> list[list[dict[str, Any]]]:
    """The ``tool_calls`` of each chunk of a quirky stream (docs/wire.md)."""
    if quirk == "onechunk":
        return [[_whole(c) for c in calls]]
    if quirk == "noindex_whole":
        return [[{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}] for c in calls]
    if quirk == "args_object":
        out = []
        for c in calls:
            whole = _whole(c)
            whole["function"]["arguments"] = json.loads(c.arguments)
            out.append([whole])
        return out
    if quirk == "cont_first":
        out = []
        for c in calls:
            pieces = split_arguments(c.arguments)
            out.append([{"index": c.index, "function": {"arguments": pieces[0]}}])
            out.append([_header(c)])
            out += [[{"index": c.index, "function": {"arguments": p}}] for p in pieces[1:]]
        return out
    frags = fragments(calls)
    if quirk == "noindex":
        for f in frags:
            f.pop("index")
    elif quirk == "index1_first":
        for f in frags:
            f["index"] += 1
    elif quirk == "index0_all":
        for f in frags:
            f["index"] = 0
    elif quirk == "repeat_name":
        for f in frags:
            f["function"]["name"] = calls[f["index"]].name
    elif quirk == "empty_id_name":
        for f in frags:
            if "id" not in f:
                f["id"] = ""
                f["function"]["name"] = ""
    elif quirk in ("nullargs", "placeholder_args"):
        for f in frags:
            if "id" in f:
                f["function"]["arguments"] = None if quirk == "nullargs" else "{}"
    elif quirk not in _CORRECT_FRAGMENTS:  # pragma: no cover - markers.QUIRKS and this list are kept in step by a test
        raise ValueError(f"quirk {quirk!r} has no renderer")
    return [[f] for f in frags]


def _header(c: Call) -> dict[str, Any]:
    return {"index": c.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": ""}}


def _whole(c: Call) -> dict[str, Any]:
    return {"index": c.index, "id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


def fragments(calls: Iterable[Call]) -> list[dict[str, Any]]:
    """The correct fragment sequence: per call one named header fragment with
    empty arguments, then several continuation fragments carrying only index
    and a piece of the arguments."""
    out: list[dict[str, Any]] = []
    for c in calls:
        out.append(_header(c))
        out.extend({"index": c.index, "function": {"arguments": p}} for p in split_arguments(c.arguments))
    return out


def completion(
    model: str,
    content: str | None,
    calls: Sequence[Call] = (),
    usage: dict[str, int] | None = None,
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """The non-stream ``chat.completion`` object equivalent to a stream."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    return {
        "id": new_id(),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "system_fingerprint": FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish_reason or ("tool_calls" if calls else "stop"),
            }
        ],
        "usage": usage or {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def error_body(message: str, type_: str = "invalid_request_error", code: str | None = None, param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def error_event(message: str, type_: str = "server_error", code: str | None = None) -> bytes:
    return f"data: {_dumps(error_body(message, type_, code))}\n\n".encode()
