"""Failure forensics: a failed turn's whole story in ``failures.jsonl``.

For the first FAILURES_PER_NAME failed turns of each failure name (the name
``failure_name`` gives a row: the key of every failures table) the run keeps,
beside the turns.jsonl row: the frames the kernel sent for the input (bounded
in count, per frame and per turn), its error message, the verdict expected vs
what came (the line the reply carried and the line the mock recorded), and the
mock's requests for the nonce -- its store entry when the turn is recorded, its
log lines (roles, calls, results) once the run ends and the log is copied.

Memory: nothing is kept beyond what a Turn already holds until it is recorded
(its frames, harness/wire/client.py TURN_FRAMES_KEPT); an entry is written the
moment its turn is recorded and only a count per name stays. The file is
bounded too: FAILURES_PER_NAME x NAMES_MAX entries of at most TURN_CHARS of
frames each (docs/results.md, "failures.jsonl").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable

import orjson

from mock.markers import parse_text_line, parse_verdict

from ..wire.client import Turn
from .verdict import TurnVerdict, failure_name

FILE = "failures.jsonl"
FAILURES_PER_NAME = 20  # entries kept per failure name; the rest are counted
NAMES_MAX = 50  # failure names with entries (a kernel may invent error codes without end)
FRAMES_KEPT = 200  # frames of one turn in its entry
FRAME_CHARS = 4096  # of one frame's JSON; a longer frame keeps its head
TURN_CHARS = 256 * 1024  # of one entry's frames, all together
MOCK_REQUESTS_KEPT = 64  # the mock's store keeps as many records per nonce (mock/store.py MAX_RECORDS)
EXAMPLE_CHARS = 300  # of each side of a report example


def _dumps(obj: Any) -> str:
    try:
        return orjson.dumps(obj).decode()
    except TypeError:  # a lone surrogate, an int past 64 bits: the stdlib takes them
        return json.dumps(obj, separators=(",", ":"), default=repr)


def bounded_frames(frames: Iterable[tuple[float, dict[str, Any]]], t0: float) -> tuple[list[dict[str, Any]], int]:
    """The frames as an entry keeps them: ``{"t_ms", "frame"}`` in order (ms
    from the send), at most FRAMES_KEPT and TURN_CHARS of JSON together; a
    frame longer than FRAME_CHARS becomes ``{"t_ms", "chars", "head"}``.
    Returns them and how many were left out."""
    out: list[dict[str, Any]] = []
    used = dropped = 0
    for t, frame in frames:
        if len(out) >= FRAMES_KEPT or used >= TURN_CHARS:
            dropped += 1
            continue
        text = _dumps(frame)
        t_ms = round((t - t0) * 1000, 3)
        if len(text) > FRAME_CHARS:
            head = text[: min(FRAME_CHARS, TURN_CHARS - used)]
            out.append({"t_ms": t_ms, "chars": len(text), "head": head})
            used += len(head)
        else:
            out.append({"t_ms": t_ms, "frame": frame})
            used += len(text)
    return out, dropped


class Bounds:
    """Which failed rows get an entry: the first FAILURES_PER_NAME of each
    name, for at most NAMES_MAX names; every other failure is only counted."""

    def __init__(self, per_name: int = FAILURES_PER_NAME, names_max: int = NAMES_MAX) -> None:
        self.per_name = per_name
        self.names_max = names_max
        self.kept: dict[str, int] = {}
        self.skipped: dict[str, int] = {}

    def take(self, name: str) -> bool:
        n = self.kept.get(name)
        if n is None and len(self.kept) >= self.names_max or n is not None and n >= self.per_name:
            self.skipped[name] = self.skipped.get(name, 0) + 1
            return False
        self.kept[name] = (n or 0) + 1
        return True


def _line_of(text: str) -> str | None:
    v = parse_verdict(text)
    if v is not None:
        return v.format()
    t = parse_text_line(text)
    return None if t is None else t.format()


def _mock_line(mock: dict[str, Any] | None) -> str | None:
    if not mock:
        return None
    v = mock.get("verdict")
    if isinstance(v, dict) and v.get("line"):
        return str(v["line"])
    return mock.get("text_verdict") or None


def _clip(s: str, n: int = EXAMPLE_CHARS) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def want_and_came(turn: Turn, v: TurnVerdict, mock: dict[str, Any] | None) -> tuple[str, str]:
    """What the turn should have produced and what came, each one short line."""
    if v.expected is not None:
        want = f"{v.expected} tool result{'s' if v.expected != 1 else ''} in a correct verdict line"
    elif v.plan == "text":
        want = "a text answer carrying the mock's verdict line"
    elif v.plan in ("err", "hang"):
        want = f"the behaviour {v.marker} asks for"
    else:
        want = f"a passing {v.plan} turn"
    if turn.outcome == "error":
        came = f"error frame {turn.error_code}: {turn.error_message or ''}".rstrip(": ")
    elif turn.outcome == "response":
        line = _line_of(turn.reply) or _mock_line(mock)
        came = f"response with {line!r}" if line else f"response without a verdict line: {turn.reply[:120]!r}"
        if v.got is not None and v.expected is not None:
            came = f"{v.got} of {v.expected} tool results; " + came
    else:
        came = f"{turn.outcome}" + (f" ({turn.conn_error})" if turn.conn_error else "")
    return _clip(want), _clip(came)


def entry_of(turn: Turn, v: TurnVerdict, row: dict[str, Any], mock: dict[str, Any] | None, target: str = "") -> dict[str, Any]:
    """One failed turn's failures.jsonl object."""
    frames, dropped = bounded_frames(turn.frames, turn.t_sent)
    want, came = want_and_came(turn, v, mock)
    records = (mock or {}).get("records") or []
    e: dict[str, Any] = {
        "nonce": turn.nonce,
        "failure": failure_name(row),
        "t_sent": turn.t_sent,  # time.monotonic(): the mock's log times are on the same clock
        "failures": list(v.failures),
        "row": row,
        "text": turn.text,
        "frames": frames,
        "frames_total": len(turn.frames) + turn.frames_dropped,
        "frames_dropped": dropped + turn.frames_dropped,
        "error": {"code": turn.error_code, "message": turn.error_message} if turn.error_code is not None else None,
        "conn_error": turn.conn_error,
        "expected": v.expected,
        "got": v.got,
        "want": want,
        "came": came,
        "verdict": {"reply": _line_of(turn.reply) if turn.outcome == "response" else None, "mock": _mock_line(mock), "source": v.verdict_source},
        "reply": _clip(turn.reply, 2000) if turn.outcome == "response" else None,
        # the store's records (times on the harness's clock, relative to the send) until the log replaces them
        "mock_requests": [_store_record(r, turn.t_sent) for r in records[:MOCK_REQUESTS_KEPT] if isinstance(r, dict)],
        "mock_source": "store" if mock else None,
        "mock": {k: val for k, val in (mock or {}).items() if k != "records" and val is not None} or None,
    }
    if target:
        e["target"] = target
    return e


