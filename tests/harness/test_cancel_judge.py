"""The cancel verdict's rules (harness/judge/cancel.py), on the mock's record
of a turn: each way an agent can ignore a cancel, and each way of honouring it."""

from __future__ import annotations

import pytest

from harness.judge.cancel import CANCEL_BOUND_S, cancel_failures, cancel_window_s
from mock.markers import build_plan

T = 100.0  # the cancel went out at T (monotonic seconds, the mock's clock too)


def rec(arrival, last=None, status=200):
    return {"arrival": arrival, "first_byte": last, "last_byte": last, "status": status}


@pytest.mark.parametrize("records, said", [
    # honoured: the first request was served before the cancel, nothing after
    ([rec(T - 0.5, T - 0.49)], None),
    # honoured: the request in flight was aborted (the mock's 499)
    ([rec(T - 0.2, None, 499)], None),
    # tolerated: a request already on its way, arriving within the bound
    ([rec(T - 0.5, T - 0.49), rec(T + CANCEL_BOUND_S / 2, T + CANCEL_BOUND_S / 2)], None),
    # ran on: the tools' results came back and the LLM was asked again
    ([rec(T - 0.5, T - 0.49), rec(T + 2.0, T + 2.0)], "cancel_ignored (LLM request 2 of the turn arrived 2000 ms after the cancel"),
    # kept reading: the request in flight was served to its end past the bound
    ([rec(T - 0.2, T + 3.0)], "cancel_ignored (the LLM request in flight at the cancel was served to its end 3000 ms after it"),
    # still open when the window closed
    ([rec(T - 0.2, None, 0)], "cancel_ignored (the LLM request in flight at the cancel was still open 4000 ms after it)"),
])
def test_what_the_mock_saw_decides_the_cancel(records, said):
    got = cancel_failures(T, {"nonce": "n", "records": records}, CANCEL_BOUND_S, T + 4.0)
    if said is None:
        assert got == []
    else:
        assert len(got) == 1 and got[0].startswith(said), got


def test_no_record_is_unverified_not_passed():
    assert cancel_failures(T, None, CANCEL_BOUND_S, T + 4)[0].startswith("cancel_unverified (the mock's record")
    assert cancel_failures(T, {"nonce": "n", "absent": True}, CANCEL_BOUND_S, T + 4)[0].startswith("cancel_unverified (the mock never saw")


def test_the_window_outlasts_the_turns_tools_run_one_after_another():
    plan = build_plan("!slowbatch2:2000:0 #n")
    assert cancel_window_s(plan) >= CANCEL_BOUND_S + 4.0
