"""The kernel socket protocol adapter (docs/protocol.md, design.md section 2).

An adapter owns exactly: framing, the handshake, encoding an input, and
classifying each received frame. The default speaks protocol v1
(newline-delimited JSON). A kernel that frames differently gets its own
subclass, selected with ``--protocol module:Class``.

Framing has two halves, one per kind of transport: on a byte stream (unix,
tcp) ``encode`` and ``read_frame``; on a message transport (a WebSocket, where
each message is one frame) ``encode_message`` and ``decode_message``. The rest
-- handshake, inputs, classification -- is the same on every transport, so an
adapter that only changes those works over all three unchanged.
"""

from __future__ import annotations

import asyncio
import enum
import importlib
import json
import re
from typing import Any, Awaitable, Callable

import orjson

from ..errors import UsageError

MAX_FRAME = 1 << 20
_std_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class FrameKind(enum.Enum):
    DELTA = "delta"
    TOOL = "tool"
    TERMINAL = "terminal"
    ERROR = "error"
    NOTIFY = "notify"
    STATS = "stats"
    AUTH = "auth"
    OTHER = "other"


_LONG_DIGITS = re.compile(rb"\d{19}").search


def parse_line(line: bytes) -> dict[str, Any]:
    """One protocol v1 line as a dict (KernelClient's and read_frame's), with
    orjson first: json.loads was ~6% of the driver's load phase through an
    instant kernel (issue 25, py-spy). What orjson refuses (NaN, a lone surrogate, not
    UTF-8) the stdlib parses as before, or refuses with the same error; so
    does a line with a run of 19 digits or more, where orjson would read an
    int past 64 bits as a float."""
    frame = None
    if not _LONG_DIGITS(line):
        try:
            frame = orjson.loads(line)
        except orjson.JSONDecodeError:
            pass
    if frame is None:  # (a line that is JSON null is parsed twice, and refused as before)
        try:
            frame = json.loads(line)
        except ValueError:
            raise ProtocolError(f"kernel sent a line that is not JSON: {line[:120]!r}") from None
    if not isinstance(frame, dict):
        raise ProtocolError(f"kernel sent a JSON value that is not an object: {line[:120]!r}")
    return frame


class ProtocolError(Exception):
    """The kernel sent something the adapter cannot make sense of."""


class HandshakeError(ProtocolError):
    """The kernel refused the handshake (wrong token, error frame, closed)."""


Send = Callable[[dict[str, Any]], Awaitable[None]]
Recv = Callable[[], Awaitable[dict[str, Any]]]


