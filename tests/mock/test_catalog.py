"""The tool catalog: rendering, shell safety, loading files, and bad files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mock import ConfigError, load_catalog
from mock.catalog import DEFAULT_CATALOG, ROLES, catalog_from_mapping
from mock.markers import build_plan


def test_default_catalog_is_the_reference_kernels_tools() -> None:
    names = {role: DEFAULT_CATALOG[role].name for role in ROLES}
    assert names == {
        "fast": "lookup",
        "slow": "cmd_run",
        "writer": "knowledge_create",
        "img": "img_describe",
        "ocr": "ocr",
        "resident": "resident_start",
        "notify": "notify",
    }
    unsafe = {r for r in ROLES if not DEFAULT_CATALOG[r].parallel_safe}
    assert unsafe == {"writer", "resident", "notify"}


@pytest.mark.parametrize("role", ROLES)
def test_every_role_renders_a_json_object_carrying_the_nonce(role: str) -> None:
    args = DEFAULT_CATALOG[role].render("n0nce", 3, 120)
    obj = json.loads(args)
    assert isinstance(obj, dict) and "n0nce" in args


def test_render_escapes_what_json_needs() -> None:
    # quotes, tabs and newlines in a template become JSON escapes, never broken JSON
    args = DEFAULT_CATALOG["writer"].render("nn", 1)
    assert '\\"nn\\"' in args and "\\n" in args
    assert json.loads(args) == {"title": "kst-nn-1", "content": 'note 1\nfor "nn"\n'}


def test_slow_command_is_shell_safe() -> None:
    cmd = json.loads(DEFAULT_CATALOG["slow"].render("Ab_9-x", 12, 1500))["command"]
    assert cmd == (
        "printf 'KST-S Ab_9-x 12 %s\\n' \"$(date +%s%N)\"; sleep 1.500; printf 'KST-E Ab_9-x 12 %s\\n' \"$(date +%s%N)\""
    )
    # a nonce can only be [A-Za-z0-9_-]: anything else never becomes the nonce,
    # so no shell metacharacter from a user message reaches the command
    plan = build_plan("!slowbatch1 #x;rm$(id)")
    assert re.fullmatch(r"h[0-9a-f]{12}", plan.nonce)
    assert ";rm" not in plan.calls[0].arguments and "$(id)" not in plan.calls[0].arguments


def test_expected_substrings_and_error_pattern() -> None:
    assert DEFAULT_CATALOG["fast"].expected_substrings("nn", 2) == ("nn/2",)
    assert DEFAULT_CATALOG.is_error("error: no model loaded")
    assert DEFAULT_CATALOG.is_error("  Error something")
    assert not DEFAULT_CATALOG.is_error("no error here")
    assert not DEFAULT_CATALOG.is_error("errors=0")


def test_load_toml_overrides_some_roles(tmp_path: Path) -> None:
    p = tmp_path / "k.toml"
    p.write_text(
        """
[roles.fast]
name = "grep_docs"
arguments = { pattern = "{nonce}:{i}" }
expect = ["{nonce}:{i}"]

