"""`kstress run FILE.toml` reproduces the same run as its flags: the same
settings in run.json, both pass, and the file's path and sha256 are recorded;
scripts/run.py is the same command."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def run_dir(r) -> Path:
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def test_a_file_and_its_flags_make_the_same_run(cli, tmp_path):
    f = tmp_path / "small.toml"
    f.write_text(f"""# a small stress run
scenario = "stress"
launch = true
conns = 3
inputs = 4
mix = "!batch4:1,text:1"
threshold = ["p95<30s"]
out = "{cli.out}"
args = ["--queue", "64"]
[contract]
batch = "whole-batch"
""")
    check = cli.run("run", "--check", str(f))
    assert check.returncode == 0, check.stderr
    line = check.stdout.strip()
    assert line.startswith("kstress stress --launch --conns 3")
    by_file = cli.run("run", str(f))
    assert by_file.returncode == 0, by_file.stdout[-2000:] + by_file.stderr[-2000:]
    flags = cli.run("stress", "--launch", "--conns", "3", "--inputs", "4", "--mix", "!batch4:1,text:1", "--threshold", "p95<30s",
                    "--out", str(cli.out), "--contract", "batch=whole-batch", "--", "--queue", "64")
    assert flags.returncode == 0, flags.stdout[-2000:] + flags.stderr[-2000:]
    a, b = (json.loads((run_dir(r) / "run.json").read_text()) for r in (by_file, flags))
    assert a["settings"] == b["settings"]
    assert [t["argv"][-2:] for t in a["meta"]["targets"]] == [["--queue", "64"]] == [t["argv"][-2:] for t in b["meta"]["targets"]]
    assert a["meta"]["source"] == {"scenario_file": str(f.resolve()), "scenario_file_sha256": hashlib.sha256(f.read_bytes()).hexdigest()}
    assert "source" not in b["meta"]
    assert f"scenario file `{f.resolve()}`" in (run_dir(by_file) / "report.md").read_text()
    # the script is the same command
    s = cli.run(str(f), "--check", script="run.py")
    assert s.returncode == 0 and s.stdout.strip() == line


def test_a_bad_file_starts_nothing(cli, tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text(f'scenario = "stress"\nlaunch = true\nconz = 3\ninputs = "four"\nout = "{cli.out}"\n')
    r = cli.run("run", str(f))
    assert r.returncode == 2 and "2 problems, nothing was started" in r.stderr and "did you mean 'conns'" in r.stderr
    assert not cli.out.exists()


def test_an_example_file_reproduces_its_flags(cli):
    import shlex

    example = Path(__file__).resolve().parents[2] / "examples" / "batch.toml"
    check = cli.run("run", "--check", str(example))
    assert check.returncode == 0, check.stderr
    argv = shlex.split(check.stdout.strip())[1:]  # without the leading `kstress`
    # the example writes to runs/ of the cwd; run both into the test's own --out via the flags' form
    flags = cli.run(*argv, "--out", str(cli.out / "flags"), timeout=300)
    f = cli.out / "file.toml"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(example.read_text() + f'\nout = "{cli.out / "file"}"\n')
    by_file = cli.run("run", str(f), timeout=300)
    assert flags.returncode == 0 and by_file.returncode == 0, flags.stderr[-2000:] + by_file.stderr[-2000:]
    a, b = (json.loads((run_dir(r) / "run.json").read_text()) for r in (by_file, flags))
    a["settings"].pop("out"), b["settings"].pop("out")
    assert a["settings"] == b["settings"] and a["summary"]["attempted"] == b["summary"]["attempted"] > 0