class Protocol:
    """Kernel socket protocol v1."""

    name = "kstress-v1"
    max_frame = MAX_FRAME

    # --- framing -------------------------------------------------------------

    def encode(self, frame: dict[str, Any]) -> bytes:
        try:
            return orjson.dumps(frame) + b"\n"  # every input goes through here
        except TypeError:  # what orjson refuses (a lone surrogate), the stdlib writes
            return _std_encode(frame).encode() + b"\n"

    async def read_frame(self, reader: asyncio.StreamReader) -> dict[str, Any] | None:
        """One frame, or None at EOF. Raises ProtocolError on a frame that is
        not a JSON object or exceeds max_frame."""
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial.strip():
                return None
            line = exc.partial
        except asyncio.LimitOverrunError:
            raise ProtocolError(f"kernel sent a frame over {self.max_frame} bytes without a newline") from None
        return parse_line(line)

    # --- framing on a message transport (WebSocket) ---------------------------
    # The message is the frame: no newline, no length prefix. These do not
    # call encode/read_frame, so an adapter that re-frames a byte stream does
    # not garble its WebSocket messages; one whose kernel puts something other
    # than a JSON object in a message overrides these two.

    def encode_message(self, frame: dict[str, Any]) -> str | bytes:
        """One frame as one WebSocket message: str for a text message (v1:
        the JSON object), bytes for a binary one."""
        try:
            return orjson.dumps(frame).decode()
        except TypeError:  # what orjson refuses (a lone surrogate), the stdlib writes, escaped: a text message is UTF-8
            return json.dumps(frame, separators=(",", ":"))

    def decode_message(self, data: str | bytes) -> dict[str, Any]:
        """One received message as a frame: ``data`` is str for a text
        message, bytes for a binary one (v1 refuses those). Raises
        ProtocolError as read_frame does."""
        if isinstance(data, bytes):
            raise ProtocolError(f"kernel sent a binary WebSocket message ({len(data)} bytes); protocol v1 frames are text messages")
        try:
            frame = json.loads(data)
        except ValueError:
            raise ProtocolError(f"kernel sent a message that is not JSON: {data[:120]!r}") from None
        if not isinstance(frame, dict):
            raise ProtocolError(f"kernel sent a JSON value that is not an object: {data[:120]!r}")
        return frame

    # --- handshake -----------------------------------------------------------

    async def handshake(self, send: Send, recv: Recv, token: str | None) -> None:
        """Send auth and consume the auth ack: it is a `response` frame too, and
        must never be taken for the answer to the first input."""
        if token is None:
            return
        await send({"type": "auth", "token": token})
        frame = await recv()
        kind, _ = self.classify(frame)
        if kind is FrameKind.AUTH and frame.get("ok", True):
            return
        if kind is FrameKind.ERROR:
            raise HandshakeError(f"kernel refused auth: {frame.get('code')}: {frame.get('message')}")
        raise HandshakeError(f"kernel answered auth with {json.dumps(frame)[:200]}")

    # --- inputs --------------------------------------------------------------

    def input_frame(self, input_id: str, text: str, interrupt: bool = False, session: str | None = None) -> dict[str, Any]:
        """One input; ``session`` continues that conversation (docs/protocol.md,
        *Sessions*). An adapter without sessions may leave the argument out:
        it is passed only for a session's turns."""
        frame: dict[str, Any] = {"type": "input", "id": input_id, "text": text}
        if interrupt:
            frame["priority"] = "interrupt"
        if session is not None:
            frame["session"] = session
        return frame

    def stats_frame(self) -> dict[str, Any] | None:
        return {"type": "stats"}

    # --- classification ------------------------------------------------------

    def classify(self, frame: dict[str, Any]) -> tuple[FrameKind, str | None]:
        """(kind, input id or None)."""
        t = frame.get("type")
        fid = frame.get("id")
        fid = str(fid) if fid is not None else None
        if t == "response":
            if frame.get("kind") == "auth":
                return FrameKind.AUTH, None
            return FrameKind.TERMINAL, fid
        if t == "delta":
            return FrameKind.DELTA, fid
        if t == "tool":
            return FrameKind.TOOL, fid
        if t == "error":
            return FrameKind.ERROR, fid
        if t == "notify":
            return FrameKind.NOTIFY, None
        if t == "stats":
            return FrameKind.STATS, None
        return FrameKind.OTHER, fid

    def text_of(self, frame: dict[str, Any]) -> str:
        text = frame.get("text")
        return text if isinstance(text, str) else ""


# the agent protocols' names (harness/wire/agents.py: PROTOCOLS holds their drivers)
AGENT_NAMES = ("agui", "a2a", "openai-chat", "openai-responses")


def load_protocol(spec: str | None) -> Protocol:
    """``module:Class`` -> an instance; None -> the default."""
    if not spec or spec == "kstress-v1":
        return Protocol()
    if spec in AGENT_NAMES:
        # an agent protocol has no frame adapter: its driver (harness/wire/agents.py)
        # speaks it, and this one is never used to frame anything
        return Protocol()
    module_name, _, cls_name = spec.partition(":")
    if not module_name or not cls_name:
        raise UsageError(f"--protocol {spec!r} is unknown: use one of kstress-v1 (the default), {', '.join(AGENT_NAMES)}, "
                         "or module:Class for an adapter of your own (e.g. mykernel.kstress:Protocol)")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--protocol {spec!r}: cannot import {module_name!r} ({exc}); is it on PYTHONPATH?") from None
    cls = getattr(module, cls_name, None)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, Protocol)):
        raise UsageError(f"--protocol {spec!r}: {cls_name!r} is not a subclass of harness.wire.protocol.Protocol")
    return cls()
