"""The LLM APIs the mock speaks, one module each, behind one interface.

A dialect owns exactly what differs between the APIs: reading a request into a
neutral :class:`Turn` (the latest user input, whether it carries tool results,
and the history of calls sent and results received), and encoding a neutral
:class:`Reply`, a fault or an error in that API's wire format. The plan, the
verdict check, the faults' meaning, pacing and the verdict store are shared and
live outside (``mock.markers``, ``mock.verdict``, ``mock.server``).

    chat       OpenAI chat completions   POST /v1/chat/completions   (mock/wire.py holds its encoding)
    anthropic  Anthropic Messages        POST /v1/messages
    responses  OpenAI Responses          POST /v1/responses
"""

from __future__ import annotations

from .anthropic import ANTHROPIC
from .base import BadRequest, Dialect, Reply, Turn, text_reply
from .chat import CHAT
from .responses import RESPONSES

BY_NAME: dict[str, Dialect] = {d.name: d for d in (CHAT, ANTHROPIC, RESPONSES)}

__all__ = ["ANTHROPIC", "BY_NAME", "BadRequest", "CHAT", "Dialect", "RESPONSES", "Reply", "Turn", "text_reply"]
