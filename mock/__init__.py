"""kstress mock LLM: a deterministic OpenAI-compatible server whose replies are
chosen by markers in the user message and whose follow-ups carry a verdict on
what the kernel did with the tool calls.

Public surface::

    MockSettings, MockServer, create_app     -- run it
    Catalog, DEFAULT_CATALOG, load_catalog   -- map roles to a kernel's tools
    Script, load_script                      -- a fixed reply list instead of markers
    markers                                  -- the grammar the harness shares
    MockError, ConfigError, MarkerError
"""

from . import markers
from .catalog import DEFAULT_CATALOG, Catalog, load_catalog
from .errors import ConfigError, MarkerError, MockError
from .script import Script, load_script
from .server import MockServer, MockSettings, create_app

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
    "load_catalog",
    "load_script",
    "markers",
]
