"""extras.observed and the declared_llm_api check (issue 22 item 4): the
counts from a mock log and from joined records, the check on hand-made
entries, and a bare socket's run, whose record has nothing declared."""

from __future__ import annotations

import json

from harness.results.observed import count_log, count_records, llm_api_checks, observed_entry
from harness.results.report import checks_section
from harness.results.rundir import read_jsonl
from harness.scenarios import BatchSettings, run_batch


def test_the_log_counts_dialects_streams_and_paths(tmp_path):
    log = tmp_path / "mock.jsonl"
    lines = [
        {"path": "/v1/chat/completions", "dialect": "chat", "stream": True},
        {"path": "/v1/chat/completions", "dialect": "chat", "stream": False},
        {"path": "/v1/messages", "dialect": "anthropic"},  # a body it could not read: no stream
    ]
    log.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"cut')
    assert count_log(log) == {"source": "mock.jsonl", "requests": 3, "dialects": {"chat": 2, "anthropic": 1},
                              "stream": {"true": 1, "false": 1}, "paths": {"/v1/chat/completions": 2, "/v1/messages": 1}}
    assert count_log(tmp_path / "none.jsonl") is None
    assert count_records({("responses", True): 3, ("responses", False): 1})["dialects"] == {"responses": 4}
    assert count_records({}) is None


def test_declared_against_observed():
    chat = {"source": "mock.jsonl", "requests": 4, "dialects": {"chat": 4}, "stream": {"true": 4}}
    [ok] = llm_api_checks({"observed": [observed_entry("", "chat", chat, "-")]})
    assert ok.passed and ok.name == "declared_llm_api", ok
    [bad] = llm_api_checks({"observed": [observed_entry("new", "anthropic", chat, "-")]})
    assert not bad.passed and bad.name == "declared_llm_api (new)"
    assert bad.detail.startswith("the run declares llm_api=anthropic, but the mock saw 4 chat (4 requests in mock.jsonl; 0 anthropic)"), bad.detail
    assert "--llm-api chat" in bad.detail
    # a kernel that spoke both is not the one declared either
    [mixed] = llm_api_checks({"observed": [observed_entry("", "chat", {**chat, "dialects": {"chat": 3, "responses": 1}}, "-")]})
    assert not mixed.passed
    # nothing reachable, or nothing declared: no check, and the report says why
    extras = {"observed": [observed_entry("", "chat", None, "no mock to ask: not checked"), observed_entry("", None, chat, "-")]}
    assert llm_api_checks(extras) == []
    lines = checks_section({"checks": [], "extras": extras})
    assert "- NOT CHECKED declared_llm_api — no mock to ask: not checked" in lines
    assert any(x.startswith("- NOT CHECKED declared_llm_api — the run declares no LLM API") for x in lines)


async def test_a_bare_socket_records_what_its_mock_saw(kernel_factory, out_dir):
    async with kernel_factory() as k:
        r = await run_batch(BatchSettings(ns=(2,), kinds=("batch",), rounds=1, out=out_dir, quiet=True), k.access())
    assert r.exit_code == 0, r.report
    doc = json.loads((r.dir / "run.json").read_text())
    (seen,) = doc["extras"]["observed"]
    turns = len(read_jsonl(r.dir / "turns.jsonl"))
    # a tool batch is two requests: the calls, then the results
    assert seen["source"] == "mock records" and seen["dialects"] == {"chat": 2 * turns} and not seen["checked"], seen
    assert "NOT CHECKED declared_llm_api" in r.report
