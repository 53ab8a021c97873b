"""Issue 24: `kstress resilience` against the reference kernel, as a user types
it. Each of the four faults the grades must catch is switched on and caught by
name; the same kernel configured right passes every grade; its default (no
retries) passes under retries = 0 and fails by name under retries = 2."""

from __future__ import annotations

import json

import pytest

# the reference kernel retrying as the SDKs do, its stream timeout 2 s
GOOD = ("--arg=--llm-retries", "--arg=2", "--arg=--honour-retry-after", "--arg=--llm-timeout", "--arg=2")
SDK = ("--contract", "retries=2", "--contract", "retry_after=true", "--contract", "backoff=exponential", "--contract", "llm_timeout=2")


def resilience(cli, *args: str, timeout: float = 240):
    load = () if "--load" in args else ("--load", "0")  # the load phase has its own test
    r = cli.run("resilience", "--launch", "--quiet", "--out", str(cli.out), *load, *args, timeout=timeout)
    run = sorted(p for p in cli.out.iterdir() if p.name.startswith("resilience-"))[-1] if cli.out.exists() else None
    doc = json.loads((run / "run.json").read_text()) if run else {}
    return r, doc


def broken(doc: dict) -> dict[str, set[str]]:
    return {t["class"]: set(t["broken"]) for t in doc["summary"]["classes"]}


def test_the_reference_kernel_retrying_as_declared_passes_every_grade(draws_html, cli):
    r, doc = resilience(cli, *GOOD, *SDK)
    assert r.returncode == 0, r.stdout + r.stderr
    s = doc["summary"]
    assert {t["class"] for t in s["classes"]} == {"429", "529", "500", "reset", "stall", "truncate", "exhausted"}
    outcomes = {t["class"]: set(t["outcomes"]) for t in s["classes"]}
    assert outcomes["429"] == outcomes["stall"] == {"recovered"} and outcomes["exhausted"] == outcomes["truncate"] == {"gave_up"}, outcomes
    # the 429's timeline: two failures, each retried no sooner than its Retry-After said
    ex = next(e for e in s["timeline"] if e["class"] == "429")
    a = ex["attempts"]
    assert [x["fault"] for x in a[:3]] == ["429", "429", None] and a[0]["retry_after_s"] == 1
    assert a[1]["t_s"] - a[0]["end_s"] >= 0.95 and a[2]["t_s"] - a[1]["end_s"] >= 0.95
    assert "## Attempt timelines" in r.stdout and "PASS every fault class kept the declared contract" in r.stdout
    run = sorted(p for p in cli.out.iterdir() if p.name.startswith("resilience-"))[-1]
    html = (run / "report.html").read_text()
    assert html.count('data-chart="attempt-timeline"') == 1 and "could not be drawn" not in html
    # `kstress report` recomputes the same table and timelines from turns.jsonl
    rep = cli.run("report", str(run))
    table = lambda text: [line for line in text.splitlines() if line.startswith(("| ", "- **"))]  # noqa: E731
    assert rep.returncode == 0 and table(rep.stdout) == table(r.stdout) and table(r.stdout), rep.stdout + rep.stderr


@pytest.mark.parametrize("kernel,classes,name", [
    (("--arg=--fault", "--arg=ignore-retry-after"), "429", "retry_after_ignored"),
    (("--arg=--fault", "--arg=retry-storm"), "exhausted", "retry_storm"),
    (("--arg=--fault", "--arg=accept-truncated"), "truncate", "truncated_accepted"),
    (("--arg=--fault", "--arg=hide-llm-error"), "exhausted", "error_hidden"),
    # not faults, the kernel set otherwise than its contract says
    (("--arg=--llm-backoff", "--arg=constant", "--arg=--llm-backoff-ms", "--arg=200"), "500", "no_backoff"),  # waits that do not grow
    (("--arg=--llm-timeout", "--arg=30"), "stall", "stall_unnoticed"),  # later flags win: 30 s, not the declared 2
], ids=["ignore-retry-after", "retry-storm", "accept-truncated", "hide-llm-error", "constant-backoff", "long-timeout"])
def test_each_retry_fault_of_the_reference_kernel_is_caught_by_name(cli, kernel, classes, name):
    r, doc = resilience(cli, *GOOD, *kernel, *SDK, "--classes", classes)
    assert r.returncode == 1, r.stdout + r.stderr
    assert name in broken(doc)[classes], broken(doc)
    assert f"FAIL every fault class kept the declared contract — {classes}:" in r.stdout and name in r.stdout


