"""--script FILE: loading JSON and JSONL reply lists, cycling, and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mock import ConfigError, load_script
from mock.script import Script, ScriptReply

ENTRIES = [
    {"text": "hi"},
    {"tool_calls": [{"name": "lookup", "arguments": {"key": "k"}}, {"name": "x", "arguments": '{"a": 1}'}, {"name": "y"}]},
    {"error": 503},
    {"error": {"status": 429, "message": "slow down"}},
]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


@pytest.mark.parametrize("fmt", ["json", "jsonl"])
def test_load_and_cycle(tmp_path: Path, fmt: str) -> None:
    text = json.dumps(ENTRIES) if fmt == "json" else "\n".join(json.dumps(e) for e in ENTRIES) + "\n"
    script = load_script(_write(tmp_path, f"s.{fmt}", text))
    assert script.source.endswith(f"s.{fmt}")
    assert script.replies == (
        ScriptReply("text", text="hi"),
        ScriptReply("tools", calls=(("lookup", '{"key": "k"}'), ("x", '{"a": 1}'), ("y", "{}"))),
        ScriptReply("error", status=503, message="scripted error"),
        ScriptReply("error", status=429, message="slow down"),
    )
    assert [script.next()[0] for _ in range(6)] == [0, 1, 2, 3, 0, 1]
    script.reset()
    assert script.next()[0] == 0


def test_jsonl_skips_blank_lines_and_json_may_be_indented(tmp_path: Path) -> None:
    assert len(load_script(_write(tmp_path, "a.jsonl", '\n{"text": "a"}\n\n  \n{"text": "b"}\n')).replies) == 2
    assert len(load_script(_write(tmp_path, "b.json", "\n  " + json.dumps(ENTRIES, indent=2))).replies) == 4


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("[]", "it holds no replies"),
        ("", "it holds no replies"),
        ('{"text": "a"}\n{"text": ', "not valid JSON or JSONL"),
        ('{"text": "a"}\n{"text": 5}\n', "line 2: text must be a string"),
        ('[{"text": "a"}, {"text": "b", "error": 500}]', "entry 1: an entry is an object with exactly one of"),
        ('[{"tool_calls": []}]', "entry 0: tool_calls must be a non-empty list"),
        ('[{"tool_calls": [{"arguments": {}}]}]', "tool_calls[0] needs a string name"),
        ('[{"tool_calls": [{"name": "a", "arguments": "{x"}]}]', "tool_calls[0].arguments is a string but not JSON"),
        ('[{"error": 418}]', "error needs a status among"),
        ('[{"error": {"message": "no status"}}]', "error needs a status among"),
        ('[{"sing": "la"}]', "unknown entry kind 'sing'"),
        ('["text"]', "an entry is an object"),
    ],
)
def test_bad_scripts_name_the_file_and_the_problem(tmp_path: Path, text: str, words: str) -> None:
    p = _write(tmp_path, "bad.jsonl", text)
    with pytest.raises(ConfigError) as info:
        load_script(p)
    assert words in str(info.value) and str(p) in str(info.value)


def test_unreadable_script(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_script(tmp_path / "nope.json")
    p = tmp_path / "bin.json"
    p.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError, match="pass an existing UTF-8 file"):
        load_script(p)


def test_empty_script_object_is_refused() -> None:
    with pytest.raises(ConfigError, match="holds no replies"):
        Script([], source="inline")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('[{"tool_calls": [{"name": ""}]}]', "tool_calls[0] needs a string name, not empty"),
        ('[{"tool_calls": [{"name": 5}]}]', "tool_calls[0] needs a string name"),
        ('[{"tool_calls": [{"name": "a", "arguments": 5}]}]', "tool_calls[0].arguments must be a JSON object (or a string holding one), not int"),
        ('[{"tool_calls": [{"name": "a", "arguments": "[1]"}]}]', "not list"),
        ('[{"tool_calls": [{"name": "a", "args": {}}]}]', "unknown keys ['args']"),
        ('[{"error": 500.0}]', "error needs a status among"),
        ('[{"error": true}]', "error needs a status among"),
        ('[{"error": {"status": 500.0}}]', "error needs a status among"),
        ('[{"error": {"status": 500, "message": 5}}]', "error.message must be a string"),
        ('[{"error": {"status": 500, "retry": 1}}]', "unknown keys ['retry']"),
        ("[" * 100_000 + "]" * 100_000, "its JSON nests too deeply"),
        ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "its JSON nests too deeply"),
    ],
)
def test_malformed_scripts_are_config_errors(tmp_path: Path, text: str, words: str) -> None:
    p = _write(tmp_path, "bad.json", text)
    with pytest.raises(ConfigError) as info:
        load_script(p)
    assert words in str(info.value) and str(p) in str(info.value)
