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


class _Fleet:
    def __init__(self, n: int) -> None:
        self.workers = [object()] * n
        self.signals: list[str] = []

    def signal(self, name: str) -> None:
        self.signals.append(name)


class _Worker:
    def __init__(self, index: int) -> None:
        self.index = index


class _Target:
    """A kernel the head cannot reach: its count is None, the run goes on."""

    def client(self, **_kw):
        from harness.wire.client import KernelClient
        from harness.wire.transport import Address

        return KernelClient(Address("unix", path="/nonexistent/kst-hold.sock"), None)


def test_the_head_signals_probe_once_every_worker_opened_and_release_once_every_worker_probed():
    from harness.scenarios.hold import _Head

    async def go():
        head, fleet = _Head(HoldSettings(conns=30, probe=3, connect_timeout_s=1.0), [_Target(), _Target()]), _Fleet(3)
        part = {"connected": 10, "failures": {}, "open_s": 0.1, "rss_before": 1, "rss_held": 2, "kernels": [5, 5]}
        for w in (2, 0):
            await head.on_note(fleet, _Worker(w), {"phase": "opened", "part": part})
        assert fleet.signals == []
        assert "worker(s) 1 never said their connections were open: waited" in str(head.named(InfraError("waited")))
        await head.on_note(fleet, _Worker(1), {"phase": "opened", "part": part})
        assert fleet.signals == ["probe"] and head.counts == [None, None]
        for w in range(3):
            await head.on_note(fleet, _Worker(w), {"phase": "probed", "held_at_probe": 10})
        assert fleet.signals == ["probe", "release"] and head.probed == {0: 10, 1: 10, 2: 10}
        assert head.named(InfraError("x")).args == ("x",)

    asyncio.run(go())
