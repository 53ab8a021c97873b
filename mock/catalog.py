"""The tool catalog: which tool names and argument templates realise each marker.

A *role* is what a marker needs a tool to do (a fast read-only lookup, a slow
timestamped shell sleep, a non-parallel-safe write, ...). The catalog maps each
role to the tool name and argument template of one particular kernel. The
default catalog is the reference kernel's; a user with another kernel supplies
their own names in a TOML or JSON file (``--tools FILE``), see docs/catalog.md.

Argument templates are JSON objects. Placeholders inside *string values* are
replaced (``{nonce}``, ``{i}``, ``{sleep_ms}``, ``{sleep_s}``, ``{sleep_cmd}``);
the object is then serialised with ``json.dumps``, so a template can never
produce invalid JSON, and only the nonce ([A-Za-z0-9_-]), digits and fixed words
ever reach a shell.
"""

from __future__ import annotations

import functools
import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, Mapping

from .errors import ConfigError

ROLES = ("fast", "slow", "writer", "img", "ocr", "resident", "notify")

# printf, not echo: the `\n` is a JSON escape in the arguments, which gives the
# stream splitter a place to cut an escape in half.
SLEEP_CMD = (
    "printf 'KST-S {nonce} {i} %s\\n' \"$(date +%s%N)\"; "
    "sleep {sleep_s}; "
    "printf 'KST-E {nonce} {i} %s\\n' \"$(date +%s%N)\""
)

DEFAULT_ERROR_PATTERN = r"(?i)^\s*error\b"


@dataclass(frozen=True)
class ToolRole:
    """How one role is realised by a kernel's tool."""

    role: str
    name: str
    arguments: Mapping[str, Any]
    parallel_safe: bool
    # Substrings (with placeholders) a successful result must contain.
    expect: tuple[str, ...] = ()
    # The result is expected to be a tool error (e.g. img/ocr with no model).
    expect_error: bool = False

    def render(self, nonce: str, i: int, sleep_ms: int = 0) -> str:
        """The call's arguments: a JSON object as a string."""
        if _JSON_SAFE.fullmatch(nonce):
            return self.render_safe(nonce, i, sleep_ms)
        return self.render_slow(nonce, i, sleep_ms)

    def render_safe(self, nonce: str, i: int, sleep_ms: int = 0) -> str:
        """render() for a nonce known to match [A-Za-z0-9_-]+ (every nonce
        markers.nonce_for gives). Byte-identical to render_slow: the
        placeholders are plain text inside JSON strings, and no value put in
        their place needs JSON escaping."""
        template = self._json_template
        if template is None:
            return self.render_slow(nonce, i, sleep_ms)
        out = template.replace("{nonce}", nonce).replace("{i}", str(i))
        if "{sleep_" in out:
            out = out.replace("{sleep_ms}", str(sleep_ms)).replace("{sleep_s}", f"{sleep_ms / 1000:.3f}")
        return out

    def render_slow(self, nonce: str, i: int, sleep_ms: int = 0) -> str:
        """Substitute inside the string values, then serialise: the definition."""
        values = {
            "{sleep_cmd}": SLEEP_CMD,  # expanded first: it holds placeholders itself
            "{nonce}": nonce,
            "{i}": str(i),
            "{sleep_ms}": str(sleep_ms),
            "{sleep_s}": f"{sleep_ms / 1000:.3f}",
        }
        return json.dumps(_substitute(dict(self.arguments), values), ensure_ascii=False)

    @functools.cached_property
    def _json_template(self) -> str | None:
        """The arguments serialised once with {sleep_cmd} expanded and the other
        placeholders left in; None when text replacement could differ from
        substitution (a placeholder in a key, where the slow path leaves it)."""
        if _has_brace_key(self.arguments):
            return None
        return json.dumps(_substitute(dict(self.arguments), {"{sleep_cmd}": SLEEP_CMD}), ensure_ascii=False)

    def expected_substrings(self, nonce: str, i: int) -> tuple[str, ...]:
        if not self.expect:
            return ()
        si = str(i)
        return tuple([s.replace("{nonce}", nonce).replace("{i}", si) for s in self.expect])


