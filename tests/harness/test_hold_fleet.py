"""hold's limits with a fleet (issue 25): the descriptor bound is a
process's, so --fleet bounds each worker's share, not the total; a worker
waiting on the head's signal gives up by name."""

from __future__ import annotations

import asyncio
import resource

import pytest

from harness.errors import InfraError, UsageError
from harness.scenarios.hold import FD_RESERVE, HoldSettings, _signalled

SOFT = resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def test_the_descriptor_limit_bounds_each_workers_share_not_the_total():
    over = SOFT - FD_RESERVE + 1
    with pytest.raises(UsageError, match=f"RLIMIT_NOFILE is {SOFT}.*--fleet local:2"):
        HoldSettings(conns=over)
    assert HoldSettings(conns=over, fleet="local:2").conns == over
    with pytest.raises(UsageError, match=f"over 2 fleet workers is up to {SOFT - FD_RESERVE + 1} a worker"):
        HoldSettings(conns=2 * (SOFT - FD_RESERVE) + 1, fleet="local:2")
    with pytest.raises(UsageError, match="--fleet-workers 2 without --fleet"):
        HoldSettings(conns=10, fleet_workers=2)


class _Sink:
    def signal(self, name: str) -> asyncio.Event:
        return asyncio.Event()  # the head never signals


def test_a_worker_the_head_never_signals_names_the_wait():
    with pytest.raises(InfraError, match="worker 2 waited 0 s for the head's 'probe' signal \\(every worker's connections open\\)"):
        asyncio.run(_signalled(_Sink(), "probe", 0.01, 2, "every worker's connections open"))
