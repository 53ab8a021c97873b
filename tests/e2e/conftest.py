"""End-to-end: the CLI and scripts as users type them, as subprocesses, with
the real sandbox, mock and reference kernel. Each test gets its own
KSTRESS_HOME (the pointer to the detached sandbox) and run root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class Cli:
    def __init__(self, home: Path, out: Path) -> None:
        self.home = home
        self.out = out
        # TMPDIR: the sandboxes' run dirs (kept after stop, with their logs) land in the test's tmp
        out.parent.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, KSTRESS_HOME=str(home), PYTHONPATH=str(REPO), TMPDIR=str(out.parent))

    def run(self, *args: str, timeout: float = 120, script: str | None = None) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(REPO / "scripts" / script), *args] if script else [sys.executable, "-m", "harness", *args]
        return subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def launch_sh(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run([str(REPO / "scripts" / "launch.sh"), *args], env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def state(self) -> dict:
        return json.loads(Path((self.home / "current").read_text().strip()).read_text())


@pytest.fixture
def cli(tmp_path):
    c = Cli(tmp_path / "home", tmp_path / "runs")
    yield c
    # whatever a test left running is stopped (and the test fails on it via the leak check)
    if (c.home / "current").exists():
        c.run("stop", timeout=60)
