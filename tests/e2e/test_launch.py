"""launch.sh / kcli / status / stop as users type them; bad input; leaks."""

from __future__ import annotations

import json
import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from e2ehelpers import boot_clock, deaf_kernel, handles_sigterm, namespace_gone
from waiting import wait_until as wait_for

pytestmark = pytest.mark.slow


def test_launch_kcli_status_stop(cli):
    r = cli.launch_sh()
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    assert Path(lines["socket"]).exists() and Path(lines["state"]).exists()
    st = cli.state()
    for key in ("socket", "llm_url", "namespace", "token", "supervisor_pid", "pids", "argv"):
        assert st[key], key
    r = cli.run("send", "!slowbatch4", script="kcli.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert '"type": "response"' in r.stdout and r.stdout.rstrip().endswith("verdict: ok")
    assert "expected=4 got=4 ids=ok args=ok order=ok errors=0" in r.stdout
    r = cli.launch_sh("status")
    assert r.returncode == 0 and "kernel:" in r.stdout and "healthy" in r.stdout and "mock:" in r.stdout
    again = cli.launch_sh()
    assert again.returncode == 2 and "already running" in again.stderr
    r = cli.run("--conns", "4", "--inputs", "2", "--out", str(cli.out), "--quiet", script="stress.py")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.rstrip().splitlines()[-1].startswith("run: ")
    stopped = boot_clock()
    r = cli.launch_sh("stop")
    assert r.returncode == 0 and "no orphans" in r.stdout
    assert not (cli.home / "current").exists()
    assert wait_for(lambda: namespace_gone(st["namespace"], st["net_inode"], stopped), 5, "namespace removal")
    assert not Path(st["socket"]).exists() and not Path(st["mock_socket"]).exists()
    assert Path(st["run_dir"], "logs", "target.err").exists()


def test_stop_names_orphans_of_a_leaky_kernel(cli):
    assert cli.launch_sh("--", "--fault", "leak-children").returncode == 0
    st = cli.state()
    r = cli.run("send", "!resident", script="kcli.py")
    assert r.returncode == 0, r.stdout
    stopped = boot_clock()
    r = cli.launch_sh("stop")
    assert r.returncode == 1
    assert "orphan: pid" in r.stdout and "sleep 600" in r.stdout and "orphan process" in r.stderr
    # the sandbox still removed them
    assert wait_for(lambda: namespace_gone(st["namespace"], st["net_inode"], stopped), 5, "namespace removal")


def test_no_running_sandbox(cli):
    for script in ("stress.py", "kcli.py"):
        args = ("send", "!batch2") if script == "kcli.py" else ("--out", str(cli.out))
        r = cli.run(*args, script=script)
        assert r.returncode == 2
        assert "no running sandbox" in r.stderr and "run scripts/launch.sh first, or pass --launch" in r.stderr
    # bad input before any turn: the message, and no empty FAIL report in a run dir
    assert "run:" not in r.stdout
    assert not any(cli.out.glob("stress-*"))


def test_a_mock_dead_before_the_run_is_named_so_with_its_stderr(cli):
    """Before: "the mock LLM of the sandbox died during the run", no stderr, and a FAIL run dir."""
    assert cli.launch_sh().returncode == 0
    st = cli.state()
    os.kill(st["pids"]["mock"], signal.SIGKILL)
    assert wait_for(lambda: cli.state()["status"] == "mock_died", 10, "the supervisor to see the mock die")
    r = cli.run("--conns", "1", "--inputs", "1", "--out", str(cli.out), "--quiet", script="stress.py")
    assert r.returncode == 5, r.stdout + r.stderr
    assert "the mock LLM of the sandbox died before this run started (killed by SIGKILL" in r.stderr, r.stderr
    assert "its stderr:" in r.stderr and "kstress stop --state" in r.stderr and "during the run" not in r.stderr
    assert not any(cli.out.glob("stress-*"))  # nothing ran: no run dir
    assert cli.launch_sh("stop").returncode == 0


def test_supervisor_killed_leaves_nothing(cli):
    assert cli.launch_sh().returncode == 0
    st = cli.state()
    pids = [st["supervisor_pid"], *st["pids"].values()]
    killed = boot_clock()
    os.kill(st["supervisor_pid"], signal.SIGKILL)

    def all_gone():
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        return not alive and namespace_gone(st["namespace"], st["net_inode"], killed)

    wait_for(all_gone, 2.0, "the guardian to clean up after the supervisor's death")
    locks = list(Path("/run/kstress").glob(f"{st['namespace']}*")) if st["namespace"] else []
    assert not locks
    # the stale pointer is not mistaken for a running sandbox
    r = cli.run("send", "!batch2", script="kcli.py")
    assert r.returncode == 2 and "no running sandbox" in r.stderr


def _exe(path: Path, body: str) -> Path:
    path.write_text("#!/bin/sh\n" + textwrap.dedent(body))
    path.chmod(0o755)
    return path


def test_bad_targets_get_clear_errors(cli, tmp_path):
    r = cli.launch_sh("--bin", str(tmp_path / "missing"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    dies = _exe(tmp_path / "dies", "echo 'boom: no config' >&2\nexit 7\n")
    r = cli.launch_sh("--bin", str(dies))
    assert r.returncode == 3 and "exited at once with code 7" in r.stderr and "boom: no config" in r.stderr
    silent = _exe(tmp_path / "silent", "exec sleep 600\n")
    target = tmp_path / "silent.toml"
    target.write_text(f'[target]\nbin = "{silent}"\nstart_timeout_s = 1\n')
    r = cli.launch_sh("--target", str(target))
    assert r.returncode == 3 and "did not become ready within 1s" in r.stderr and "kernel.sock" in r.stderr
    bad = tmp_path / "bad.toml"
    bad.write_text("[target\n")
    r = cli.launch_sh("--target", str(bad))
    assert r.returncode == 2 and "malformed TOML" in r.stderr
    bad.write_text('[target]\nbin = "/bin/true"\nargv = ["{bin}", "{sockt}"]\n')
    r = cli.launch_sh("--target", str(bad))
    assert r.returncode == 2 and "unknown placeholder {sockt}" in r.stderr
    long_tmp = tmp_path / ("d" * 90)
    long_tmp.mkdir()
    cli.env["TMPDIR"] = str(long_tmp)
    r = cli.launch_sh()
    assert r.returncode == 2 and "107-byte limit" in r.stderr
    assert not (cli.home / "current").exists()


def test_rootless_launch_as_nobody(unpriv):
    """An unprivileged user, no sudo: user+net namespace, same commands."""
    work = unpriv.workdir()
    home = work / "home"
    bin_ = work / "refkernel"
    bin_.write_text(f"#!{unpriv.python}\nfrom refkernel.__main__ import main\nmain()\n")
    bin_.chmod(0o755)
    os.chown(bin_, unpriv.uid, unpriv.gid)
    env = unpriv.env(work)
    env["KSTRESS_HOME"] = str(home)
    env["TMPDIR"] = str(work)

    def run(*args, timeout=120):
        import subprocess

        return subprocess.run(unpriv.argv(["-m", "harness", *args]), env=env, cwd=work, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    r = run("launch", "--bin", str(bin_))
    try:
        assert r.returncode == 0, r.stderr
        assert "(userns)" in r.stdout
        r = run("kcli", "send", "!slowbatch4")
        assert r.returncode == 0 and r.stdout.rstrip().endswith("verdict: ok"), r.stdout + r.stderr
        r = run("stress", "--conns", "4", "--inputs", "2", "--out", str(work / "runs"), "--quiet")
        assert r.returncode == 0, r.stdout + r.stderr
    finally:
        r = run("stop")
    assert r.returncode == 0 and "no orphans" in r.stdout, r.stdout + r.stderr


def test_sudo_launch_belongs_to_the_invoking_user(unpriv):
    """`sudo launch.sh` by a user, then that user's commands without sudo:
    the kernel and mock run as the user, the socket and state are theirs."""
    import subprocess

    work = unpriv.workdir()
    bin_ = work / "refkernel"
    bin_.write_text(f"#!{unpriv.python}\nfrom refkernel.__main__ import main\nmain()\n")
    bin_.chmod(0o755)
    env = unpriv.env(work)
    env.update(KSTRESS_HOME=str(work / "home"), TMPDIR=str(work), SUDO_UID=str(unpriv.uid), SUDO_GID=str(unpriv.gid))

    def as_root(*args):
        return subprocess.run([unpriv.python, "-m", "harness", *args], env=env, cwd=work, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    def as_user(*args):
        return subprocess.run(unpriv.argv(["-m", "harness", *args]), env=env, cwd=work, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)

    r = as_root("launch", "--bin", str(bin_))
    try:
        assert r.returncode == 0, r.stderr
        assert "(netns)" in r.stdout
        state = Path(r.stdout.split("state: ", 1)[1].split()[0])
        assert state.stat().st_uid == unpriv.uid and state.parent.stat().st_uid == unpriv.uid
        st = __import__("json").loads(state.read_text())
        assert psutil.Process(st["pids"]["target"]).uids().real == unpriv.uid
        assert Path(st["socket"]).stat().st_uid == unpriv.uid
        r = as_user("kcli", "send", "!slowbatch2")
        assert r.returncode == 0 and r.stdout.rstrip().endswith("verdict: ok"), r.stdout + r.stderr
    finally:
        r = as_root("stop")
    assert r.returncode == 0, r.stdout + r.stderr


def test_env_placeholders_reach_the_target(cli, tmp_path):
    """`[target] env` values and --env are templated: a kernel configured
    through the usual SDK variables can be pointed at the sandbox's mock."""
    w = tmp_path / "envkernel"
    refkernel = Path(sys.executable).with_name("refkernel")
    w.write_text(f'#!/bin/sh\nprintf "%s\\n%s\\n" "$OPENAI_BASE_URL" "$ANTHROPIC_BASE_URL" > env.txt\nexec {refkernel} "$@"\n')
    w.chmod(0o755)
    up = cli.run("launch", "--bin", str(w), "--env", "OPENAI_BASE_URL={llm_url}", "--env", "ANTHROPIC_BASE_URL={llm_root}")
    assert up.returncode == 0, up.stderr
    state = cli.state()
    lines = (Path(state["run_dir"]) / "data" / "env.txt").read_text().splitlines()
    assert lines == [state["llm_url"], state["llm_url"].removesuffix("/v1")] and lines[0].endswith("/v1")
    assert cli.run("stop").returncode == 0


def test_the_default_bin_argv_carries_no_token_and_a_stopped_state_holds_no_secret(cli):
    """Before: `--bin PATH` started PATH with `--token <token>`, readable by
    every local user in ps, and after `stop` state.json's argv still held it
    (issue 22 item 13). The token travels as $KSTRESS_TOKEN, which the
    reference kernel reads and enforces."""
    refkernel = Path(sys.executable).with_name("refkernel")
    cli.env["REFKERNEL_TOKEN"] = "stale-from-the-shell"  # inherited by the kernel; kstress's own token wins
    up = cli.run("launch", "--bin", str(refkernel))
    assert up.returncode == 0, up.stderr
    state = cli.state()
    token, key = state["token"], state["verdict_key"]
    assert token and key
    try:
        kernel = psutil.Process(state["pids"]["target"])
        cmdline = Path(f"/proc/{kernel.pid}/cmdline").read_bytes().decode()
        assert token not in cmdline and "--token" not in cmdline, cmdline
        assert kernel.environ().get("KSTRESS_TOKEN") == token
        assert token not in up.stdout and token not in " ".join(state["argv"])
        # the kernel enforces the token it was given that way
        assert cli.run("kcli", "stats").returncode == 0
        wrong = cli.run("kcli", "stats", "--socket", state["socket"], "--token", "not-the-token")
        assert wrong.returncode != 0 and "auth" in (wrong.stdout + wrong.stderr), wrong.stdout + wrong.stderr
    finally:
        down = cli.run("stop")
    assert down.returncode == 0, down.stderr
    kept = (Path(state["run_dir"]) / "state.json").read_text()
    assert token not in kept and key not in kept
    stopped = json.loads(kept)
    assert stopped["status"] == "stopped" and stopped["token"] is None and stopped["verdict_key"] is None


def test_a_stopped_or_dead_detached_sandbox_is_swept_by_the_next_launch_with_its_logs_kept(cli):
    """Before: a detached sandbox's directory, kept at `stop` for its logs, was
    never swept (one grew to 12 MB), and one whose supervisor died was swept
    without its logs: it names no run directory to copy them to (issue 22
    items 16 and 11). Now the next launch sweeps both, their logs, mock log and
    teardown going to the state home's swept/ first; a running one stays."""
    assert cli.launch_sh().returncode == 0
    first = cli.state()
    assert cli.run("kcli", "send", "!batch2").returncode == 0  # something in the mock's log
    assert cli.launch_sh("stop").returncode == 0
    stopped = Path(first["run_dir"])
    assert (stopped / "teardown.json").exists()
    up = cli.launch_sh()
    assert up.returncode == 0, up.stderr
    second = cli.state()
    try:
        assert not stopped.exists(), "the stopped sandbox's directory was not swept"
        kept = cli.home / "swept" / stopped.name
        assert (kept / "logs" / "target.err").exists() and (kept / "teardown.json").exists()
        assert "!batch2" in (kept / "mock.jsonl").read_text()
        archived = json.loads((kept / "state.json").read_text())
        assert archived["token"] is None and first["token"] not in (kept / "state.json").read_text()
        # a run that launches its own sandbox sweeps too, but never a running one
        r = cli.run("batch", "--launch", "--n", "2", "--kinds", "batch", "--rounds", "1", "--quiet", "--out", str(cli.out))
        assert r.returncode == 0, r.stderr
        assert Path(second["run_dir"]).is_dir() and cli.run("kcli", "stats").returncode == 0
    finally:
        killed = boot_clock()
        os.kill(second["supervisor_pid"], signal.SIGKILL)  # dead, not stopped: no teardown.json
    wait_for(lambda: namespace_gone(second["namespace"], second["net_inode"], killed), 10, "the guardian to clean up")
    r = cli.run("batch", "--launch", "--n", "2", "--kinds", "batch", "--rounds", "1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stderr
    dead = Path(second["run_dir"])
    assert not dead.exists() and (cli.home / "swept" / dead.name / "logs" / "target.err").exists()
    assert f"swept {dead}" in r.stderr and str(cli.home / "swept" / dead.name) in r.stderr


def test_a_kernel_that_prints_its_token_has_it_redacted_in_the_kept_logs(cli, tmp_path):
    """Before: the run directory's logs/ was the sandbox's copied byte for
    byte, so a kernel that logged its token handed it to whoever reads the run
    (issue 22 item 13: redact it everywhere kstress writes it)."""
    seen = tmp_path / "token.txt"
    refkernel = Path(sys.executable).with_name("refkernel")
    w = _exe(tmp_path / "chatty", f"""\
        printf '%s' "$KSTRESS_TOKEN" > {seen}
        echo "debug: my token is $KSTRESS_TOKEN" >&2
        exec {refkernel} "$@"
        """)
    r = cli.run("stress", "--launch", "--bin", str(w), "--conns", "1", "--inputs", "2", "--mix", "text:1", "--quiet", "--out", str(cli.out))
    assert r.returncode == 0, r.stdout + r.stderr
    token = seen.read_text()
    assert len(token) >= 8
    run = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    err = (run / "logs" / "target.err").read_text()
    assert "debug: my token is [redacted]" in err and token not in err
    assert not any(token in p.read_text(errors="replace") for p in run.rglob("*") if p.is_file())


def test_a_second_signal_to_the_supervisor_skips_the_grace(cli, tmp_path):
    """Before: the supervisor of a detached sandbox took every further signal
    for the first, so `stop` again (or a second Ctrl-C) still waited out the
    kernel's whole stop grace (here 20 s) when the kernel ignored SIGTERM
    (issue 22 item 12, as kstress's own second signal)."""
    target, mark = deaf_kernel(tmp_path, grace_s=20)
    up = cli.run("launch", "--target", str(target))
    assert up.returncode == 0, up.stderr
    st = cli.state()
    sup = psutil.Process(st["supervisor_pid"])
    wait_for(lambda: handles_sigterm(st["pids"]["target"]), 30, "the kernel's SIGTERM handler")
    sup.send_signal(signal.SIGTERM)
    wait_for(mark.exists, 30, "the kernel to be sent SIGTERM (the first signal's stop)")
    t0, born_before = time.monotonic(), boot_clock()
    sup.send_signal(signal.SIGTERM)
    sup.wait(60)
    took = time.monotonic() - t0
    assert took < 8, f"{took:.1f} s from the second signal to the supervisor's exit: the 20 s grace was waited out"
    teardown = json.loads((Path(st["run_dir"]) / "teardown.json").read_text())
    assert teardown["signalled"] and teardown["returncode"] == -signal.SIGKILL
    assert namespace_gone(st["namespace"], st["net_inode"], born_before)
    assert not psutil.pid_exists(st["pids"]["target"]) or psutil.Process(st["pids"]["target"]).status() == psutil.STATUS_ZOMBIE
