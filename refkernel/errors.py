"""The reference kernel's exceptions and the exit code each maps to.

    RefkernelError                 1  the kernel failed while running
     +-- ConfigError               2  a bad flag or setting; the message names the value and the fix
     |    +-- SocketInUse          2  another live kernel already listens on --socket
     +-- LLMError                  -  one LLM request failed (the turn ends with an `error` frame)
     |    +-- LLMTimeout           -  no first byte, or an idle gap, longer than --llm-timeout
     +-- TurnError                 -  a turn could not finish (e.g. too many steps)
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class RefkernelError(Exception):
    exit_code = EXIT_FAILED


class ConfigError(RefkernelError, ValueError):
    exit_code = EXIT_USAGE


class SocketInUse(ConfigError):
    """A live kernel answers on the socket path: refuse rather than steal it."""


class TurnError(RefkernelError):
    """A turn ends with an `error` frame carrying ``code``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class LLMError(TurnError):
    """``retryable``: a transient failure (--llm-retries may try again);
    ``retry_after``: the seconds the LLM's Retry-After asked for, if any."""

    def __init__(self, message: str, code: str = "llm_error", retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(code, message)
        self.retryable = retryable
        self.retry_after = retry_after


class LLMTimeout(LLMError):
    def __init__(self, message: str) -> None:
        super().__init__(message, code="llm_timeout", retryable=True)
