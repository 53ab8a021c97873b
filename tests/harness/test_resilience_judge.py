"""harness/judge/resilience.py's rules on attempt records as the mock writes
them (docs/mock.md, `records`): each outcome named where its rule is broken,
and not where it is kept. The e2e tests (tests/e2e/test_resilience.py) drive
the same rules with the real mock and reference kernel."""

from __future__ import annotations

from harness.judge.contract import Contract
from harness.judge.resilience import expected, grade, stall_ms, timeline

SDK = Contract(retries=2, retry_after=True, backoff="exponential", llm_timeout=2.0)


def rec(t, fault=None, status=200, ra=None, followup=False, dur=0.001):
    return {"arrival": t, "first_byte": t + dur / 2, "last_byte": t + dur, "status": status, "fault": fault, "retry_after": ra, "followup": followup}


def entry(kind, fault, count, *records, stall=0):
    return {"schedule": {"kind": kind, "fault": fault, "count": count, "retry_after": None, "stall_ms": stall}, "records": list(records)}


def names(g):
    return set(g["outcomes"])


def test_a_429_retried_after_its_retry_after_recovers_and_one_retried_sooner_ignored_it():
    ok = entry("flaky", "429", 2, rec(0, "429", 429, 1), rec(1.01, "429", 429, 1), rec(2.02), rec(2.03, followup=True))
    assert names(grade(SDK, ok, outcome="response", passed=True)) == {"recovered"}
    early = entry("flaky", "429", 2, rec(0, "429", 429, 1), rec(0.3, "429", 429, 1), rec(1.4), rec(1.41, followup=True))
    g = grade(SDK, early, outcome="response", passed=True)
    assert names(g) == {"retry_after_ignored"} and "0.299 s after a failure whose Retry-After said 1 s" in g["broken"][0], g
    # a kernel that declares it does not honour Retry-After is not held to it
    assert names(grade(Contract(retries=2, retry_after=False, backoff="exponential"), early, outcome="response", passed=True)) == {"recovered"}


def test_backoff_waits_must_exist_and_exponential_ones_must_grow():
    growing = entry("flaky", "500", 2, rec(0, "500", 500), rec(0.45, "500", 500), rec(1.4), rec(1.41, followup=True))
    assert names(grade(SDK, growing, outcome="response", passed=True)) == {"recovered"}
    flat = entry("flaky", "500", 2, rec(0, "500", 500), rec(0.4, "500", 500), rec(0.8), rec(0.81, followup=True))
    g = grade(SDK, flat, outcome="response", passed=True)
    assert names(g) == {"no_backoff"} and "do not grow" in g["broken"][0]
    assert names(grade(Contract(retries=2, backoff="constant"), flat, outcome="response", passed=True)) == {"recovered"}
    at_once = entry("flaky", "500", 1, rec(0, "500", 500), rec(0.02), rec(0.03, followup=True))
    assert names(grade(Contract(retries=2, backoff="constant"), at_once, outcome="response", passed=True)) == {"no_backoff"}
    assert names(grade(Contract(retries=2, backoff="none"), at_once, outcome="response", passed=True)) == {"recovered"}


def test_more_retries_than_declared_or_a_retry_within_5_ms_is_a_storm():
    many = entry("flaky", "500", 3, *(rec(i * 0.002, "500", 500) for i in range(3)), rec(0.006), rec(0.007, followup=True))
    g = grade(Contract(retries=2, backoff="none"), many, outcome="response", passed=True)
    assert names(g) == {"retry_storm"} and "3 retries of one LLM request; the contract allows 2" in g["broken"][0]
    quick = entry("flaky", "529", 1, rec(0, "529", 529), rec(0.003), rec(0.004, followup=True))
    assert "retry_storm" in names(grade(SDK, quick, outcome="response", passed=True))


def test_giving_up_before_the_promised_retries_is_early_and_after_them_is_the_contract():
    once = entry("flaky", "500", 2, rec(0, "500", 500))
    g = grade(SDK, once, outcome="error", passed=False, failure="error_frame:llm_error")
    assert names(g) == {"gave_up_early"} and "attempt 3 was due and would have come through" in g["broken"][0]
    assert names(grade(Contract(retries=0), once, outcome="error", passed=False)) == {"gave_up"}
    exhausted = entry("flaky", "500", 3, rec(0, "500", 500), rec(0.45, "500", 500), rec(1.4, "500", 500))
    assert names(grade(SDK, exhausted, outcome="error", passed=False)) == {"gave_up"}
    assert expected(SDK, "flaky", 3) == "gave_up" and expected(SDK, "flaky", 2) == "recovered" and expected(SDK, "truncate", None) == "gave_up"


