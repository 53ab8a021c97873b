"""``--script FILE``: a fixed, cycled list of replies instead of markers.

The file is JSON (a list) or JSONL (one entry per line). Entries::

    {"text": "hello"}
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "a"}}]}
    {"error": 500}            or  {"error": {"status": 429, "message": "slow down"}}

Every chat request takes the next entry, in file order, wrapping around.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError

ERROR_STATUSES = (400, 401, 403, 404, 408, 409, 429, 500, 502, 503, 504)


@dataclass(frozen=True)
class ScriptReply:
    kind: str  # text | tools | error
    text: str = ""
    calls: tuple[tuple[str, str], ...] = ()  # (name, arguments JSON)
    status: int = 0
    message: str = ""


class Script:
    def __init__(self, replies: list[ScriptReply], source: str) -> None:
        if not replies:
            raise ConfigError(f"script {source}: it holds no replies; add at least one entry")
        self.replies = tuple(replies)
        self.source = source
        self._cursor = itertools.cycle(range(len(self.replies)))

    def next(self) -> tuple[int, ScriptReply]:
        k = next(self._cursor)
        return k, self.replies[k]

    def reset(self) -> None:
        self._cursor = itertools.cycle(range(len(self.replies)))


def _entry(raw: Any, where: str) -> ScriptReply:
    if not isinstance(raw, dict) or len(raw) != 1:
        raise ConfigError(f"{where}: an entry is an object with exactly one of text, tool_calls, error")
    (key, value), = raw.items()
    if key == "text":
        if not isinstance(value, str):
            raise ConfigError(f"{where}: text must be a string")
        return ScriptReply("text", text=value)
    if key == "tool_calls":
        if not isinstance(value, list) or not value:
            raise ConfigError(f"{where}: tool_calls must be a non-empty list")
        calls = []
        for k, c in enumerate(value):
            if not isinstance(c, dict) or not isinstance(c.get("name"), str) or not c["name"]:
                raise ConfigError(f"{where}: tool_calls[{k}] needs a string name, not empty")
            unknown = sorted(set(c) - {"name", "arguments"})
            if unknown:
                raise ConfigError(f"{where}: tool_calls[{k}] has unknown keys {unknown}; allowed: name, arguments")
            args = c.get("arguments", {})
            if isinstance(args, str):
                try:
                    parsed = json.loads(args)
                except ValueError:
                    raise ConfigError(f"{where}: tool_calls[{k}].arguments is a string but not JSON") from None
            else:
                parsed, args = args, json.dumps(args)
            if not isinstance(parsed, dict):
                # every dialect carries a call's arguments as an object (Anthropic's input is one)
                raise ConfigError(f"{where}: tool_calls[{k}].arguments must be a JSON object (or a string holding one), not {type(parsed).__name__}")
            calls.append((c["name"], args))
        return ScriptReply("tools", calls=tuple(calls))
    if key == "error":
        if isinstance(value, int) and not isinstance(value, bool):
            value = {"status": value}
        status = value.get("status") if isinstance(value, dict) else None
        # type(): 500.0 and True compare equal to statuses, and are none
        if type(status) is not int or status not in ERROR_STATUSES:
            raise ConfigError(f"{where}: error needs a status among {ERROR_STATUSES}, a whole number")
        unknown = sorted(set(value) - {"status", "message"})
        if unknown:
            raise ConfigError(f"{where}: error has unknown keys {unknown}; allowed: status, message")
        message = value.get("message", "scripted error")
        if not isinstance(message, str):
            raise ConfigError(f"{where}: error.message must be a string")
        return ScriptReply("error", status=status, message=message)
    raise ConfigError(f"{where}: unknown entry kind {key!r}; use text, tool_calls or error")


def load_script(path: str | Path) -> Script:
    p = Path(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"script {p}: cannot read it ({exc}); pass an existing UTF-8 file to --script") from None
    entries: list[Any]
    stripped = text.lstrip()
    try:
        if stripped.startswith("["):
            entries = json.loads(text)
            where = [f"script {p} entry {k}" for k in range(len(entries))]
        else:
            lines = [(n, ln) for n, ln in enumerate(text.splitlines(), 1) if ln.strip()]
            entries = [json.loads(ln) for _, ln in lines]
            where = [f"script {p} line {n}" for n, _ in lines]
    except ValueError as exc:
        raise ConfigError(f"script {p}: not valid JSON or JSONL ({exc})") from None
    except RecursionError:
        raise ConfigError(f"script {p}: its JSON nests too deeply to read; an entry is a few objects deep") from None
    return Script([_entry(e, w) for e, w in zip(entries, where)], source=str(p))
