"""Hardening, one test per finding of issue 9 not covered by the fault suite
(test_faults.py) or the bad-input table (test_bad_inputs.py). Each docstring
says how main behaved before."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from harness.cli.edge import Edge

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def kstress(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env or dict(os.environ), stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def stress_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("runs")
    r = kstress("stress", "--launch", "--conns", "2", "--inputs", "3", "--mix", "!batch2:1,text:1", "--quiet", "--out", str(out),
                env=dict(os.environ, TMPDIR=str(out)))
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def copy_run(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def test_report_recomputes_its_verdict_and_says_when_files_disagree(stress_run, tmp_path):
    """Before: after two turns were flipped to failed, the table showed 2 of 4
    passed while the header and the check still said "PASS — 4/4 passed"."""
    d = copy_run(stress_run, tmp_path / "run")
    rows = [json.loads(x) for x in (d / "turns.jsonl").read_text().splitlines()]
    for r in [x for x in rows if x["kind"] == "load"][:2]:
        r.update(passed=False, failures=["order"])
    (d / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = kstress("report", str(d))
    assert rep.returncode == 0, rep.stderr
    assert "# kstress stress — FAIL" in rep.stdout
    assert "FAIL every input passed its verdict — 4/6 passed" in rep.stdout
    assert "run.json recorded PASS (exit code 0); the raw files now say FAIL" in rep.stdout


def test_report_names_a_cut_line_and_a_missing_turns_file(stress_run, tmp_path):
    """Before: a truncated or garbage line was skipped silently, and a missing
    turns.jsonl fell back to the stored summary without a word."""
    d = copy_run(stress_run, tmp_path / "cut")
    text = (d / "turns.jsonl").read_text()
    (d / "turns.jsonl").write_text(text[: len(text) - 40])  # the last line cut mid-way, as a kill leaves it
    rep = kstress("report", str(d))
    assert rep.returncode == 0, rep.stderr
    n = len(text.splitlines())
    assert f"turns.jsonl line {n} is cut short" in rep.stdout
    d2 = copy_run(stress_run, tmp_path / "missing")
    (d2 / "turns.jsonl").unlink()
    rep = kstress("report", str(d2))
    assert rep.returncode == 0 and "turns.jsonl is missing: every figure below is the summary run.json stored" in rep.stdout


def test_the_token_is_in_no_report_and_on_no_command_line(stress_run, tmp_path):
    """Before: the auth token was written into report.md and run.json (inside
    the target argv), and sat on the kernel's command line for `ps`."""
    env = dict(os.environ, KSTRESS_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))
    up = kstress("launch", env=env)
    assert up.returncode == 0, up.stderr
    try:
        state = json.loads(Path((tmp_path / "home" / "current").read_text().strip()).read_text())
        token = state["token"]
        assert token and token not in up.stdout
        kernel = psutil.Process(state["pids"]["target"])
        assert token not in " ".join(kernel.cmdline())
        assert kernel.environ().get("REFKERNEL_TOKEN") == token  # it travels by the environment
        r = kstress("batch", "--n", "2", "--kinds", "batch", "--rounds", "1", "--quiet", "--out", str(tmp_path / "runs"), env=env)
        assert r.returncode == 0, r.stderr
        run = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
        assert token not in (run / "report.md").read_text() and token not in (run / "run.json").read_text()
    finally:
        down = kstress("stop", env=env)
    assert down.returncode == 0, down.stderr
    assert json.loads((Path(state["run_dir"]) / "state.json").read_text())["token"] is None  # the kept directory holds no live token


def _plant(home: Path, pid: int, started: float | None) -> Path:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    sandbox = home / "sb"
    sandbox.mkdir()
    state = {"status": "ready", "run_dir": str(sandbox), "socket": str(sandbox / "k.sock"), "supervisor_pid": pid}
    if started is not None:
        state["supervisor_started"] = started
    (sandbox / "state.json").write_text(json.dumps(state))
    (home / "current").write_text(str(sandbox / "state.json") + "\n")
    return sandbox


@pytest.mark.parametrize("identity", ["none recorded (planted)", "another start time (pid reused)"])
def test_stop_never_signals_a_process_that_is_not_the_supervisor(tmp_path, identity):
    """Before: a planted `current` pointer naming any pid as supervisor_pid made
    `kstress stop` SIGTERM that process and print "stopped: no orphans", exit 0."""
    victim = subprocess.Popen(["sleep", "60"])
    try:
        started = None if identity.startswith("none") else psutil.Process(victim.pid).create_time() - 100
        _plant(tmp_path / "home", victim.pid, started)
        r = kstress("stop", env=dict(os.environ, KSTRESS_HOME=str(tmp_path / "home")))
        assert victim.poll() is None, "the process was signalled"
        assert r.returncode == 5, (r.returncode, r.stderr)
        assert "no orphan check could run" in r.stderr and "stopped: no orphans" not in r.stdout
    finally:
        victim.kill()
        victim.wait()


def test_stop_after_the_supervisor_was_killed_says_it_could_not_check(tmp_path):
    """Before: after the supervisor was killed, `stop` said "no orphans" although
    no check could run."""
    env = dict(os.environ, KSTRESS_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path))
    assert kstress("launch", env=env).returncode == 0
    state = json.loads(Path((tmp_path / "home" / "current").read_text().strip()).read_text())
    sup = psutil.Process(state["supervisor_pid"])
    sup.kill()
    sup.wait(10)
    r = kstress("stop", env=env)
    assert r.returncode == 5, (r.returncode, r.stderr)
    assert "is not running" in r.stderr and "no orphan check could run" in r.stderr


@pytest.mark.parametrize("how", ["world-writable", "symlink", "someone else's"])
def test_a_state_home_that_is_not_yours_alone_is_refused(tmp_path, how):
    """Before: $KSTRESS_HOME (default /tmp/kstress-<uid>, a predictable name in a
    world-writable directory) was trusted blindly: neither owner nor mode checked."""
    home = tmp_path / "home"
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        home.symlink_to(tmp_path / "elsewhere")
    else:
        home.mkdir()
        home.chmod(0o777 if how == "world-writable" else 0o700)
        if how == "someone else's":
            os.chown(home, 65534, 65534)
    r = kstress("launch", env=dict(os.environ, KSTRESS_HOME=str(home), TMPDIR=str(tmp_path)))
    assert r.returncode == 2, r.stderr
    assert f"state home {home}" in r.stderr and "KSTRESS_HOME" in r.stderr
    assert not list(tmp_path.glob("kst-*"))


def test_a_planted_supervisor_log_symlink_is_not_followed(tmp_path):
    """Before: a planted supervisor.log symlink made a root launch create a file
    where the link pointed."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    target = tmp_path / "owned-by-root-now"
    (home / "supervisor.log").symlink_to(target)
    r = kstress("launch", env=dict(os.environ, KSTRESS_HOME=str(home), TMPDIR=str(tmp_path)))
    assert r.returncode == 2, r.stderr
    assert "supervisor.log" in r.stderr and not target.exists()


def test_a_signal_after_the_results_are_written_changes_nothing():
    """Before: a SIGINT just after run.json was written exited 130 while run.json
    said 0. Once the run is written, the edge ignores signals: the exit code is
    the run's."""
    edge = Edge()
    edge.phase = "done"
    edge._handler(signal.SIGINT, None)  # neither raises nor cancels anything
    assert edge.signals == 1

    async def ok() -> int:
        return 7

    assert Edge().run(ok) == 7