def test_a_stall_waited_out_or_noticed_late_is_unnoticed():
    ms = stall_ms(SDK)
    assert ms == 4000  # llm_timeout + 1 s slack + 1 s: waiting it out is told apart
    waited = entry("stall", "stall", 1, rec(0, "stall", 200, dur=4.0), rec(4.01, followup=True), stall=ms)
    assert names(grade(SDK, waited, outcome="response", passed=True)) == {"stall_unnoticed"}
    noticed = entry("stall", "stall", 1, rec(0, "stall", 499, dur=0.001), rec(2.1), rec(2.11, followup=True), stall=ms)
    assert names(grade(SDK, noticed, outcome="response", passed=True)) == {"recovered"}
    late = entry("stall", "stall", 1, rec(0, "stall", 499, dur=0.001), rec(3.5), rec(3.51, followup=True), stall=ms)
    g = grade(SDK, late, outcome="response", passed=True)
    assert names(g) == {"stall_unnoticed"} and "noticed 3.50 s into a silent stream" in g["broken"][0]


def test_a_cut_stream_or_a_failure_answered_as_a_normal_reply_is_named():
    cut = entry("truncate", "truncate", None, rec(0, "truncate"), rec(0.01, "truncate", followup=True))
    assert names(grade(SDK, cut, outcome="response", passed=False, failure="missing_verdict")) == {"truncated_accepted"}
    assert names(grade(SDK, cut, outcome="error", passed=False)) == {"gave_up"}  # no retry owed to a cut stream
    failed = entry("flaky", "500", 3, rec(0, "500", 500), rec(0.45, "500", 500), rec(1.4, "500", 500))
    assert names(grade(SDK, failed, outcome="response", passed=False, failure="missing_verdict")) == {"error_hidden"}
    assert names(grade(SDK, failed, outcome="timeout", passed=False)) == {"no_answer"}
    came = entry("flaky", "429", 1, rec(0, "429", 429, 1), rec(1.01), rec(1.02, followup=True))
    assert names(grade(SDK, came, outcome="response", passed=False, failure="tool_count")) == {"verdict_failed"}


def test_a_turn_the_mock_has_no_schedule_for_is_ungraded_and_the_timeline_is_relative():
    assert names(grade(SDK, {"records": [rec(5)], "schedule": None}, outcome="response", passed=True)) == {"ungraded"}
    assert names(grade(SDK, None, outcome="response", passed=True)) == {"ungraded"}
    tl = timeline(entry("flaky", "429", 1, rec(10, "429", 429, 1), rec(11.01)), t_client=11.5, outcome="response")
    assert [a["t_s"] for a in tl["attempts"]] == [0.0, 1.01] and tl["attempts"][0]["retry_after_s"] == 1 and tl["client"]["t_s"] == 1.5


def test_the_provider_wide_rate_limit_is_graded_per_request_follow_ups_too():
    """--rate-limit refuses any request, a follow-up as well: each request's
    retries are held to the contract, and no count being known, a kernel owes
    every retry it declares before it gives up."""
    plain = {"schedule": None, "records": [rec(0), rec(0.01, "rate_limit", 429, 0.5, followup=True), rec(0.52, followup=True)]}
    g = grade(SDK, plain, outcome="response", passed=True)
    assert names(g) == {"recovered"} and g["retries"] == 1, g
    early = {"schedule": None, "records": [rec(0), rec(0.01, "rate_limit", 429, 0.5, followup=True), rec(0.1, followup=True)]}
    assert names(grade(SDK, early, outcome="response", passed=True)) == {"retry_after_ignored"}
    gave = {"schedule": None, "records": [rec(0, "rate_limit", 429, 0.5)]}
    assert names(grade(SDK, gave, outcome="error", passed=False)) == {"gave_up_early"}
    assert names(grade(Contract(retries=0), gave, outcome="error", passed=False)) == {"gave_up"}
    # no refusal at all: nothing to grade
    assert names(grade(SDK, {"schedule": None, "records": [rec(0), rec(0.1, followup=True)]}, outcome="response", passed=True)) == {"ungraded"}
