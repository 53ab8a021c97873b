"""The resource sampler stops when the run ends, even when a kernel-stats
answer lands in the same loop step as the stop (issue 22, item 7: on Python
3.11 ``asyncio.wait_for`` returned that answer and swallowed the cancel, so
the sampler kept sampling and a finished run sat until SIGINT)."""

from __future__ import annotations

import asyncio
import os

from harness.load.sampler import Sampler


async def _sampler_asking(answer: asyncio.Future) -> Sampler:
    """A sampler of this process every 10 ms, whose stats request waits on ``answer``."""
    asked = asyncio.Event()

    async def stats() -> dict:
        asked.set()
        return await answer

    sampler = await Sampler(os.getpid(), None, interval_s=0.01, stats=stats).start()
    await asyncio.wait_for(asked.wait(), 5)
    return sampler


async def test_a_stop_in_the_step_a_stats_answer_lands_ends_the_sampler():
    answer = asyncio.get_running_loop().create_future()
    sampler = await _sampler_asking(answer)
    loop_task = sampler._task
    answer.set_result({"peak_queued": 3})  # the answer lands ...
    stopping = asyncio.create_task(sampler.stop())  # ... and the run's end asks the sampler to stop
    done, _ = await asyncio.wait({stopping}, timeout=5)
    if not done:  # leave nothing running behind a failed test
        stopping.cancel()
        loop_task.cancel()
    assert done, "the sampler did not stop within 5 s: its cancel was swallowed"
    assert loop_task.done(), "stop() returned while the sampling loop still runs"


async def test_a_stop_while_stats_are_awaited_ends_the_sampler():
    answer = asyncio.get_running_loop().create_future()
    sampler = await _sampler_asking(answer)
    loop_task = sampler._task
    summary = await asyncio.wait_for(sampler.stop(), 5)
    assert loop_task.done() and answer.cancelled()  # the pending stats request is abandoned, not left behind
    assert summary.stats_errors == 0  # a stop is not a failed stats sample
