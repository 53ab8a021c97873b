"""The sweep of sandbox directories (harness/sandbox/launcher.py:
sweep_sandbox_dirs) on hand-made directories: a running owner's is never
taken, logs go to the state home when no run directory takes them, and a
directory whose logs cannot be copied is kept, saying so (issue 22 items 11
and 16). The end-to-end tests (test_faults.py, test_launch.py) drive real
sandboxes."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from harness.sandbox.launcher import OWNER_LOCK, SWEPT_KEEP, copy_logs, sweep_sandbox_dirs


def sandbox_dir(root: Path, name: str, results: str | None = None, token: str = "tok-0123456789") -> Path:
    d = root / name
    (d / "logs").mkdir(parents=True)
    (d / "logs" / "target.err").write_text(f"a kernel's stderr, quoting {token}\n")
    (d / "mock.jsonl").write_text('{"nonce": "n1"}\n')
    (d / OWNER_LOCK).touch()
    argv = ["/k", "--socket", str(d / "kernel.sock"), f"--key={token}"]
    (d / "state.json").write_text(json.dumps({"status": "stopped", "token": token, "verdict_key": "ab" * 16, "argv": argv, "results": results}))
    return d


def test_a_running_owners_directory_is_never_swept(tmp_path, monkeypatch):
    monkeypatch.setenv("KSTRESS_HOME", str(tmp_path / "home"))
    d = sandbox_dir(tmp_path / "root", "kst-live")
    fd = os.open(d / OWNER_LOCK, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)  # its owner, alive
    said: list[str] = []
    try:
        assert sweep_sandbox_dirs(tmp_path / "root", said.append) == []
    finally:
        os.close(fd)
    assert d.is_dir() and not said
    assert sweep_sandbox_dirs(tmp_path / "root", said.append) == [d]  # the owner is gone


def test_logs_no_run_directory_takes_go_to_the_state_home_without_secrets(tmp_path, monkeypatch):
    """A detached sandbox names no run directory; an older kstress wrote a
    relative one. Before, either was removed with its logs."""
    home = tmp_path / "home"
    monkeypatch.setenv("KSTRESS_HOME", str(home))
    root = tmp_path / "root"
    detached = sandbox_dir(root, "kst-detached")
    relative = sandbox_dir(root, "kst-relative", results="runs/stress-1")
    said: list[str] = []
    assert sorted(sweep_sandbox_dirs(root, said.append)) == [detached, relative]
    for d in (detached, relative):
        kept = home / "swept" / d.name
        assert (kept / "logs" / "target.err").read_text() == "a kernel's stderr, quoting [redacted]\n" and (kept / "mock.jsonl").exists()
        state = (kept / "state.json").read_text()
        assert "tok-0123456789" not in state and "ab" * 16 not in state
        assert json.loads(state)["token"] is None and any(f"swept {d}" in s and str(kept) in s for s in said)


def test_a_directory_whose_logs_cannot_be_copied_is_kept_and_says_so(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir(mode=0o755)  # open to other users: not a state home kstress writes into
    os.chmod(home, 0o755)
    monkeypatch.setenv("KSTRESS_HOME", str(home))
    d = sandbox_dir(tmp_path / "root", "kst-stuck")
    said: list[str] = []
    assert sweep_sandbox_dirs(tmp_path / "root", said.append) == []
    assert (d / "logs" / "target.err").exists()
    [msg] = said
    assert f"kept {d}" in msg and "could not be copied" in msg and "mode 755" in msg and f"rm -r {d}" in msg


def test_the_state_home_keeps_the_newest_swept_logs(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("KSTRESS_HOME", str(home))
    root = tmp_path / "root"
    for i in range(SWEPT_KEEP + 3):
        sandbox_dir(root, f"kst-{i:02d}")
        assert len(sweep_sandbox_dirs(root, lambda _: None)) == 1
    left = sorted(p.name for p in (home / "swept").iterdir())
    assert len(left) == SWEPT_KEEP and left[-1] == f"kst-{SWEPT_KEEP + 2:02d}"


def test_copy_logs_finds_a_secret_split_across_two_blocks(tmp_path):
    src = tmp_path / "logs"
    src.mkdir()
    secret = "0123456789abcdef"
    (src / "target.out").write_bytes(b"x" * ((1 << 20) - 5) + secret.encode() + b" tail\n" + secret.encode())
    copy_logs(src, tmp_path / "out", (secret, None, "ab"))  # None and a too-short value: ignored
    assert (tmp_path / "out" / "target.out").read_bytes() == b"x" * ((1 << 20) - 5) + b"[redacted] tail\n[redacted]"
