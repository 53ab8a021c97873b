"""Provider-wide rate limiting (``--rate-limit N/s``) and the headers of a
refused or faulted attempt (issue 24).

The per-nonce fault schedules (!flaky, !stall, !truncate) are grammar
(``markers.Fault``) and serving (``server._scheduled``); this module holds
what they share with the rate limit and nothing that does I/O.
"""

from __future__ import annotations

import math
import re

from .errors import ConfigError

RATE_MAX = 1_000_000.0
_RATE_RE = re.compile(r"(\d+(?:\.\d+)?)(?:/s)?")


def parse_rate(text: str) -> float:
    """``--rate-limit``'s value: requests per second, written ``N/s`` (or ``N``)."""
    m = _RATE_RE.fullmatch(text.strip()) if isinstance(text, str) else None
    rate = float(m.group(1)) if m else 0.0
    if m is None or not 0 < rate <= RATE_MAX:
        raise ConfigError(
            f"--rate-limit {text!r} is invalid: give requests per second above 0 and at most {RATE_MAX:.0f}, "
            f"written N/s, e.g. --rate-limit 50/s"
        )
    return rate


class TokenBucket:
    """``rate`` tokens a second, holding at most one second's worth (at least
    one token): a burst of ``rate`` requests passes, then one every 1/rate s.

    One bucket for every request the mock serves, whatever its dialect or
    nonce, as a provider's per-key request limit is."""

    __slots__ = ("rate", "capacity", "tokens", "t")

    def __init__(self, rate: float, now: float) -> None:
        self.rate = rate
        self.capacity = max(1.0, rate)
        self.tokens = self.capacity
        self.t = now

    def take(self, now: float) -> float | None:
        """Take a token at ``now`` (monotonic s): None when there was one,
        else the seconds until there will be."""
        # requests are stamped on arrival and may reach here out of order
        elapsed = now - self.t
        if elapsed > 0:
            self.tokens = min(self.capacity, self.tokens + elapsed * self.rate)
            self.t = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate


def retry_after_headers(seconds: float) -> dict[str, str]:
    """Both headers the openai and anthropic SDKs read (``retry-after-ms``
    first, then ``retry-after``): the standard one in whole seconds, rounded
    up as HTTP allows only integers, and the exact wait in ms. A client that
    reads either waits long enough."""
    return {"retry-after": str(math.ceil(seconds)), "retry-after-ms": str(math.ceil(seconds * 1000))}
