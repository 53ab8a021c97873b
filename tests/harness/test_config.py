"""Bad input gets a clear error naming the value, the rule and the fix."""

import json

import pytest

from harness.errors import UsageError
from harness.results.rundir import RunDir, load_run
from harness.scenarios.abtest import AbtestSettings
from harness.scenarios.stress import StressSettings, parse_mix
from harness.sandbox.target import TargetSpec, load_target, spec_from_command


def test_parse_mix_weights_and_errors():
    assert parse_mix("!batch4:3,!slowbatch2:1,text:1") == (("!batch4", 3), ("!slowbatch2", 1), ("text", 1))
    assert parse_mix("!slowbatch2:300:2") == (("!slowbatch2:300", 2),)
    assert parse_mix("!batch4") == (("!batch4", 1),)
    for bad, words in [("!nope4:1", "unknown marker"), ("batch4", "expected a marker"), ("!batch99", "out of range"), ("", "empty"), ("!batch4:0", "weight")]:
        with pytest.raises(UsageError, match=words):
            parse_mix(bad)


def test_settings_validate_each_field():
    with pytest.raises(UsageError, match="--conns 0"):
        StressSettings(conns=0)
    with pytest.raises(UsageError, match="over the"):
        StressSettings(conns=20000, inputs=100)
    with pytest.raises(UsageError, match="--n 65"):
        AbtestSettings(ns=(65,))
    # a median with an interval from two samples is not a number to defend
    with pytest.raises(UsageError, match="--rounds 2 is invalid: use 3 to 1000"):
        AbtestSettings(ns=(2,), rounds=2)
    assert AbtestSettings(ns=(2,), rounds=3).rounds == 3


def test_target_toml(tmp_path):
    exe = tmp_path / "k"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    f = tmp_path / "t.toml"
    f.write_text(
        '[target]\nbin = "./k"\nargv = ["{bin}", "serve", "--sock={socket}", "--llm", "{llm_url}"]\n'
        'env = { RUST_LOG = "info" }\nstop_signal = "SIGINT"\n[target.config]\nfile = "k.toml"\ntemplate = "url = \\"{llm_url}\\""\n'
    )
    spec = load_target(f)
    assert spec.bin == str(exe) and spec.check_binary() == exe
    argv = spec.render_argv({"bin": "B", "socket": "S", "llm_url": "U", "data_dir": "D", "token": "T", "run_dir": "R", "config": "C"})
    assert argv == ["B", "serve", "--sock=S", "--llm", "U"]
    assert spec.env["RUST_LOG"] == "info" and spec.stop_signal.name == "SIGINT"


def test_a_bare_bin_is_the_file_beside_the_target_file_else_a_command_on_path(tmp_path):
    # docs/targets.md: bin is relative to the target file; a bare name beside it was looked up on PATH
    # alone and reported as "does not exist" (issue 22 item 15)
    exe = tmp_path / "mykernel"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    f = tmp_path / "t.toml"
    f.write_text('[target]\nbin = "mykernel"\n')
    spec = load_target(f)
    assert spec.check_binary() == exe and spec.name == "mykernel"
    f.write_text('[target]\nbin = "true"\n')  # nothing of that name here: a command on PATH
    assert load_target(f).check_binary().name == "true"
    f.write_text('[target]\nbin = "nokernel"\n')
    with pytest.raises(UsageError, match=f"neither beside the target file, as {tmp_path / 'nokernel'}, nor on PATH"):
        load_target(f).check_binary()


@pytest.mark.parametrize(
    "body, words",
    [
        ("[target\nbin=1", "malformed TOML"),
        ('[target]\nbin = "/bin/true"\nargv = ["{bin}", "{sockett}"]', "unknown placeholder {sockett}"),
        ('[target]\nbin = "/bin/true"\nstop_signal = "SIGNOPE"', "not a signal name"),
        ('[target]\nbin = "/bin/true"\nfoo = 1', "unknown keys"),
        ('bin = "/bin/true"', "needs a [target] table"),
    ],
)
def test_bad_target_files(tmp_path, body, words):
    f = tmp_path / "t.toml"
    f.write_text(body)
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("{", r"\{").replace("}", r"\}")):
        load_target(f)


def test_binary_checks(tmp_path):
    with pytest.raises(UsageError, match="does not exist"):
        TargetSpec(bin=str(tmp_path / "missing")).check_binary()
    f = tmp_path / "plain"
    f.write_text("x")
    with pytest.raises(UsageError, match="not executable"):
        TargetSpec(bin=str(f)).check_binary()
    spec = spec_from_command("refkernel --fault serial-tools")
    assert spec.bin.endswith("refkernel") and spec.extra_args == ("--fault", "serial-tools")


