"""What every dialect shares: the neutral request and reply, and the interface."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from ..markers import Call, Plan, text_verdict, sign
from ..verdict import Exchange, Said, SentCall, ToolResult
from ..wire import StreamTemplate

CUT = b""  # sentinel event: cut the TCP connection here (the same object as wire.CUT)


class BadRequest(Exception):
    """A request the mock cannot read; the message names the problem and the fix."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param


@dataclass(slots=True)
class Turn:
    """One request as a dialect read it."""

    user_text: str  # the latest user input: where the markers and the nonce are
    followup: bool  # the request ends with tool results: answer with a verdict
    stream: bool
    model: str | None
    include_usage: bool  # chat's stream_options.include_usage; the others always report usage
    n_messages: int
    body: dict[str, Any]  # the parsed request, for history() and prompt_chars()
    user_at: int  # where the user input is in the dialect's message/item list


@dataclass(slots=True)
class Reply:
    """What the mock answers, before any wire encoding."""

    text: str | None = None
    calls: tuple[Call, ...] = ()
    quirk: str | None = None  # only a quirk that applies to the dialect
    finish: str = "stop"  # stop | tool_calls (chat's names; each dialect maps them)
    pieces: int = 20  # a text reply is streamed in this many pieces (--text-chunks)
    nonce: str | None = None  # the input's, for ids a dialect derives from it

    @property
    def completion_chars(self) -> int:
        return len(self.text or "") + sum(len(c.arguments) for c in self.calls)


def usage(prompt_chars: int, completion_chars: int) -> tuple[int, int]:
    """(prompt tokens, completion tokens): about 4 characters a token."""
    return math.ceil(prompt_chars / 4), math.ceil(completion_chars / 4)


def text_reply(nonce: str, history: str | None = None, key: bytes | None = None, tag: str | None = None) -> str:
    """A text answer ending with its verdict line, tagged under ``key``
    (``tag``: a given tag instead, for building the reply's template)."""
    line = text_verdict(nonce, history)
    line = f"{line} tag={tag}" if tag is not None else sign(line, key)
    return (
        f"This is the kstress mock LLM answering input {nonce}. It streams its reply in pieces "
        f"so that a kernel's delta handling is exercised.\n{line}"
    )


def message_text(content: Any) -> str:
    """Text of a message content: a string, or a list of parts/blocks with ``text``."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "".join(parts)
    return str(content)


class Dialect:
    """One LLM API. Subclasses fill in every method; instances are stateless."""

    name: str = ""
    paths: tuple[str, ...] = ()
    # What a streamed reply is sent as.
    content_type = "text/event-stream; charset=utf-8"

    # --- reading ---------------------------------------------------------------

    def read(self, body: Any) -> Turn:
        """The neutral turn of a parsed request body; raises BadRequest."""
        raise NotImplementedError

    def history(self, turn: Turn) -> tuple[list[SentCall], list[ToolResult]]:
        """The calls the kernel says it made and the results it handed back."""
        raise NotImplementedError

    def exchanges(self, turn: Turn) -> tuple[list[Exchange], bool]:
        """Every tool step after the user input, in order (a tool loop's
        history), and whether an assistant text answer follows the last one."""
        raise NotImplementedError

    def earlier(self, turn: Turn) -> list[Said]:
        """The messages before the user input (a session turn's history)."""
        raise NotImplementedError

    def prompt_chars(self, turn: Turn) -> int:
        raise NotImplementedError

    def wire_ids(self, plan: Plan) -> Mapping[str, Call] | None:
        """The ids this dialect put on the wire -> the plan's calls (None: the plan's own)."""
        return None

    def item_ids(self, plan: Plan) -> Mapping[str, str] | None:
        return None

    # --- writing ---------------------------------------------------------------

    def error(self, status: int, message: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
        """This API's error body for an HTTP error status."""
        raise NotImplementedError

    def http_fault(self, plan: Plan) -> tuple[int, dict[str, Any], dict[str, str] | None]:
        """(status, body, headers) of an ``!err:500|429|503`` fault."""
        raise NotImplementedError

    def fault_events(self, plan: Plan, turn: Turn, model: str) -> list[bytes]:
        """The stream of ``!err:midstream|disconnect|malformed`` (CUT where the connection drops)."""
        raise NotImplementedError

    def schedule_error(self, status: int, message: str) -> dict[str, Any]:
        """The body of a fault schedule's HTTP answer (429, 500, 503, 529) and
        of a rate-limit refusal, in the form this API sends it."""
        return self.error(status, message)

    def nonstream_midstream(self, plan: Plan) -> tuple[int, dict[str, Any]]:
        """What ``!err:midstream`` is without a stream: an HTTP error."""
        return 500, self.error(500, f"kstress mock: injected mid-response error (marker {plan.marker})")

    def malformed_body(self) -> bytes:
        """A 200 body cut short: not JSON."""
        raise NotImplementedError

    def stream(self, reply: Reply, turn: Turn, model: str, coalesce: bool) -> list[bytes]:
        """The events of a streamed reply. ``coalesce``: runs of events may be
        joined into one element (the same bytes, for a reply sent in one write)."""
        raise NotImplementedError

    def complete(self, reply: Reply, turn: Turn, model: str) -> dict[str, Any]:
        """The non-stream response object."""
        raise NotImplementedError

    def models(self, model: str) -> list[dict[str, Any]]:
        return []

    # --- templating (first streamed replies on the hot path) -------------------

    def template_render(self, plan: Plan, reply: Reply) -> list[str]:
        """The reply as a list of strings that depend only on the plan (the
        nonce), never on the response's id, time, model or prompt: the template
        keeps these with the nonce as holes."""
        raise NotImplementedError

    def template_fill(self, template: StreamTemplate, nonce: str, info: Mapping[str, Any], turn: Turn, model: str) -> list[bytes]:
        """The events of one response: ``template`` filled for ``nonce``
        (``template.fill`` or ``template.parts``), around the per-response
        parts, with what :meth:`template_info` said of the shape."""
        raise NotImplementedError

    def template_info(self, plan: Plan, reply: Reply) -> dict[str, Any]:
        """Numbers of a shape that do not depend on the nonce's characters."""
        return {"completion_chars": reply.completion_chars}
