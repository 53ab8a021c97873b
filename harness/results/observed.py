"""What the mock saw of a kernel's LLM requests, beside what the run declares
(issue 22 item 4). A run records the LLM API its kernel speaks (``--llm-api``,
a target file's ``llm_api``), but only the reference kernel's default argv
tells the kernel: ``--bin K --llm-api anthropic`` recorded ``anthropic`` for a
kernel that spoke chat. The mock knows better -- every request it answered
carries its dialect (the path it came on) and whether it asked for a stream --
so the run keeps those counts as ``extras.observed`` and fails the
``declared_llm_api`` check when the two disagree."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Mapping

from .rundir import Check

CHECK = "declared_llm_api"


def count_log(path: Path) -> dict[str, Any] | None:
    """The requests of one run's copy of the mock's log, by dialect, stream and
    path; None when the log holds none (or is not there)."""
    if not path.is_file():
        return None
    dialects: Counter[str] = Counter()
    streams: Counter[str] = Counter()
    paths: Counter[str] = Counter()
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a killed mock says nothing
            if not isinstance(rec, dict) or not isinstance(rec.get("dialect"), str):
                continue
            dialects[rec["dialect"]] += 1
            if isinstance(rec.get("stream"), bool):  # a request it could not read has none
                streams[str(rec["stream"]).lower()] += 1
            if isinstance(rec.get("path"), str):
                paths[rec["path"]] += 1
    if not dialects:
        return None
    return {"source": path.name, "requests": sum(dialects.values()), "dialects": dict(dialects), "stream": dict(streams), "paths": dict(paths)}


def count_records(seen: Mapping[tuple[Any, Any], int]) -> dict[str, Any] | None:
    """The same counts from the (dialect, stream) of the mock's records of the
    turns this target's verdicts were joined to; None when there were none."""
    dialects: Counter[str] = Counter()
    streams: Counter[str] = Counter()
    for (dialect, stream), n in seen.items():
        if isinstance(dialect, str):
            dialects[dialect] += n
            if isinstance(stream, bool):
                streams[str(stream).lower()] += n
    if not dialects:
        return None
    return {"source": "mock records", "requests": sum(dialects.values()), "dialects": dict(dialects), "stream": dict(streams)}


def observed_entry(who: str, declared: str | None, counts: dict[str, Any] | None, unreachable: str) -> dict[str, Any]:
    """One target's ``extras.observed`` entry: what it declared, what the mock
    saw, and whether the two could be compared (``why`` when not)."""
    entry: dict[str, Any] = {"target": who, "declared": {"llm_api": declared}}
    if counts is not None:
        entry.update(counts)
    if counts is None:
        entry.update(checked=False, why=unreachable)
    elif declared is None:
        entry.update(checked=False, why="the run declares no LLM API for this kernel (a bare --socket or --url): the counts are a record only")
    else:
        entry["checked"] = True
    return entry


def _counts(d: dict[str, Any]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(d.items(), key=lambda kv: (-kv[1], kv[0])))


def llm_api_checks(extras: dict[str, Any]) -> list[Check]:
    """``declared_llm_api``, one per target whose record could be checked:
    every request the mock saw came in the dialect the run declares."""
    out = []
    for e in extras.get("observed") or ():
        if not e.get("checked"):
            continue
        declared = (e.get("declared") or {}).get("llm_api")
        dialects = e.get("dialects") or {}
        name = f"{CHECK} ({e['target']})" if e.get("target") else CHECK
        where = f"{e.get('requests')} requests in {e.get('source')}"
        if set(dialects) == {declared}:
            out.append(Check(name, True, f"llm_api={declared}: every one of {where} spoke {declared}"))
            continue
        seen = _counts(dialects)
        out.append(Check(name, False, (
            f"the run declares llm_api={declared}, but the mock saw {seen} ({where}; {dialects.get(declared, 0)} {declared}): "
            f"the kernel was not told the API, or ignored it. Tell it (the reference kernel: -- --llm-api {declared}; "
            f"a target file: an argv with {{llm_api}}), or declare the API it speaks (--llm-api {max(dialects, key=dialects.get)})"
        )))
    return out


def not_checked(extras: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, why) of each target whose LLM API could not be checked."""
    return [(f"{CHECK} ({e['target']})" if e.get("target") else CHECK, str(e.get("why"))) for e in extras.get("observed") or () if not e.get("checked")]
