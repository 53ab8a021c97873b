"""The scenario commands are built from the registry and the flags their
settings declare: every flag reaches its field, every command has --help, and
bad input is exit 2 before anything starts (no run directory)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import click
import pytest

from harness.cli import commands as kcli
from harness.scenarios.options import flags_of
from harness.scenarios import REGISTRY

REPO = Path(__file__).resolve().parents[2]


def parsed(name: str, argv: list[str]):
    """The settings (and access) a scenario command builds from ``argv``,
    caught before its run starts."""
    got = {}

    async def capture(settings, access=None):
        got.update(settings=settings, access=access)
        raise SystemExit(0)

    sc = dataclasses.replace(REGISTRY[name], run=capture)
    cmd = kcli.scenario_command(sc)
    with pytest.raises(SystemExit):
        cmd.main(argv, prog_name=name, standalone_mode=False)
    return got["settings"], got["access"]


def test_every_scenario_is_a_command_with_help():
    for name, sc in REGISTRY.items():
        out = subprocess.run([sys.executable, "-m", "harness", name, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        for _, flag in flags_of(sc.settings):
            if flag.flag:
                assert flag.flag in out.stdout, (name, flag.flag)


def test_flags_reach_their_fields():
    s, a = parsed("stress", ["--conns", "3", "--inputs", "7", "--mix", "!batch2:1", "--no-dedup-probe", "--rate", "5", "--quiet", "--socket", "/x.sock", "--token", "t"])
    assert (s.conns, s.inputs, s.mix, s.dedup_probe, s.rate, s.quiet) == (3, 7, "!batch2:1", False, 5.0, True)
    assert str(a.socket) == "/x.sock" and a.token == "t"
    s, a = parsed("abtest", ["--n", "2,4", "--ab-tool-ms", "80", "--tool-ms", "120", "--no-expect-concurrency", "--socket", "/x"])
    # --ab-tool-ms is abtest's own; --tool-ms is the mock's, for a sandbox
    assert (s.ns, s.tool_ms, s.expect_concurrency, a.tool_ms) == ((2, 4), 80, False, 120)
    s, _ = parsed("batch", ["--n", "2", "--kinds", "batch, slowbatch", "--socket", "/x"])
    assert (s.ns, s.kinds) == ((2,), ("batch", "slowbatch"))
    s, a = parsed("cmp", ["refkernel", "refkernel --fault serial-tools", "--n", "3", "--mechanism", "userns"])
    assert (s.old, s.new, s.n, s.mechanism, a) == ("refkernel", "refkernel --fault serial-tools", 3, "userns", None)
    s, _ = parsed("hold", ["--conns", "5", "--probe", "2", "--socket", "/x"])
    assert (s.conns, s.probe) == (5, 2)


def test_defaults_are_the_settings_defaults():
    required = {"findmax": (["--slo", "p95<1s"], {"slos": ("p95<1s",)})}  # a search needs its service level
    for name, sc in REGISTRY.items():
        more, kw = required.get(name, ([], {}))
        argv = (["a", "b"] if not sc.access else ["--socket", "/x"]) + more
        s, _ = parsed(name, argv)
        fresh = sc.settings(**({"old": "a", "new": "b"} if not sc.access else {}), **kw)
        assert s == fresh, name


@pytest.mark.parametrize(
    "argv, words",
    [
        (["abtest", "--ab-tool-ms", "0", "--socket", "/x"], "--ab-tool-ms 0 is invalid"),
        (["batch", "--n", "2,x", "--socket", "/x"], "--n '2,x'"),
        (["stress", "--mix", "!nope:1", "--socket", "/x"], "unknown marker"),
        (["cmp", "refkernel", "refkernel", "--n", "1"], "--n 1 is invalid"),
    ],
)
def test_bad_flags_exit_2_before_anything_starts(tmp_path, argv, words):
    out = subprocess.run([sys.executable, "-m", "harness", *argv, "--out", str(tmp_path / "runs")], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert words in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_a_bad_catalog_with_socket_is_exit_2_naming_the_file(tmp_path):
    """`stress --socket S --tools bad.toml` used to surface the mock's
    ConfigError as an internal error (exit 4) with an empty run dir."""
    bad = tmp_path / "bad.toml"
    bad.write_text("[roles.fast]\nname = 5\n")
    out = subprocess.run(
        [sys.executable, "-m", "harness", "stress", "--socket", str(tmp_path / "k.sock"), "--tools", str(bad), "--out", str(tmp_path / "runs")],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert str(bad) in out.stderr and "--tools" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert not (tmp_path / "runs").exists()


def test_the_commands_keep_their_names():
    names = set(kcli.cli.list_commands(click.Context(kcli.cli)))
    assert {"stress", "batch", "abtest", "cmp", "hold", "report", "mock", "launch", "stop", "status", "kcli"} <= names


def test_every_contract_key_is_documented_and_in_the_help():
    """Issue 22 item 3: `sessions` was a contract key that neither docs/targets.md
    nor --contract's help named, so a kernel never declared it and was not held to it."""
    from harness.judge.contract import KEYS, Contract

    assert KEYS == tuple(f.name for f in dataclasses.fields(Contract))
    targets = (REPO / "docs" / "targets.md").read_text()
    section = targets.split("## The kernel contract", 1)[1].split("\n## ", 1)[0]
    for key in KEYS:
        assert f"\n| `{key}` |" in section, f"docs/targets.md's contract table has no row for {key}"
        assert f"\n{key} = " in section, f"docs/targets.md's [contract] example does not show {key}"
    for command in ("stress", "sessions", "launch", "cmp"):
        out = subprocess.run([sys.executable, "-m", "harness", command, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        text = " ".join(out.stdout.split())
        help_ = text.split("--contract", 1)[1].split("(docs/targets.md)", 1)[0]
        missing = [k for k in KEYS if f"{k}=" not in help_]
        assert missing == [], f"kstress {command} --help: --contract does not name {missing}"


def test_a_core_check_that_did_not_run_is_no_pass_and_yields_to_findings():
    """Exit 6 (docs/results.md): every check that ran passed but the core one
    could not run; a failed check (1) or threshold (99) is a finding and comes first."""
    from harness.results.rundir import Check
    from harness.results.runlist import verdict
    from harness.scenarios.runner import verdict_of

    ok, not_run, bad = Check("a", True), Check("core", False, "why", ran=False), Check("b", False)
    held, broke = {"thresholds": [{"passed": True}]}, {"thresholds": [{"passed": False}]}
    assert verdict_of([ok], held) == (True, 0)
    assert verdict_of([ok, not_run], held) == (False, 6)
    assert verdict_of([ok, not_run], broke) == (False, 99)
    assert verdict_of([bad, not_run], held) == (False, 1)
    assert not_run.to_json() == {"name": "core", "passed": False, "detail": "why", "ran": False} and "ran" not in ok.to_json()
    assert verdict({"status": "completed", "passed": False, "exit_code": 6}) == "INCOMPLETE (exit 6)"


def test_a_signal_wrapped_by_python_during_an_import_is_still_an_interrupt():
    """A Ctrl-C landing in a dataclass's __set_name__ while stress.py imports
    reaches the CLI as RuntimeError from Interrupt (CI: exit 4, "internal
    error"); it is exit 130 like any signal before a run."""
    from harness.cli.commands import _signal_inside
    from harness.cli.edge import Interrupt

    sig = Interrupt(2)
    try:
        try:
            raise sig
        except Interrupt as e:
            raise RuntimeError("Error calling __set_name__ on 'Field' instance") from e
    except RuntimeError as wrapped:
        assert _signal_inside(wrapped) is sig
    assert _signal_inside(ValueError("a bug")) is None
