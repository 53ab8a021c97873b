"""Scenarios: each a library function `run_X(settings, access) -> RunResult`."""

from .abtest import AbtestSettings, run_abtest
from .batch import BatchSettings, run_batch
from .cmp import CmpSettings, run_cmp
from .common import Access, RunResult, Target
from .stress import StressSettings, run_stress

__all__ = [
    "AbtestSettings",
    "Access",
    "BatchSettings",
    "CmpSettings",
    "RunResult",
    "StressSettings",
    "Target",
    "run_abtest",
    "run_batch",
    "run_cmp",
    "run_stress",
]