def test_no_retries_passes_under_retries_0_and_fails_by_name_under_retries_2(cli):
    base = ("--arg=--llm-timeout", "--arg=2", "--classes", "429,stall,exhausted")
    r, doc = resilience(cli, *base, "--contract", "retries=0", "--contract", "llm_timeout=2")
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(set(t["outcomes"]) == {"gave_up"} for t in doc["summary"]["classes"]), doc["summary"]["classes"]
    r, doc = resilience(cli, *base, *SDK)
    assert r.returncode == 1, r.stdout + r.stderr
    assert broken(doc) == {"429": {"gave_up_early"}, "stall": {"gave_up_early"}, "exhausted": {"gave_up_early"}}, broken(doc)


def test_a_stall_longer_than_stall_max_is_not_run_and_the_run_is_incomplete(cli):
    # the reference kernel's own contract: llm_timeout=60 s, so its stall would take 62 s
    r, doc = resilience(cli, "--classes", "500,stall")
    assert r.returncode == 6, r.stdout + r.stderr
    assert "NOT RUN fault class stall ran" in r.stdout and "--contract llm_timeout=5" in r.stdout


@pytest.mark.parametrize("args,said", [
    (("--classes", "!flaky:4x2"), "unknown fault '4'"),
    (("--classes", "!batch2"), "is no fault marker"),
    (("--classes", "429,fast"), "--classes 'fast' is unknown"),
    (("--contract", "retries=two"), "contract retries='two' must be a whole number"),
    (("--contract", "backoff=fibonacci"), "contract backoff='fibonacci' is unknown: use one of none, constant, exponential"),
    (("--contract", "llm_timeout=-1"), "llm_timeout"),
])
def test_bad_grammar_in_a_fault_marker_or_a_contract_key_is_exit_2(cli, args, said):
    r = cli.run("resilience", "--launch", "--quiet", "--out", str(cli.out), *args, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert said in r.stderr, r.stderr
    assert not cli.out.exists() or not any(cli.out.iterdir())  # refused before any run directory


def test_under_a_rate_limit_at_half_its_pace_a_kernel_retrying_as_declared_keeps_its_contract(cli):
    """The load phase: the kernel's own pace, then the mock refusing past half
    the LLM request rate it reached (429 with the exact wait in retry-after-ms):
    turns meet the limit, retry as declared, and those that run out of retries
    end in a clear error, none in silence."""
    r, doc = resilience(cli, *GOOD, *SDK, "--classes", "529", "--load", "3s", "--load-conns", "4")
    assert r.returncode == 0, r.stdout + r.stderr
    load = doc["summary"]["load"]
    base, lim = load["base"], load["limited"]
    assert base["passed"] == base["turns"] > 0 and load["rate_limit"] == pytest.approx(load["request_rate"] / 2)
    assert lim["rate_limited"] > 0 and not lim["broken"] and lim["no_answer"] == 0, lim
    assert set(lim["outcomes"]) <= {"ungraded", "recovered", "gave_up"}, lim["outcomes"]
    assert "PASS under a rate limit at half its request rate, the kernel kept the declared contract" in r.stdout
    assert "## Under a provider-wide rate limit" in r.stdout


@pytest.mark.parametrize("api", ["anthropic", "responses"])
def test_the_grades_hold_on_every_dialect(cli, api):
    """The fault schedules and the grades on Anthropic Messages and the
    Responses API too: a 429 retried after its Retry-After recovers, a cut
    stream (no message_stop / response.completed) taken as whole is named."""
    r, doc = resilience(cli, "--llm-api", api, *GOOD, "--arg=--fault", "--arg=accept-truncated", *SDK, "--classes", "429,truncate")
    assert r.returncode == 1, r.stdout + r.stderr
    got = {t["class"]: (set(t["outcomes"]), set(t["broken"])) for t in doc["summary"]["classes"]}
    assert got == {"429": ({"recovered"}, set()), "truncate": ({"truncated_accepted"}, {"truncated_accepted"})}, got
    assert f"llm_api={api}: every one of" in r.stdout
