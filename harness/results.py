"""Run directories: ``runs/<scenario>-<UTC stamp>/`` (docs/results.md).

    run.json         versioned: schema, scenario, passed, exit_code, meta, settings, summary, checks
    turns.jsonl      one line per input, written as each turn ends (survives interruption)
    resources.jsonl  sampler rows
    mock.jsonl       the mock's request log for this run only
    report.md        rendered from the raw files; `kstress report DIR` re-renders it

A loader refuses schemas it does not know.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from . import __version__
from .errors import UsageError

SCHEMA = "kstress.run/1"
FLUSH_EVERY_S = 0.1
_std_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode_row(row: dict[str, Any]) -> bytes:
    """One turns.jsonl line. orjson refuses what the stdlib accepts (a lone
    surrogate a kernel sent, an int past 64 bits): those rows take the stdlib."""
    try:
        return orjson.dumps(row) + b"\n"
    except TypeError:
        return _std_encode(row).encode("utf-8", "backslashreplace") + b"\n"
KNOWN_SCHEMAS = (SCHEMA,)


def utc_stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")


def host_meta() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "harness_version": __version__,
    }


@dataclass(frozen=True)
class Check:
    """One pass/fail statement of a run (printed and stored)."""

    name: str
    passed: bool
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail}


@dataclass
class RunDir:
    """Creates a fresh directory (never reuses one: results of an earlier run
    are never mixed into a new one) and streams turns into it."""

    scenario: str
    root: Path = Path("runs")
    path: Path = field(init=False)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        base = f"{self.scenario}-{utc_stamp()}"
        for k in range(1000):
            candidate = self.root / (base if k == 0 else f"{base}-{k}")
            try:
                candidate.mkdir()
                self.path = candidate
                break
            except FileExistsError:
                continue
        else:  # pragma: no cover - a thousand runs in one second
            raise UsageError(f"cannot create a fresh run directory under {self.root}")
        # block-buffered and flushed at least every FLUSH_EVERY_S: a write per
        # row was a syscall per turn; a killed run loses at most that window
        self._turns = open(self.path / "turns.jsonl", "ab", buffering=1 << 16)
        self._flushed = time.monotonic()

    def turn(self, row: dict[str, Any]) -> None:
        self._turns.write(encode_row(row))
        now = time.monotonic()
        if now - self._flushed >= FLUSH_EVERY_S:
            self._turns.flush()
            self._flushed = now

    def flush(self) -> None:
        if not self._turns.closed:
            self._turns.flush()
            self._flushed = time.monotonic()

    @property
    def resources_path(self) -> Path:
        return self.path / "resources.jsonl"

    def copy_mock_log(self, source: Path | None, offset: int, name: str = "mock.jsonl") -> None:
        """The mock's log lines written during this run only."""
        dest = self.path / name
        if source is None or not source.exists():
            dest.touch()
            return
        with open(source, "rb") as f, open(dest, "wb") as out:
            f.seek(offset)
            out.write(f.read())

    def finish(self, doc: dict[str, Any]) -> Path:
        self._turns.close()
        doc = {"schema": SCHEMA, **doc}
        (self.path / "run.json").write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")
        return self.path / "run.json"

    def close(self) -> None:
        if not self._turns.closed:
            self._turns.close()


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if hasattr(o, "to_json"):
        return o.to_json()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def load_run(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """run.json and turns.jsonl of a run directory; refuses unknown schemas."""
    run_json = path / "run.json"
    try:
        doc = json.loads(run_json.read_text())
    except OSError as exc:
        raise UsageError(f"{run_json}: cannot read it ({exc.strerror}); is {path} a kstress run directory?") from None
    except ValueError as exc:
        raise UsageError(f"{run_json}: not valid JSON ({exc})") from None
    schema = doc.get("schema")
    if schema not in KNOWN_SCHEMAS:
        raise UsageError(f"{run_json}: schema {schema!r} is not one this kstress reads ({', '.join(KNOWN_SCHEMAS)}); use a matching kstress version")
    return doc, read_jsonl(path / "turns.jsonl")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue  # a line cut by an interrupted run
    except FileNotFoundError:
        pass
    return rows