[roles.writer]
name = "save"
arguments = '{"path": "notes/{nonce}.md"}'
parallel_safe = false
"""
    )
    cat = load_catalog(p)
    assert cat.source == str(p)
    assert cat["fast"].name == "grep_docs" and cat["slow"].name == "cmd_run"  # untouched roles keep the default
    plan = build_plan("!serialbatch1:10 #t", cat)
    assert [c.name for c in plan.calls] == ["cmd_run", "save"]
    assert json.loads(plan.calls[1].arguments) == {"path": "notes/t.md"}
    plan = build_plan("!batch2 #t", cat)
    assert [json.loads(c.arguments) for c in plan.calls] == [{"pattern": "t:0"}, {"pattern": "t:1"}]
    assert plan.calls[1].expect == ("t:1",)


def test_load_json_with_error_pattern(tmp_path: Path) -> None:
    p = tmp_path / "k.json"
    p.write_text(json.dumps({"error_pattern": "^FAIL", "roles": {"img": {"name": "vision", "expect_error": False}}}))
    cat = load_catalog(p)
    assert cat["img"].name == "vision" and not cat["img"].expect_error
    assert cat.is_error("FAIL x") and not cat.is_error("error: x")
    assert "vision" in cat.tool_names


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ([], "the top level must be a table/object"),
        ({"tools": {}}, "unknown keys ['tools']; allowed: roles, error_pattern"),
        ({"roles": {"telepathy": {}}}, "unknown role 'telepathy'"),
        ({"roles": {"fast": "lookup"}}, "roles.fast must be a table/object"),
        ({"roles": {"fast": {"nme": "x"}}}, "roles.fast has unknown keys ['nme']"),
        ({"roles": {"fast": {"name": "has space"}}}, "roles.fast.name 'has space' is not a valid tool name"),
        ({"roles": {"fast": {"name": ""}}}, "is not a valid tool name"),
        ({"roles": {"fast": {"arguments": "{not json"}}}, "roles.fast.arguments is not JSON"),
        ({"roles": {"fast": {"arguments": [1]}}}, "roles.fast.arguments must be a JSON object"),
        ({"roles": {"slow": {"arguments": {"cmd": "sleep 1"}}}}, "roles.slow.arguments must contain {sleep_cmd}"),
        ({"roles": {"fast": {"expect": "x"}}}, "roles.fast.expect must be a list of strings"),
        ({"error_pattern": 5}, "error_pattern must be a string"),
        ({"error_pattern": "(unclosed"}, "error_pattern '(unclosed' is not a valid regular expression"),
    ],
)
def test_bad_catalogs_name_the_problem(data, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        catalog_from_mapping(data, source="cat.json")
    assert words in str(info.value) and "cat.json" in str(info.value)


def test_bad_catalog_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"missing\.toml: cannot read it"):
        load_catalog(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[roles\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: not valid TOML"):
        load_catalog(bad)
    bad = tmp_path / "bad.json"
    bad.write_text("{,}")
    with pytest.raises(ConfigError, match=r"bad\.json: not valid JSON"):
        load_catalog(bad)
    binary = tmp_path / "bin.toml"
    binary.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_catalog(binary)


def test_a_catalog_must_define_every_role() -> None:
    from mock.catalog import Catalog

    with pytest.raises(ConfigError, match=r"roles \['ocr'\] are missing"):
        Catalog(roles={r: DEFAULT_CATALOG[r] for r in ROLES if r != "ocr"})


def test_slow_role_may_print_its_own_timestamps(tmp_path: Path) -> None:
    cat = catalog_from_mapping(
        {"roles": {"slow": {"name": "sh", "arguments": {"c": "echo KST-S {nonce} {i} 1; sleep {sleep_s}; echo KST-E {nonce} {i} 2"}}}}
    )
    plan = build_plan("!slowbatch1:250 #own", cat)
    assert json.loads(plan.calls[0].arguments) == {"c": "echo KST-S own 0 1; sleep 0.250; echo KST-E own 0 2"}


# Found by a review: each crashed load_catalog with a traceback (AttributeError,
# RecursionError) or was silently read the wrong way ("false" is truthy).
@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"roles": 5}, "roles is a number (5); it must be a table of role -> {name, arguments, ...}"),
        ({"roles": [{"fast": {}}]}, "roles is an array"),
        ({"roles": "fast"}, "roles is a string"),
        ({"roles": {"fast": ["lookup"]}}, "roles.fast must be a table/object of name, arguments, ..., not an array"),
        ({"roles": {"fast": {"name": 5}}}, "roles.fast.name 5 is not a valid tool name"),
        ({"roles": {"fast": {"parallel_safe": "false"}}}, "roles.fast.parallel_safe is a string ('false'); write true or false"),
        ({"roles": {"img": {"expect_error": 1}}}, "roles.img.expect_error is a number (1); write true or false"),
        ({"roles": {"fast": {"arguments": {"a": json.loads("[" * 40 + "]" * 40)}}}}, "roles.fast.arguments nests more than 32 levels deep"),
        ({"roles": {"fast": {"arguments": "[" * 100_000 + "]" * 100_000}}}, "roles.fast.arguments nests more than 32 levels deep"),
    ],
)
def test_malformed_catalogs_are_config_errors_naming_the_key(data, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        catalog_from_mapping(data, source="cat.toml")
    assert words in str(info.value) and "cat.toml" in str(info.value)


def test_catalog_files_nested_too_deep_are_config_errors(tmp_path: Path) -> None:
    deep_json = tmp_path / "deep.json"
    deep_json.write_text('{"roles": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(ConfigError, match=r"deep\.json: its JSON nests too deeply"):
        load_catalog(deep_json)
    deep_toml = tmp_path / "deep.toml"
    deep_toml.write_text("x = " + "[" * 5_000 + "]" * 5_000 + "\n")
    with pytest.raises(ConfigError, match=r"deep\.toml: its TOML nests too deeply"):
        load_catalog(deep_toml)
    roles_int = tmp_path / "five.toml"
    roles_int.write_text("roles = 5\n")
    with pytest.raises(ConfigError, match=r"five\.toml: roles is a number \(5\)"):
        load_catalog(roles_int)
