"""The conversation as the kernel keeps it, in no API's shape.

The turn loop, the session history and the faults that rewrite what goes back
to the LLM work on these; a dialect (``refkernel/dialects``) renders them into
its own request and parses its own replies back into a :class:`Reply`.

    User(text)                          the user's input
    Assistant(text, calls, text_id)     one model reply: its text, its tool calls in declared order
    Result(call, ok, content)           one tool's result (tools.py makes them)

A history is a flat list of them: user, assistant with calls, that step's
results, ..., the final assistant text. Whatever a dialect must repeat exactly
on the next request travels on the objects: the call ids the model chose, and
the Responses API's item ids (``ToolCall.item_id``, ``Assistant.text_id``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Union


@dataclass
class ToolCall:
    index: int
    id: str = ""
    name: str = ""
    arguments: str = ""  # a JSON text, as the model sent it (chat and Responses stream it as a string)
    item_id: str = ""  # Responses: the function_call item's own id (fc_...), repeated with the call


@dataclass
class Reply:
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    finish_reason: str | None = None
    text_id: str = ""  # Responses: the id of the message item that carried the text


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of an object


@dataclass(frozen=True)
class User:
    text: str


@dataclass(frozen=True)
class Assistant:
    text: str
    calls: tuple[ToolCall, ...] = ()
    text_id: str = ""


@dataclass(frozen=True)
class Result:
    call: ToolCall
    ok: bool
    content: str


Entry = Union[User, Assistant, Result]
