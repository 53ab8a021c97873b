"""The reference kernel's LLM retry faults (issue 24 item 4) seen through
kstress: a stress run against the real mock and refkernel, each turn's
attempts read from the mock's record (``/_mock/verdicts``: each request's arrival). The resilience grades that will name these
(``retry_after_ignored``, ``retry_storm``, ``truncated_accepted``,
``error_hidden``) are a later slice of issue 24; this is the evidence they
will read, and that each fault changes it. The mock's ``!err:429`` asks for
``retry-after: 1`` on every attempt."""

from __future__ import annotations

import aiohttp
import pytest

from harness.results.rundir import read_jsonl
from harness.scenarios import StressSettings, run_stress

pytestmark = pytest.mark.slow


async def rows(kernel_factory, out_dir, mix: str, *flags: str):
    """The run, its two turns' rows, and each turn's LLM attempts: their arrival
    times at the mock, oldest first (an error turn has no anatomy in its row)."""
    async with kernel_factory(*flags) as k:
        r = await run_stress(StressSettings(conns=2, inputs=1, mix=mix, dedup_probe=False, out=out_dir, quiet=True), k.access())
        got = [row for row in read_jsonl(r.dir / "turns.jsonl") if row["kind"] != "probe"]
        assert len(got) == 2, got
        async with aiohttp.ClientSession() as http:
            async with http.get(k.mock_url + "/_mock/verdicts", params=[("nonce", row["nonce"]) for row in got]) as resp:
                entries = (await resp.json())["verdicts"]
    return r, got, [sorted(rec["arrival"] for rec in entries[row["nonce"]]["records"]) for row in got]


def gaps(arrivals: list[float]) -> list[float]:
    return [b - a for a, b in zip(arrivals, arrivals[1:])]


async def test_retries_honour_retry_after_and_ignore_retry_after_does_not(kernel_factory, out_dir):
    _, _, good = await rows(kernel_factory, out_dir, "!err:429:1", "--llm-retries", "2", "--honour-retry-after")
    for at in good:  # three attempts, each at least the header's 1 s after the one before
        assert len(at) == 3 and all(g >= 1.0 for g in gaps(at)), gaps(at)
    _, _, bad = await rows(kernel_factory, out_dir, "!err:429:1", "--llm-retries", "2", "--honour-retry-after", "--fault", "ignore-retry-after")
    for at in bad:  # three attempts, and all three sooner than the header asked before one
        assert len(at) == 3 and at[-1] - at[0] < 1.0, gaps(at)


async def test_retry_storm_sends_more_attempts_than_declared(kernel_factory, out_dir):
    _, _, good = await rows(kernel_factory, out_dir, "!err:500:1", "--llm-retries", "1", "--llm-backoff", "none")
    assert [len(at) for at in good] == [2, 2]
    _, _, bad = await rows(kernel_factory, out_dir, "!err:500:1", "--llm-retries", "1", "--fault", "retry-storm")
    assert [len(at) for at in bad] == [5, 5]  # 1 + (2*1 + 2): more than --llm-retries 1 allows


async def test_accept_truncated_turns_a_cut_stream_into_an_answer(kernel_factory, out_dir):
    r, good, _ = await rows(kernel_factory, out_dir, "!err:disconnect:1")
    assert r.exit_code == 0 and all(row["outcome"] == "error" for row in good), good
    r, bad, _ = await rows(kernel_factory, out_dir, "!err:disconnect:1", "--fault", "accept-truncated")
    assert r.exit_code == 1 and all(row["outcome"] == "response" for row in bad), bad
    assert set(r.summary["failures"]) == {"missing_verdict"}, r.summary["failures"]


async def test_hide_llm_error_answers_instead_of_failing(kernel_factory, out_dir):
    r, good, _ = await rows(kernel_factory, out_dir, "!err:500:1")
    assert r.exit_code == 0 and all(row["outcome"] == "error" for row in good), good
    r, bad, _ = await rows(kernel_factory, out_dir, "!err:500:1", "--fault", "hide-llm-error")
    assert r.exit_code == 1 and set(r.summary["failures"]) == {"missing_verdict"}, r.summary["failures"]
    assert all(row["outcome"] == "response" for row in bad), bad
