"""The LLM APIs the kernel speaks (``--llm-api``), one module each behind one
interface (``base.Dialect``): the endpoint and headers, the request built from
the neutral conversation, the reply parsed back into it.

    chat       OpenAI chat completions   POST {--llm-url}/chat/completions
    responses  OpenAI Responses          POST {--llm-url}/responses
    anthropic  Anthropic Messages        POST {--llm-url}/messages
"""

from __future__ import annotations

from .anthropic import ANTHROPIC
from .base import Dialect, StreamParser
from .chat import CHAT
from .responses import RESPONSES

BY_NAME: dict[str, Dialect] = {d.name: d for d in (CHAT, RESPONSES, ANTHROPIC)}

__all__ = ["ANTHROPIC", "BY_NAME", "CHAT", "Dialect", "RESPONSES", "StreamParser"]