def _store_record(r: dict[str, Any], t0: float) -> dict[str, Any]:
    out = dict(r)
    for k in ("arrival", "first_byte", "last_byte"):
        if isinstance(out.get(k), (int, float)):
            out[k + "_ms"] = round((out.pop(k) - t0) * 1000, 3)
    return out


class Forensics:
    """The run's failures.jsonl: ``add`` from the recorder (written at once,
    line-buffered), ``join_mock_logs`` once the mock's logs are in the run dir.
    The file exists from the run's start: empty means no turn failed."""

    def __init__(self, run_dir: Path, bounds: Bounds | None = None) -> None:
        self.path = run_dir / FILE
        self.bounds = bounds or Bounds()
        self.examples: dict[str, dict[str, Any]] = {}
        self._f = open(self.path, "a", buffering=1)

    def wants(self, row: dict[str, Any]) -> bool:
        name = failure_name(row)
        return name is not None and self.bounds.take(name)

    def add(self, entry: dict[str, Any]) -> None:
        if self._f.closed:
            return
        self._f.write(_dumps(entry) + "\n")
        name = entry["failure"]
        if name not in self.examples:
            self.examples[name] = {"nonce": entry["nonce"], "want": entry["want"], "came": entry["came"], "failure": entry["failures"][0] if entry["failures"] else name}

    def summary(self) -> dict[str, Any]:
        """run.json extras.failure_examples: one example per name, and the counts kept / left out."""
        return {"examples": dict(sorted(self.examples.items())), "kept": dict(sorted(self.bounds.kept.items())), "not_kept": dict(sorted(self.bounds.skipped.items()))}

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def join_mock_logs(self, logs: dict[str, Path]) -> None:
        """Replace each entry's store records by the mock's log lines for its
        nonce (``logs``: a target's label -> its mock log in the run dir), in
        one pass over each log and a rewrite of the file."""
        self.close()
        # entries stream through (a full file is up to NAMES_MAX x FAILURES_PER_NAME
        # entries of TURN_CHARS): only their nonces are held
        wanted: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for e in read_entries_iter(self.path):
            wanted.setdefault(e.get("target", ""), {})[e["nonce"]] = []
        if not wanted:
            return
        for label, nonces in wanted.items():
            log = logs.get(label)
            if log is None or not log.exists():
                continue
            for rec in mock_lines(log, nonces):
                got = nonces[rec["nonce"]]
                if len(got) < MOCK_REQUESTS_KEPT:
                    got.append(rec)
        if not any(any(v.values()) for v in wanted.values()):
            return
        tmp = self.path.with_suffix(".jsonl.tmp")
        with open(tmp, "w") as out:
            for e in read_entries_iter(self.path):
                lines = wanted.get(e.get("target", ""), {}).get(e["nonce"])
                if lines:
                    t0 = _t_sent(e)
                    e["mock_requests"] = [_log_record(r, t0) for r in lines]
                    e["mock_source"] = "log"
                out.write(_dumps(e) + "\n")
        tmp.replace(self.path)


