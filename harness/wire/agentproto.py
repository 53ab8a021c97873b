"""The seam between kstress and an agent served over a standard protocol
(AG-UI, A2A, OpenAI-compatible; issue 23): what a protocol driver must do.

Protocol v1 (harness/wire/protocol.py) multiplexes turns over one long-lived
connection of frames. The agent protocols are HTTP: a turn is one request
whose answer is a JSON body or an SSE stream. A driver owns exactly the
protocol's shapes -- how one input becomes a request, how the response's
events become the turn's deltas, tool events, answer or error, how a turn is
cancelled, and how an agent is found ready -- and nothing of connections,
timeouts or verdicts: ``HttpAgentClient`` (harness/wire/agents.py) gives
every driver one keep-alive HTTP connection per kstress connection, the turn
deadline, the byte bounds of a flood, and the same ``Turn`` record protocol
v1 fills, so every scenario and the judge see no difference.

A driver reports what it reads through a ``TurnSink``; it never touches the
Turn's outcome itself. Every name a driver gives a failure (``error(code,
...)``) is the `error_frame:<code>` users see: keep them short and stable
(`run_error`, `stream_cut`, `task_failed`, `jsonrpc_error`, `http_404` ...),
and document them in docs/protocol.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol as Interface

if TYPE_CHECKING:  # aiohttp is loaded by the client, not at import (kcli, --help)
    import aiohttp

    from .client import Turn


class TurnSink(Interface):
    """Where a driver puts what one turn's response said, in arrival order."""

    def frame(self, event: dict[str, Any], size: int) -> None:
        """One event as read (an SSE event's data, a JSON-RPC result, a
        response body), kept for the record and counted against the turn's
        byte bound; ``size`` is its bytes on the wire."""

    def delta(self, text: str) -> None:
        """A piece of the answer's text, streamed."""

    def tool(self, call_id: str, name: str | None, phase: str, *, ok: bool | None = None, arguments: str | None = None, content: str | None = None) -> None:
        """A tool call the protocol shows: phase `start`, `args`, `end` or
        `result` (AG-UI's TOOL_CALL_*; a Responses function_call item).
        ``content``: a result's text, where the protocol shows it (AG-UI): a
        session's history carries it back (``history`` entries' ``steps``)."""

    def done(self, text: str | None) -> None:
        """The turn's answer is complete. ``text``: the whole answer when the
        protocol gives it whole at the end (None: the deltas are the answer;
        A2A's final full copy on top of the appended chunks is not passed twice)."""

    def error(self, code: str, message: str) -> None:
        """The turn failed by the protocol's own account: RUN_ERROR, a task
        `failed`/`rejected`/`canceled`/`input-required`, a JSON-RPC error, an
        HTTP status, a stream cut before its end."""


class AgentDriver:
    """One agent protocol. Made once per target from its URL (``--url``, or a
    target file's ``url``); ``prepare`` runs once before the run, ``run_turn``
    and ``cancel`` once per turn, concurrently across connections (a driver
    keeps no per-turn state on itself)."""

    name = ""  # the --protocol name: agui | a2a | openai-chat | openai-responses
    # the protocol shows every tool call (AG-UI): the judge holds each turn's
    # shown calls to the mock's (tool_call_missing ...) even when none was shown;
    # False: tool calls are checked only where the server happened to show some
    shows_tools = False

    def __init__(self, url: str) -> None:
        self.url = url

    async def prepare(self, http: "aiohttp.ClientSession", timeout_s: float) -> None:
        """Before the first turn: find the agent ready (its URL answers; A2A:
        read the agent card, take the RPC URL and protocol version from it).
        Raise harness.errors.UsageError naming the URL, what came back and the
        fix when it is not an agent of this protocol (404, HTML, plain JSON
        where SSE was due, a card without an RPC URL)."""

    async def run_turn(self, http: "aiohttp.ClientSession", turn: "Turn", sink: TurnSink, *, session: str | None, history: list[tuple[str, str]] | None) -> None:
        """Send ``turn.text`` (its nonce is in it) and read the response to its
        end, calling ``sink`` for each thing read, ending with ``sink.done`` or
        ``sink.error``. ``session``: the conversation this turn continues (AG-UI
        threadId, A2A contextId); ``history``: that session's earlier (input,
        answer) pairs, for a protocol whose client carries the history (AG-UI,
        OpenAI chat). Each entry is a tuple ``(input, answer)`` with a ``steps``
        attribute: the tool steps that turn showed, each a list of
        ``{"id", "name", "args", "content"}`` in declared order (empty where the
        protocol shows none), for a protocol whose history carries the
        exchange (AG-UI). The client enforces the deadline by cancelling this."""
        raise NotImplementedError

    async def cancel(self, http: "aiohttp.ClientSession", turn: "Turn") -> str | None:
        """Cancel a turn in flight (an interrupt): AG-UI closes the stream,
        A2A sends tasks/cancel. The default closes the stream alone.
        Returns what the agent answered to a cancel request, for the record
        (A2A: the task's state after it -- fasta2a says ``completed`` -- or
        ``jsonrpc_<code>``), or None when the protocol has no answer."""