_JSON_SAFE = re.compile(r"[A-Za-z0-9_-]+")


def _has_brace_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any("{" in k or _has_brace_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_brace_key(v) for v in value)
    return False


def _substitute(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        for key, repl in values.items():
            value = value.replace(key, repl)
        return value
    if isinstance(value, list):
        return [_substitute(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, values) for k, v in value.items()}
    return value


@dataclass(frozen=True)
class Catalog:
    roles: Mapping[str, ToolRole]
    error_pattern: str = DEFAULT_ERROR_PATTERN
    source: str = "default"
    _error_re: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        missing = [r for r in ROLES if r not in self.roles]
        if missing:
            raise ConfigError(
                f"tool catalog {self.source}: roles {missing} are missing; "
                f"a catalog must define every role of {list(ROLES)} (see docs/catalog.md)"
            )
        try:
            object.__setattr__(self, "_error_re", re.compile(self.error_pattern))
        except re.error as exc:
            raise ConfigError(
                f"tool catalog {self.source}: error_pattern {self.error_pattern!r} is not a "
                f"valid regular expression ({exc}); fix the pattern"
            ) from None
        object.__setattr__(self, "roles", MappingProxyType(dict(self.roles)))

    def __reduce__(self) -> tuple[Any, ...]:
        # a fleet's workers get the run's catalog pickled (harness/fleet): a
        # read-only view of the roles does not pickle, the dict behind it does
        return (Catalog, (dict(self.roles), self.error_pattern, self.source))

    def __getitem__(self, role: str) -> ToolRole:
        return self.roles[role]

    def is_error(self, content: str) -> bool:
        return bool(self._error_re.search(content))

    @property
    def tool_names(self) -> frozenset[str]:
        return frozenset(r.name for r in self.roles.values())


DEFAULT_CATALOG = Catalog(
    roles={
        "fast": ToolRole(
            "fast",
            "lookup",
            {"key": "{nonce}/{i}", "query": 'item {i} of "{nonce}"\tbatch'},
            parallel_safe=True,
            expect=("{nonce}/{i}",),
        ),
        "slow": ToolRole(
            "slow",
            "cmd_run",
            {"command": "{sleep_cmd}"},
            parallel_safe=True,
            # The slow role's success check is built in: its own KST-S and KST-E lines.
        ),
        "writer": ToolRole(
            "writer",
            "knowledge_create",
            {"title": "kst-{nonce}-{i}", "content": "note {i}\nfor \"{nonce}\"\n"},
            parallel_safe=False,
            expect=("kst-{nonce}-{i}",),
        ),
        "img": ToolRole(
            "img", "img_describe", {"path": "kst-{nonce}.png"}, parallel_safe=True, expect_error=True
        ),
        "ocr": ToolRole("ocr", "ocr", {"path": "kst-{nonce}.png"}, parallel_safe=True, expect_error=True),
        "resident": ToolRole(
            "resident",
            "resident_start",
            {"name": "kst-{nonce}", "argv": ["sleep", "600"]},
            parallel_safe=False,
            expect=("kst-{nonce}",),
        ),
        "notify": ToolRole(
            "notify", "notify", {"text": "kst notify {nonce}"}, parallel_safe=False, expect=()
        ),
    }
)


def load_catalog(path: str | Path) -> Catalog:
    """Load a catalog file (.toml or .json); roles it omits keep the default."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"tool catalog {p}: cannot read it ({exc.strerror}); pass an existing file to --tools") from None
    kind = "JSON" if p.suffix == ".json" else "TOML"
    try:
        if p.suffix == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode())
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"tool catalog {p}: not valid {kind} ({exc}); fix the syntax") from None
    except RecursionError:
        raise ConfigError(f"tool catalog {p}: its {kind} nests too deeply to read; a catalog is a few tables deep") from None
    return catalog_from_mapping(data, source=str(p))


MAX_DEPTH = 32  # levels of arrays and objects in a role's arguments


def _depth(value: Any) -> int:
    """Nesting levels of arrays/objects, without recursion (the value may be deep)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            deepest = max(deepest, d)
            if d > MAX_DEPTH:
                return d
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def _kind(value: Any) -> str:
    return {dict: "a table", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)


def catalog_from_mapping(data: Any, source: str = "<mapping>") -> Catalog:
    if not isinstance(data, dict):
        raise ConfigError(f"tool catalog {source}: the top level must be a table/object")
    unknown = set(data) - {"roles", "error_pattern"}
    if unknown:
        raise ConfigError(
            f"tool catalog {source}: unknown keys {sorted(unknown)}; allowed: roles, error_pattern"
        )
    roles = dict(DEFAULT_CATALOG.roles)
    given = data.get("roles", {})
    if not isinstance(given, dict):
        raise ConfigError(
            f"tool catalog {source}: roles is {_kind(given)} ({given!r:.40}); it must be a table of role -> "
            "{name, arguments, ...}, e.g. [roles.fast] name = \"lookup\" (see docs/catalog.md)"
        )
    for role, spec in given.items():
        if role not in ROLES:
            raise ConfigError(f"tool catalog {source}: unknown role {role!r}; roles are {list(ROLES)}")
        if not isinstance(spec, dict):
            raise ConfigError(f"tool catalog {source}: roles.{role} must be a table/object of name, arguments, ..., not {_kind(spec)}")
        base = DEFAULT_CATALOG.roles[role]
        extra = set(spec) - {"name", "arguments", "parallel_safe", "expect", "expect_error"}
        if extra:
            raise ConfigError(
                f"tool catalog {source}: roles.{role} has unknown keys {sorted(extra)}; "
                "allowed: name, arguments, parallel_safe, expect, expect_error"
            )
        name = spec.get("name", base.name)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ConfigError(
                f"tool catalog {source}: roles.{role}.name {name!r} is not a valid tool name "
                "(1-64 of A-Z a-z 0-9 _ . -)"
            )
        args = spec.get("arguments", base.arguments)
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError as exc:
                raise ConfigError(f"tool catalog {source}: roles.{role}.arguments is not JSON ({exc})") from None
            except RecursionError:
                raise ConfigError(f"tool catalog {source}: roles.{role}.arguments nests more than {MAX_DEPTH} levels deep; flatten it") from None
        if not isinstance(args, dict):
            raise ConfigError(f"tool catalog {source}: roles.{role}.arguments must be a JSON object, not {_kind(args)}")
        if _depth(args) > MAX_DEPTH:
            raise ConfigError(f"tool catalog {source}: roles.{role}.arguments nests more than {MAX_DEPTH} levels deep; flatten it")
        if role == "slow" and "{sleep_cmd}" not in json.dumps(args) and "KST-S" not in json.dumps(args):
            raise ConfigError(
                f"tool catalog {source}: roles.slow.arguments must contain {{sleep_cmd}} (or print the "
                "KST-S/KST-E lines itself): the harness measures concurrency from them"
            )
        expect = spec.get("expect", list(base.expect))
        if not isinstance(expect, list) or not all(isinstance(s, str) for s in expect):
            raise ConfigError(f"tool catalog {source}: roles.{role}.expect must be a list of strings")
        flags = {}
        for key in ("parallel_safe", "expect_error"):
            flag = spec.get(key, getattr(base, key))
            if not isinstance(flag, bool):
                # "false" is a true value: a string here would silently mean the opposite
                raise ConfigError(f"tool catalog {source}: roles.{role}.{key} is {_kind(flag)} ({flag!r:.40}); write true or false")
            flags[key] = flag
        roles[role] = ToolRole(role=role, name=name, arguments=args, expect=tuple(expect), **flags)
    pattern = data.get("error_pattern", DEFAULT_ERROR_PATTERN)
    if not isinstance(pattern, str):
        raise ConfigError(f"tool catalog {source}: error_pattern must be a string")
    return Catalog(roles=roles, error_pattern=pattern, source=source)