def _t_sent(entry: dict[str, Any]) -> float | None:
    return entry.get("t_sent")


def _log_record(r: dict[str, Any], t0: float | None) -> dict[str, Any]:
    out = dict(r)
    if t0 is not None:
        for k in ("t_arrival", "t_first_byte", "t_last_byte"):
            if isinstance(out.get(k), (int, float)):
                out[k[2:] + "_ms"] = round((out[k] - t0) * 1000, 3)
    return out


def mock_lines(log: Path, nonces: Any) -> Iterable[dict[str, Any]]:
    """The log lines of ``nonces`` (a container), in order; unreadable lines
    skipped. A line is parsed only when its ``"nonce":"..."`` is one of them:
    a 10,000-turn log is read once, not decoded whole."""
    with open(log, "rb") as f:
        for raw in f:
            i = raw.find(b'"nonce":"')
            if i < 0:
                continue
            j = raw.find(b'"', i + 9)
            if raw[i + 9 : j].decode("utf-8", "replace") not in nonces:
                continue
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict) and rec.get("nonce") in nonces:
                yield rec


def read_entries_iter(path: Path) -> Iterable[dict[str, Any]]:
    """failures.jsonl's entries one by one; unreadable lines skipped."""
    if not path.exists():
        return
    with open(path, "rb") as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and "nonce" in e:
                yield e


def read_entries(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_entries_iter(run_dir / FILE))


# --- `kstress show RUN NONCE` ------------------------------------------------------

SHOW_CHARS = 240  # of one frame, call or result on a line of `kstress show`


def _rows(path: Path) -> Iterable[dict[str, Any]]:
    if not path.exists():
        return
    with open(path, "rb") as f:
        for raw in f:
            try:
                row = json.loads(raw)
            except ValueError:
                continue
            if isinstance(row, dict):
                yield row


