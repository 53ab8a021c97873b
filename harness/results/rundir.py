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
import math
import os
import platform
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from .. import __version__
from ..errors import UsageError

SCHEMA = "kstress.run/1"
FLUSH_EVERY_S = 0.1
_std_encode = json.JSONEncoder(separators=(",", ":")).encode


def encode_row(row: dict[str, Any]) -> bytes:
    """One turns.jsonl line. orjson refuses what the stdlib accepts (a lone
    surrogate a kernel sent, an int past 64 bits): those rows take the stdlib."""
    try:
        return orjson.dumps(row, option=orjson.OPT_APPEND_NEWLINE)  # no copy to add the newline
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
    """One pass/fail statement of a run (printed and stored). ``ran=False``:
    the scenario's core check could not run (``passed`` is then False, and
    the run ends incomplete, exit 6, unless something failed)."""

    name: str
    passed: bool
    detail: str = ""
    ran: bool = True

    def to_json(self) -> dict[str, Any]:
        d: dict[str, Any] = {"name": self.name, "passed": self.passed, "detail": self.detail}
        if not self.ran:
            d["ran"] = False
        return d


LATEST = "latest"


def point_latest(root: Path, run: Path) -> None:
    """``root/latest`` -> the newest run dir (relative, so a moved runs/
    keeps working), replaced atomically; a filesystem without symlinks only
    loses the pointer."""
    tmp = root / f".{LATEST}.{os.getpid()}"
    try:
        if tmp.is_symlink():
            tmp.unlink()
        os.symlink(run.name, tmp)
        os.replace(tmp, root / LATEST)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def run_dirs(root: Path) -> list[Path]:
    """Every run dir under ``root`` (not the latest pointer), oldest first."""
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.is_dir() and not p.is_symlink() and (p / "run.json").exists()),
                  key=lambda p: (p.stat().st_mtime, p.name))


@dataclass
class RunDir:
    """Creates a fresh directory (never reuses one: results of an earlier run
    are never mixed into a new one) and streams turns into it."""

    scenario: str
    root: Path = Path("runs")
    path: Path = field(init=False)

    def __post_init__(self) -> None:
        try:
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
        except OSError as exc:
            raise UsageError(f"--out {self.root}: cannot create a run directory there ({exc.strerror}); pass a writable directory") from None
        point_latest(self.root, self.path)
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

    def write_doc(self, doc: dict[str, Any]) -> Path:
        """run.json, replaced whole (a reader never sees half a file): written
        when the run starts (status running) and again when it ends."""
        doc = {"schema": SCHEMA, **doc}
        path = self.path / "run.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")
        os.replace(tmp, path)
        return path

    def finish(self, doc: dict[str, Any]) -> Path:
        self.close()
        return self.write_doc(doc)

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


@dataclass
class LoadedRun:
    """A run directory as `kstress report` reads it: run.json, the turns
    (None when turns.jsonl is missing) and what the reader has to say out
    loud about the files."""

    doc: dict[str, Any]
    rows: list[dict[str, Any]] | None
    notes: list[str]


# the types the summaries read of a row; a row that breaks them is refused by line
_ROW_TYPES: dict[str, tuple[type, ...]] = {
    "passed": (bool,),
    "failures": (list,),
    "kind": (str,),
    "marker": (str, type(None)),
    "outcome": (str,),
    "latency_s": (int, float, type(None)),
    "first_frame_s": (int, float, type(None)),
    "scheduled_s": (int, float, type(None)),
    "t_rel": (int, float),
    "tool_ms": (int, type(None)),
    "overlap": (int, type(None)),
    "expected": (int, type(None)),
    "got": (int, type(None)),
    "errors": (int, type(None)),
    "n": (int,),
    "round": (int,),
    "conn": (int,),
    "seq": (int,),
    "arm": (str,),
    "dim": (str,),
    "version": (str,),
    "batch_kind": (str,),
}


def _row_problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an object"
    for key, types in _ROW_TYPES.items():
        if key in row and (not isinstance(row[key], types) or (isinstance(row[key], bool) and bool not in types)):
            return f"{key!r} is {row[key]!r}, not {' or '.join('null' if t is type(None) else t.__name__ for t in types)}"
    for key, value in row.items():
        # kstress writes no NaN or infinity (JSON has none; Python's json reads them):
        # one there came from an edit, and every statistic over it would be NaN or crash
        if isinstance(value, float) and not math.isfinite(value):
            return f"{key!r} is {value!r}, not a finite number"
    if "failures" in row and not all(isinstance(f, str) for f in row["failures"]):
        return "'failures' must be a list of strings"
    return None


def load_run(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """run.json and turns.jsonl of a run directory, strictly (see read_run)."""
    loaded = read_run(path)
    return loaded.doc, loaded.rows or []


def read_run(path: Path) -> LoadedRun:
    """Refuses (UsageError, exit 2) what it cannot use, naming the file, the
    line and the field: an unknown schema, a run.json that is not the object
    kstress writes, a turns.jsonl line that is not a row. Only the last line
    may be cut short (a run killed while writing it): it is left out, and
    said so. A missing turns.jsonl is said so too."""
    run_json = path / "run.json"
    try:
        doc = json.loads(run_json.read_text())
    except OSError as exc:
        raise UsageError(f"{run_json}: cannot read it ({exc.strerror}); is {path} a kstress run directory?") from None
    except ValueError as exc:
        raise UsageError(f"{run_json}: not valid JSON ({exc}); the run directory is damaged") from None
    if not isinstance(doc, dict):
        raise UsageError(f"{run_json}: a JSON {type(doc).__name__}, not the object kstress writes; is {path} a kstress run directory?")
    schema = doc.get("schema")
    if schema not in KNOWN_SCHEMAS:
        raise UsageError(f"{run_json}: schema {schema!r} is not one this kstress reads ({', '.join(KNOWN_SCHEMAS)}); use a matching kstress version")
    for key, typ in (("scenario", str), ("settings", dict), ("summary", dict), ("checks", list), ("extras", dict), ("meta", dict)):
        if key in doc and not isinstance(doc[key], typ):
            raise UsageError(f"{run_json}: {key!r} is a {type(doc[key]).__name__}, not a {typ.__name__}; the run directory is damaged")
    if not isinstance(doc.get("scenario"), str):
        raise UsageError(f"{run_json}: it names no scenario; the run directory is damaged")
    notes: list[str] = []
    turns = path / "turns.jsonl"
    try:
        data = turns.read_bytes()
    except FileNotFoundError:
        notes.append("turns.jsonl is missing: every figure below is the summary run.json stored, not recomputed")
        return LoadedRun(doc, None, notes)
    except OSError as exc:
        raise UsageError(f"{turns}: cannot read it ({exc.strerror})") from None
    lines = data.split(b"\n")
    rows = []
    for k, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            row = json.loads(raw)
        except ValueError as exc:
            if k == len(lines):  # the last line, without its newline: cut by a kill
                notes.append(f"turns.jsonl line {k} is cut short (the run was killed while writing it); it is left out")
                continue
            raise UsageError(f"{turns} line {k}: not valid JSON ({exc}); fix or remove that line") from None
        problem = _row_problem(row)
        if problem:
            raise UsageError(f"{turns} line {k}: {problem}; fix or remove that line")
        rows.append(row)
    return LoadedRun(doc, rows, notes)


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSONL file, for tests and tools; lines that are not JSON
    are skipped (`read_run` is the strict reader)."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except ValueError:
                        continue
    except FileNotFoundError:
        pass
    return rows
