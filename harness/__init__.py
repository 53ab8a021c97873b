"""kstress harness: sandbox, launcher, client, scenarios, verdicts, statistics, reports."""

__version__ = "0.1.0"

from .errors import ChecksFailed, KstressError, TargetError, UsageError

__all__ = ["ChecksFailed", "KstressError", "TargetError", "UsageError", "__version__"]
