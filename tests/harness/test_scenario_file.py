"""Scenario files: validated whole before anything starts (every error at
once, each with its key path, exit 2, no run dir), turned into the scenario
command's own argv (switches, repeatables, tables, positional arguments,
paths relative to the file), and every file in examples/ validates."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from harness.cli.commands import cli, scenario_command
from harness.errors import UsageError
from harness.scenarios import REGISTRY
from harness.cli.scenfile import load

pytestmark = pytest.mark.fast
REPO = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "s.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def argv_of(tmp_path: Path, text: str) -> list[str]:
    return list(load(write(tmp_path, text), REGISTRY, scenario_command).argv)


def test_keys_are_flags_switches_repeatables_tables_and_args(tmp_path):
    argv = argv_of(tmp_path, """
scenario = "stress"
launch = true
conns = 4
rate = 2.5
mix = "!batch4:1"
threshold = ["p95<2s", "pass_rate>=0.99"]
no-dedup-probe = true
quiet = false
duration = 30
target = "kernels/k.toml"
args = ["--queue", "8"]
[contract]
batch = "parallel"
dedup = false
""")
    assert argv[:2] == ["--launch", "--conns"] and argv[2] == "4"
    assert ["--rate", "2.5"] == argv[3:5] and ["--threshold", "p95<2s", "--threshold", "pass_rate>=0.99"] == argv[7:11]
    assert "--quiet" not in argv and "--no-dedup-probe" in argv and ["--duration", "30"] == argv[12:14]
    assert argv[argv.index("--target") + 1] == str(tmp_path / "kernels" / "k.toml")  # beside the file, not the cwd
    assert argv[argv.index("--contract") + 1] == "batch=parallel" and "dedup=false" in argv
    assert argv[-3:] == ["--", "--queue", "8"]


def test_positional_arguments_by_name(tmp_path):
    argv = argv_of(tmp_path, 'scenario = "cmp"\nold = "refkernel"\nnew = "refkernel --fault serial-tools"\nrounds = 3\n')
    assert argv == ["--rounds", "3", "refkernel", "refkernel --fault serial-tools"]
    with pytest.raises(UsageError, match="new: `kstress cmp` needs it"):
        argv_of(tmp_path, 'scenario = "cmp"\nold = "refkernel"\n')


def test_every_error_at_once_with_its_key_path(tmp_path):
    with pytest.raises(UsageError) as e:
        argv_of(tmp_path, """
scenario = "stress"
conz = 4
inputs = "x"
rate = true
mix = ["a", "b"]
threshold = ["p95<1s", true]
no-dedup-probe = 1
arrival = "burst"
args = "--queue 8"
[contract]
batch = ["x"]
""")
    msg = str(e.value)
    for words in ("9 problems, nothing was started", "conz: not a flag of `kstress stress`; did you mean 'conns'?",
                  "inputs: expected an integer, got 'x'", "rate: expected a number, got True", "mix: --mix is not repeatable",
                  "threshold[1]: expected a string, got True", "no-dedup-probe: a switch takes true or false, got 1",
                  "arrival: expected one of 'constant', 'poisson', got 'burst'", "args: expected a list of strings", "contract.batch: expected a string"):
        assert words in msg, (words, msg)


def test_the_scenario_itself_and_non_scenario_files(tmp_path):
    with pytest.raises(UsageError, match="unknown scenario 'strees'; did you mean 'stress'"):
        argv_of(tmp_path, 'scenario = "strees"\n')
    with pytest.raises(UsageError, match="scenario: missing"):
        argv_of(tmp_path, 'conns = 4\n')
    with pytest.raises(UsageError, match="this is a target file"):
        load(REPO / "examples" / "pydantic-ai.toml", REGISTRY, scenario_command)
    with pytest.raises(UsageError, match="not valid TOML"):
        argv_of(tmp_path, 'scenario = "stress\n')


def test_run_exits_2_and_writes_no_run_dir_on_a_bad_file_or_bad_settings(tmp_path):
    out = tmp_path / "runs"
    for text, words in [(f'scenario = "stress"\nconz = 4\nout = "{out}"\n', "did you mean 'conns'"),
                        (f'scenario = "stress"\nconns = 0\nout = "{out}"\n', "--conns 0 is invalid"),
                        (f'scenario = "stress"\nwarmup = "1s"\nout = "{out}"\n', "needs a timed run")]:
        r = CliRunner().invoke(cli, ["run", "--check", str(write(tmp_path, text))])
        assert r.exit_code != 0 and isinstance(r.exception, UsageError) and words in str(r.exception), (text, r.output, r.exception)
    assert not out.exists()


def test_check_prints_the_same_command_line(tmp_path):
    r = CliRunner().invoke(cli, ["run", "--check", str(write(tmp_path, 'scenario = "stress"\nlaunch = true\nconns = 3\nstage = ["5s:3"]\n'))])
    assert r.exit_code == 0, r.output
    assert r.output.strip() == "kstress stress --launch --conns 3 --stage 5s:3"


def _is_target_file(p: Path) -> bool:
    """examples/ holds target files too (the framework examples'): a [target] table, no scenario."""
    return any(line.strip() == "[target]" for line in p.read_text().splitlines())


@pytest.mark.parametrize("path", sorted(p for p in (REPO / "examples").glob("*.toml") if not _is_target_file(p)), ids=lambda p: p.name)
def test_every_example_validates(path):
    sf = load(path, REGISTRY, scenario_command)
    assert sf.scenario == path.stem and path.read_text().startswith("# ")  # one per scenario, a header saying what it shows
    r = CliRunner().invoke(cli, ["run", "--check", str(path)])
    assert r.exit_code == 0 and r.output.startswith(f"kstress {sf.scenario}"), r.output


def test_there_is_an_example_for_every_scenario():
    assert {p.stem for p in (REPO / "examples").glob("*.toml")} >= set(REGISTRY)
