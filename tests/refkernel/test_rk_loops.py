"""Multi-step tool loops on the real kernel: the model calls tools, reads the
results, calls more, and only then answers. Every request of the loop must
carry every earlier step's assistant tool-call message and results, intact
and in order (rkfake.check_loop), whatever the batch mode, terse or not, in
the shape of whichever API the kernel speaks (--llm-api)."""

from __future__ import annotations

import pytest

from refkernel.settings import BATCH_MODES
from rkfake import Script, check_loop, text

# Every mode on chat; on the other APIs (where only the rendering of the
# history differs) two of them, one terse.
CASES = [("chat", mode, terse) for mode in BATCH_MODES for terse in (False, True)]
CASES += [(api, mode, terse) for api in ("responses", "anthropic") for mode, terse in (("whole-batch", False), ("barrier", True))]


@pytest.mark.parametrize("api, mode, terse", CASES, ids=[f"{a}-{m}-{'terse' if t else 'verbose'}" for a, m, t in CASES])
async def test_loops_carry_every_earlier_step(llm, rk, api, mode, terse):
    k = await rk("--llm-api", api, "--batch", mode, *(["--terse"] if terse else []), llm_url=llm.url + "/v1")
    conn = await k.connect()
    for steps in (5, 10):
        # three calls a step, a knowledge_create in the middle of every odd
        # step: each mode schedules those steps differently
        t, _ = text(loop=steps, calls=3, writer=True)
        turn = await conn.turn(t)
        assert turn.kind == "response", turn.frames[-1]
        assert turn.text == ("done" if terse else Script.parse(t).answer)
        check_loop(llm, t)
        script = Script.parse(t)
        want = sorted(c["id"] for s in range(steps) for c in script.calls_of(s))
        for phase in ("start", "end"):  # the client sees the model's ids too, every call ending ok
            assert sorted(f["call_id"] for f in turn.tools if f["phase"] == phase) == want
        assert all(f["ok"] for f in turn.tools if f["phase"] == "end"), turn.tools


@pytest.mark.parametrize("api", ["chat", "responses", "anthropic"])
async def test_the_default_step_limit_fits_long_loops(llm, rk, api):
    k = await rk("--llm-api", api, llm_url=llm.url + "/v1")
    conn = await k.connect()
    fits, _ = text(loop=31, calls=1)  # 31 tool steps and the answer: 32 requests, the default --max-steps
    assert (await conn.turn(fits)).kind == "response"
    check_loop(llm, fits)
    over, n = text(loop=32, calls=1)
    turn = await conn.turn(over)
    assert turn.error_code == "max_steps" and "--max-steps" in turn.terminal["message"], turn.frames[-1]
    assert len(llm.requests_for(n)) == 32
