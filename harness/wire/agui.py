"""AG-UI over HTTP + SSE (``--protocol agui``; docs/protocol.md, "AG-UI").

One turn is one POST of a RunAgentInput to the agent's URL; the answer is an
SSE stream of events, one JSON object each. What is read:

    RUN_STARTED                         the run began (no check: some servers omit it)
    TEXT_MESSAGE_CONTENT / _CHUNK       a delta of the answer (every text message of the run)
    TOOL_CALL_START/ARGS/END/RESULT     a tool call shown (``turn.tools_shown``; the judge
                                        holds them to the calls the mock asked for)
    RUN_FINISHED                        the turn's end
    RUN_ERROR                           error ``run_error`` (its message kept)

A stream that ends without RUN_FINISHED or RUN_ERROR is ``stream_cut``; an
HTTP status other than 200 is ``http_<status>``; a 200 that is not
``text/event-stream`` is ``not_sse``. The client carries the history: a
session's earlier (input, answer) pairs go as user and assistant messages
before this turn's, on the session's own threadId (a server that keeps its
own history by threadId reconciles them; a stateless one needs them). Each
turn gets a fresh runId; a turn without a session a fresh threadId too.
Closing the stream is AG-UI's only cancel.

When a run sends a MESSAGES_SNAPSHOT (the server's own account of the
thread, which an AG-UI client adopts in place of its messages), the session's
next turn sends that snapshot and its new message, under the server's ids; a
session's history is otherwise rebuilt from its (input, answer, tool
exchange) records under ids of kstress's own. A server that keeps its own
history merges the client's messages into it by id (ag-ui-langgraph's
checkpointer, langgraph_default_merge_state): ids of kstress's making read as
new messages there, and every earlier turn reached the LLM twice
(``history extra:t1``). Only a session's turns keep a snapshot.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import orjson

from .agentproto import AgentDriver, TurnSink
from .agents import drain, json_event, probe_endpoint, read_head, sse_batches

if TYPE_CHECKING:
    import aiohttp

    from .client import Turn

HEADERS = {"Accept": "text/event-stream", "Content-Type": "application/json"}
TEXT = frozenset({"TEXT_MESSAGE_CONTENT", "TEXT_MESSAGE_CHUNK"})
TOOL_PHASES = {"TOOL_CALL_START": "start", "TOOL_CALL_ARGS": "args", "TOOL_CALL_END": "end", "TOOL_CALL_RESULT": "result"}


def run_input(turn: "Turn", session: str | None, history: list[tuple[str, str]] | None,
              kept: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The RunAgentInput of one turn: every optional field present and empty,
    since some servers' models require them. ``kept``: the session's messages
    in the last MESSAGES_SNAPSHOT the server sent; without them the history
    is rebuilt from ``history`` under ids of kstress's own."""
    messages: list[dict[str, Any]] = list(kept) if kept is not None else []
    for i, entry in enumerate((history or ()) if kept is None else ()):
        said, answer = entry
        messages.append({"id": f"u{i}-{session}", "role": "user", "content": said})
        # the turn's tool exchange, whole: a stateless server sends it back to
        # its LLM, which (the mock) checks every earlier turn's exchange
        for k, step in enumerate(getattr(entry, "steps", ()) or ()):
            messages.append({"id": f"a{i}s{k}-{session}", "role": "assistant", "content": "",
                             "toolCalls": [{"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["args"]}} for c in step]})
            messages += [{"id": f"t{i}s{k}c{j}-{session}", "role": "tool", "toolCallId": c["id"], "content": c["content"]} for j, c in enumerate(step)]
        messages.append({"id": f"a{i}-{session}", "role": "assistant", "content": answer})
    messages.append({"id": f"u-{turn.nonce}", "role": "user", "content": turn.text})
    return {
        "threadId": session if session is not None else f"t-{turn.nonce}",
        "runId": f"r-{turn.nonce}-{uuid.uuid4().hex[:8]}",
        "messages": messages,
        "state": {},
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


class AguiDriver(AgentDriver):
    name = "agui"
    shows_tools = True

    def __init__(self, url: str) -> None:
        super().__init__(url)
        # session -> (turns it holds, the messages of the last MESSAGES_SNAPSHOT):
        # the one state this driver keeps, shared by a target's connections
        # like the histories it stands for
        self.threads: dict[str, tuple[int, list[dict[str, Any]]]] = {}

    async def prepare(self, http: "aiohttp.ClientSession", timeout_s: float) -> None:
        # `{}` is not a RunAgentInput: a server validates it (422/400) without a run
        await probe_endpoint(http, self.url, "AG-UI", timeout_s, {}, "http://127.0.0.1:8000/agui (the route of AGUIAdapter / add_*_fastapi_endpoint)")

    async def run_turn(self, http: "aiohttp.ClientSession", turn: "Turn", sink: TurnSink, *, session: str | None, history: list[tuple[str, str]] | None) -> None:
        kept = self.threads.get(session) if session is not None else None
        # the kept messages stand for the history only while they hold the
        # same turns (a failed turn enters neither)
        body = orjson.dumps(run_input(turn, session, history, kept[1] if kept is not None and kept[0] == len(history or ()) else None))
        snapshot = None
        async with http.post(self.url, data=body, headers=HEADERS) as resp:
            if resp.status != 200:
                sink.error(f"http_{resp.status}", f"{self.url} answered HTTP {resp.status} {resp.reason or ''}: {await read_head(resp)}".rstrip(": "))
                return
            ctype = resp.headers.get("Content-Type", "")
            if not ctype.startswith("text/event-stream"):
                sink.error("not_sse", f"{self.url} answered {ctype or 'no Content-Type'} where an AG-UI SSE stream (text/event-stream) was due: {await read_head(resp)}")
                return
            last = None
            n = 0
            async for batch in sse_batches(resp):
                for _name, data, size in batch:
                    ev = json_event(data, "an AG-UI event")
                    sink.frame(ev, size)
                    n += 1
                    kind = ev.get("type")
                    last = kind
                    if kind in TEXT:
                        delta = ev.get("delta")
                        if isinstance(delta, str):
                            sink.delta(delta)
                    elif kind in TOOL_PHASES:
                        call_id = str(ev.get("toolCallId", ""))
                        phase = TOOL_PHASES[kind]
                        sink.tool(call_id, ev.get("toolCallName"), phase, arguments=ev.get("delta") if phase == "args" else None,
                                  content=ev.get("content") if phase == "result" and isinstance(ev.get("content"), str) else None)
                    elif kind == "TOOL_CALL_CHUNK":  # the convenience form: start and args in one
                        call_id = str(ev.get("toolCallId", ""))
                        if ev.get("toolCallName"):
                            sink.tool(call_id, ev.get("toolCallName"), "start")
                        sink.tool(call_id, None, "args", arguments=ev.get("delta") or "")
                    elif kind == "MESSAGES_SNAPSHOT" and session is not None and isinstance(ev.get("messages"), list):
                        snapshot = [m for m in ev["messages"] if isinstance(m, dict)]
                    elif kind == "RUN_FINISHED":
                        outcome = ev.get("outcome")
                        if isinstance(outcome, dict) and outcome.get("type") not in (None, "success"):
                            sink.error("run_interrupted", f"RUN_FINISHED with outcome {outcome.get('type')!r}: the run stopped for the client (a frontend tool or an approval), not with an answer")
                        else:
                            sink.done(None)
                            if snapshot is not None and session is not None:
                                self.threads[session] = (len(history or ()) + 1, snapshot)
                        await drain(resp)
                        return
                    elif kind == "RUN_ERROR":
                        sink.error("run_error", str(ev.get("message") or ev.get("code") or "RUN_ERROR with no message"))
                        await drain(resp)
                        return
            sink.error("stream_cut", f"the AG-UI stream ended after {n} events without RUN_FINISHED or RUN_ERROR" + (f" (the last was {last})" if last else ""))
