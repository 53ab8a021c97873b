"""kstress mock LLM: a deterministic server speaking OpenAI chat completions,
Anthropic Messages and OpenAI Responses, whose replies are chosen by markers in
the user message and whose follow-ups carry a verdict on what the kernel did
with the tool calls (kept per nonce in a store, /_mock/verdicts, too). A program
of its own: ``python -m mock``.

Public surface::

    MockSettings, MockServer, create_app     -- run it (imports aiohttp)
    Catalog, DEFAULT_CATALOG, load_catalog   -- map roles to a kernel's tools
    Script, load_script                      -- a fixed reply list instead of markers
    markers                                  -- the grammar the harness shares (fault schedules too)
    faults                                   -- --rate-limit's parse_rate and TokenBucket, the Retry-After headers
    MockError, ConfigError, MarkerError

Importing ``mock`` or its pure grammar modules (``mock.markers``,
``mock.catalog``, ``mock.errors``, ``mock.faults``) does not import aiohttp: the server is
loaded on first use of a name that needs it.
"""

from __future__ import annotations

from typing import Any

from . import faults, markers
from .catalog import DEFAULT_CATALOG, Catalog, load_catalog
from .errors import ConfigError, MarkerError, MockError

_LAZY = {
    "MockServer": "server",
    "MockSettings": "server",
    "create_app": "server",
    "Script": "script",
    "load_script": "script",
}

__all__ = [
    "Catalog",
    "ConfigError",
    "DEFAULT_CATALOG",
    "MarkerError",
    "MockError",
    "MockServer",
    "MockSettings",
    "Script",
    "create_app",
    "faults",
    "load_catalog",
    "load_script",
    "markers",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'mock' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
