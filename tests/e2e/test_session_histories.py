"""A Responses kernel that keeps each session's earlier answers as
`item_reference`s fails `sessions` by name (issue 22 item 2): the stateless mock
cannot resolve them, and before it passed with history=ok. The same kernel
sending the answers themselves passes: the control. A real kernel process in a
real sandbox, against the sandbox's mock."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.results.rundir import read_jsonl

pytestmark = pytest.mark.slow

KERNEL = Path(__file__).resolve().parent / "refskernel.py"


def wrapper(tmp: Path, mode: str) -> Path:
    w = tmp / f"refs-{mode}"
    w.write_text(f"#!/bin/sh\nexec {sys.executable} {KERNEL} {mode} \"$@\"\n")
    w.chmod(0o755)
    return w


def sessions(cli, mode: str):
    r = cli.run("sessions", "--launch", "--bin", str(wrapper(cli.out.parent, mode)), "--llm-api", "responses", "--contract", "sessions=true",
                "--sessions", "2", "--turns", "3", "--mix", "text", "--quiet", "--out", str(cli.out))
    [run_dir] = [p for p in cli.out.iterdir() if not p.is_symlink() and p.name.startswith("sessions")]
    return r, run_dir


def test_answers_kept_as_item_references_fail_sessions_by_name(cli):
    r, run_dir = sessions(cli, "refs")
    assert r.returncode == 1, (r.stdout[-3000:], r.stderr[-2000:])
    rows = [x for x in read_jsonl(run_dir / "turns.jsonl") if x.get("kind") == "session"]
    # turn 1 has no history; each session's turn 2 carries turn 1's answer as a reference, and ends the session
    assert sorted((x["turn"], (x.get("failures") or ["passed"])[0]) for x in rows) == [(1, "passed"), (1, "passed"), (2, "history unresolved:item_reference"), (2, "history unresolved:item_reference")]
    assert "FAIL every session kept its own history — history unresolved:item_reference" in r.stdout


def test_the_same_kernel_sending_its_answers_passes(cli):
    r, run_dir = sessions(cli, "full")
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-2000:])
    doc = json.loads((run_dir / "run.json").read_text())
    assert doc["summary"]["history_failures"] == 0 and doc["summary"]["sessions"]["complete"] == 2