def find_turn(run_dir: Path, nonce: str) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """(the failures.jsonl entry or None, the turns.jsonl row) of the one turn
    whose nonce is ``nonce`` or starts with it; UsageError otherwise."""
    from ..errors import UsageError

    if not (run_dir / "turns.jsonl").exists() and not (run_dir / FILE).exists():
        raise UsageError(f"{run_dir}: not a run directory (no turns.jsonl): pass a directory `kstress` wrote under runs/")
    if not nonce:
        raise UsageError(f"an empty nonce matches every turn: give one from {run_dir / 'turns.jsonl'} (field nonce)")
    entries = [e for e in read_entries_iter(run_dir / FILE) if str(e.get("nonce", "")).startswith(nonce)]
    exact = [e for e in entries if e.get("nonce") == nonce]
    if exact or len({e.get("nonce") for e in entries}) == 1:
        e = (exact or entries)[0]
        return e, e.get("row") or {}
    rows = [r for r in _rows(run_dir / "turns.jsonl") if str(r.get("nonce", "")).startswith(nonce)]
    exact_rows = [r for r in rows if r.get("nonce") == nonce]
    if exact_rows:
        rows = exact_rows
    found = sorted({str(r.get("nonce")) for r in rows} | {str(e.get("nonce")) for e in entries})
    if len(found) == 1:
        return None, rows[0]
    if not found:
        raise UsageError(f"no turn with nonce {nonce!r} in {run_dir}: the nonces of its turns are in {run_dir / 'turns.jsonl'} (field nonce); failed turns' stories in {run_dir / FILE}")
    shown = ", ".join(found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    raise UsageError(f"nonce prefix {nonce!r} matches {len(found)} turns in {run_dir} ({shown}): give more of the nonce")


def _short(obj: Any, n: int = SHOW_CHARS) -> str:
    text = obj if isinstance(obj, str) else _dumps(obj)
    return _clip(text, n)


def _fmt_ms(v: Any) -> str:
    return f"+{v:.1f} ms" if isinstance(v, (int, float)) else "?"


def _request_lines(k: int, r: dict[str, Any]) -> list[str]:
    at = _fmt_ms(r.get("arrival_ms"))
    end = r.get("last_byte_ms")
    head = f"  #{k} {at}" + (f" .. {_fmt_ms(end)}" if end is not None else "") + f"  HTTP {r.get('status')}"
    head += f"  {r.get('dialect') or ''} {'follow-up' if r.get('followup') else 'first request'}"
    if r.get("n_messages") is not None:
        head += f", {r['n_messages']} messages"
    for key in ("plan", "fault", "error", "history"):
        if r.get(key) not in (None, False):
            head += f", {key} {r[key]}"
    out = [head]
    if r.get("roles"):
        out.append(f"      roles: {' '.join(str(x) for x in r['roles'])}")
    for c in r.get("calls") or ():
        out.append(f"      call {c[0]} {c[1]} {_short(c[2], SHOW_CHARS - 40)}")
    for res in r.get("results") or ():
        out.append(f"      result {res[0]}{' (error)' if len(res) > 2 and res[2] else ''}: {_short(res[1])}")
    if r.get("verdict"):
        out.append(f"      verdict line: {r['verdict']}")
    elif r.get("text_verdict"):
        out.append(f"      verdict line: {r['text_verdict']}")
    return out


def _mock_log_for(run_dir: Path, row: dict[str, Any]) -> Path:
    label = row.get("version")
    return run_dir / (f"mock-{label}.jsonl" if label else "mock.jsonl")


def story(run_dir: Path, nonce: str) -> str:
    """One turn's whole story, for people: from failures.jsonl when the turn
    failed and was kept, else from turns.jsonl and the mock's log."""
    entry, row = find_turn(run_dir, nonce)
    nonce = str(row.get("nonce") or (entry or {}).get("nonce"))
    verdict = "PASS" if row.get("passed") else "FAIL " + "; ".join(row.get("failures") or ())
    lat = row.get("latency_s")
    out = [f"turn {nonce}: {verdict}"]
    out.append(
        f"  marker {row.get('marker')}, plan {row.get('plan')}, outcome {row.get('outcome')}"
        + (f", latency {lat * 1000:.1f} ms" if isinstance(lat, (int, float)) else "")
        + (f", sent at +{row['t_rel']:.3f} s of the run" if isinstance(row.get("t_rel"), (int, float)) else "")
    )
    labels = {k: row[k] for k in ("kind", "conn", "seq", "stage", "version", "session", "turn") if k in row}
    if labels:
        out.append("  " + " ".join(f"{k}={v}" for k, v in labels.items()))
    out.append("")
    out.append("row (turns.jsonl):")
    out.append("  " + _dumps({k: v for k, v in row.items() if v is not None}))
    out.append("")
    if entry is not None:
        if entry.get("text"):
            out.append(f"input: {entry['text']}")
            out.append("")
        frames = entry.get("frames") or []
        total = entry.get("frames_total", len(frames))
        out.append(f"frames ({len(frames)} of {total}" + (f"; {entry.get('frames_dropped')} not kept" if entry.get("frames_dropped") else "") + ", ms from the send):")
        for f in frames:
            body = f.get("frame") if "frame" in f else f"{f.get('head', '')}… ({f.get('chars')} characters)"
            if isinstance(body, dict):
                body = {k: v for k, v in body.items() if not (k == "id" and v == nonce)}
            out.append(f"  {_fmt_ms(f.get('t_ms')):>12}  {_short(body)}")
        if not frames:
            out.append("  (none: the kernel sent nothing for this input)")
        out.append("")
        requests = entry.get("mock_requests") or []
        source = {"log": "the mock's log", "store": "the mock's store"}.get(entry.get("mock_source") or "", "the mock")
    else:
        out.append(f"frames: not kept (only failed turns keep theirs: the first {FAILURES_PER_NAME} of each failure name, in {FILE})")
        out.append("")
        log = _mock_log_for(run_dir, row)
        requests = []
        if log.exists():
            t0 = None
            for rec in mock_lines(log, {nonce}):
                if t0 is None and isinstance(rec.get("t_arrival"), (int, float)) and isinstance(row.get("pre_llm_s") or (row.get("anatomy") or {}).get("pre_llm_s"), (int, float)):
                    # the send on the mock's clock, from the turn's anatomy: arrival - pre_llm
                    t0 = rec["t_arrival"] - (row.get("anatomy") or {}).get("pre_llm_s")
                requests.append(_log_record(rec, t0))
                if len(requests) >= MOCK_REQUESTS_KEPT:
                    break
        source = log.name if log.exists() else "no mock log in the run dir"
    out.append(f"mock requests ({len(requests)}, from {source}; ms from the send):")
    for k, r in enumerate(requests, 1):
        out += _request_lines(k, r)
    if not requests:
        out.append("  (none: the mock saw no request for this nonce)")
    out.append("")
    out.append("verdict:")
    if entry is not None:
        out.append(f"  expected: {entry.get('want')}")
        out.append(f"  came:     {entry.get('came')}")
        v = entry.get("verdict") or {}
        out.append(f"  line in the reply:       {v.get('reply') or '-'}")
        out.append(f"  line the mock recorded:  {v.get('mock') or '-'}")
        if entry.get("error"):
            out.append(f"  error frame: {entry['error'].get('code')}: {entry['error'].get('message')}")
        if entry.get("conn_error"):
            out.append(f"  connection: {entry['conn_error']}")
    else:
        if row.get("expected") is not None:
            out.append(f"  expected {row.get('expected')} tool results, got {row.get('got')} (errors {row.get('errors')})")
        if row.get("error_code"):
            out.append(f"  error frame: {row['error_code']}")
    out.append(f"  source: {row.get('verdict_source') or '-'}")
    out.append("  failure: " + ("; ".join(row.get("failures") or ()) or "none (passed)"))
    return "\n".join(out) + "\n"
