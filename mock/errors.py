"""The mock's exceptions.

    MockError
     +-- ConfigError   bad settings, catalog or script file (a CLI maps it to exit code 2)
     +-- MarkerError   a user message whose markers the mock cannot honour (HTTP 400)
"""


class MockError(Exception):
    """Root of every error the mock raises on purpose."""


class ConfigError(MockError, ValueError):
    """A setting, catalog or script file is invalid; the message names the value and the fix."""


class MarkerError(MockError, ValueError):
    """A marker in the latest user message is unknown or out of range."""