def test_run_dirs_are_fresh_and_loader_refuses_unknown_schema(tmp_path):
    a, b = RunDir("stress", tmp_path), RunDir("stress", tmp_path)
    assert a.path != b.path
    a.turn({"x": 1})
    a.finish({"scenario": "stress"})
    doc, rows = load_run(a.path)
    assert doc["schema"] == "kstress.run/1" and rows == [{"x": 1}]
    b.finish({"scenario": "stress"})
    data = json.loads((b.path / "run.json").read_text())
    data["schema"] = "kstress.run/99"
    (b.path / "run.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="kstress.run/99"):
        load_run(b.path)


def test_scripts_read_as_programs_and_help_shows_the_real_default_mix():
    import subprocess
    import sys
    from pathlib import Path

    from harness.scenarios.stress import DEFAULT_MIX

    repo = Path(__file__).resolve().parents[2]
    for script, usage in (("stress.py", "stress.py [OPTIONS]"), ("cmp.py", "cmp.py [OPTIONS] OLD NEW"), ("kcli.py", "kcli.py [OPTIONS] COMMAND"), ("findmax.py", "findmax.py [OPTIONS]")):
        r = subprocess.run([sys.executable, str(repo / "scripts" / script), "--help"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0 and r.stdout.startswith(f"Usage: {usage}"), r.stdout[:200]
        if script == "stress.py":
            assert DEFAULT_MIX in "".join(r.stdout.split())  # click may wrap it anywhere


def test_scripts_before_make_venv_say_how_to_get_it_not_a_traceback(tmp_path):
    """A clone without .venv, under a python without kstress's dependencies
    (-S: no site-packages, as a bare system python3): `--help` was a
    traceback from `import click` (issue 22 item 16)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    shutil.copytree(repo / "scripts", tmp_path / "scripts")
    shutil.copy(repo / "pyproject.toml", tmp_path)
    (tmp_path / "harness").symlink_to(repo / "harness")  # what the scripts import once they get that far
    (tmp_path / "mock").symlink_to(repo / "mock")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KSTRESS_NO_REEXEC")}
    scripts = sorted(p.name for p in (tmp_path / "scripts").glob("*.py") if p.name != "_bootstrap.py")
    assert "stress.py" in scripts and len(scripts) >= 10
    for script in scripts:
        r = subprocess.run([sys.executable, "-S", str(tmp_path / "scripts" / script), "--help"], capture_output=True, text=True, timeout=60, env=env)
        assert r.returncode == 0 and "Traceback" not in r.stderr, (script, r.stderr[-1500:])
        assert r.stdout.startswith(f"Usage: {script} ") and "make venv" in r.stdout and "click" in r.stdout, (script, r.stdout)
    r = subprocess.run([sys.executable, "-S", str(tmp_path / "scripts" / "stress.py"), "--conns", "32"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    assert f"{tmp_path / '.venv'} does not exist yet" in r.stderr and "run `make venv`" in r.stderr
    # launch.sh falls back to the python3 on PATH: here one without site-packages
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "python3").write_text(f'#!/bin/sh\nexec {sys.executable} -S "$@"\n')
    (tmp_path / "bin" / "python3").chmod(0o755)
    env["PATH"] = f"{tmp_path / 'bin'}:/usr/bin:/bin"
    r = subprocess.run([str(tmp_path / "scripts" / "launch.sh"), "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 0 and r.stdout.startswith("Usage: launch.sh ") and "Traceback" not in r.stderr, r.stdout + r.stderr[-1500:]
    r = subprocess.run([str(tmp_path / "scripts" / "launch.sh"), "stop"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode == 2 and "run `make venv`" in r.stderr and "Traceback" not in r.stderr, r.stderr[-1500:]


def test_the_readme_names_the_state_home_and_its_default(monkeypatch):
    # where the pointer to the detached sandbox lives was only in docs/sandbox.md (issue 22 item 16)
    import os
    import re
    import tempfile
    from pathlib import Path

    from harness.sandbox.state import invoking_ids, state_home

    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text().split())
    assert re.search(r"`\$KSTRESS_HOME`, by default `/tmp/kstress-<uid>`, or `\$XDG_RUNTIME_DIR/kstress` without root", readme)
    monkeypatch.delenv("KSTRESS_HOME", raising=False)
    monkeypatch.delenv("TMPDIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)  # gettempdir() caches what TMPDIR said
    if os.geteuid() == 0:  # what the README says is the default is what the code takes
        assert state_home() == Path(f"/tmp/kstress-{invoking_ids()[0]}")


def test_an_empty_mix_is_an_error_not_the_default():
    from click.testing import CliRunner

    from harness.cli.commands import cli

    r = CliRunner().invoke(cli, ["stress", "--mix", "", "--socket", "/nonexistent.sock"])
    assert r.exit_code != 0 and isinstance(r.exception, UsageError) and "is empty" in str(r.exception)
