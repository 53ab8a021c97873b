"""What a run declares of its kernel's LLM API against what the mock saw
(issue 22 item 4): `--bin K --llm-api anthropic` recorded `anthropic` for a
kernel that was never told and spoke chat. The real reference kernel under
--bin (whose default argv does not pass --llm-api), the real mock."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
# a path: the bare word would name the repo's refkernel/ directory, the tests' cwd
REFKERNEL = str(Path(sys.executable).with_name("refkernel"))
STRESS = ("stress", "--launch", "--conns", "2", "--inputs", "2", "--no-dedup-probe", "--quiet")


def run_doc(r) -> dict:
    run = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    return json.loads((run / "run.json").read_text())


def llm_check(doc: dict) -> dict:
    (c,) = [c for c in doc["checks"] if c["name"].startswith("declared_llm_api")]
    return c


def test_a_declared_api_the_kernel_never_spoke_fails_by_name(cli):
    r = cli.run(*STRESS, "--bin", REFKERNEL, "--llm-api", "anthropic", "--out", str(cli.out))
    assert r.returncode == 1, (r.stdout[-2000:], r.stderr[-2000:])
    doc = run_doc(r)
    (seen,) = doc["extras"]["observed"]
    assert seen["declared"] == {"llm_api": "anthropic"} and seen["checked"], seen
    assert set(seen["dialects"]) == {"chat"} and seen["requests"] >= 2 and seen["source"] == "mock.jsonl", seen
    assert seen["stream"] == {"true": seen["requests"]} and set(seen["paths"]) == {"/v1/chat/completions"}, seen
    c = llm_check(doc)
    assert not c["passed"] and "declares llm_api=anthropic, but the mock saw" in c["detail"] and "chat" in c["detail"], c
    assert "--llm-api chat" in c["detail"]
    report = (Path(r.stdout.strip().splitlines()[-1].removeprefix("run: ")) / "report.md").read_text()
    assert "FAIL declared_llm_api" in report


def test_a_kernel_told_the_api_it_declares_passes(cli):
    r = cli.run(*STRESS, "--bin", REFKERNEL, "--llm-api", "anthropic", "--out", str(cli.out), "--", "--llm-api", "anthropic", "--no-stream")
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    doc = run_doc(r)
    (seen,) = doc["extras"]["observed"]
    assert set(seen["dialects"]) == {"anthropic"} and seen["stream"] == {"false": seen["requests"]}, seen
    assert llm_check(doc)["passed"]
