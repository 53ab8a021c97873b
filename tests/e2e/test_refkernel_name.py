"""`--bin refkernel` names the reference kernel wherever kstress runs from,
with the venv's bin directory on PATH or not (before: "does not exist" from
any directory but the checkout, unless the venv was activated)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_bin_refkernel_without_the_venv_on_path(tmp_path):
    env = dict(os.environ, PATH="/usr/bin:/bin", KSTRESS_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))
    r = subprocess.run(
        [sys.executable, "-m", "harness", "stress", "--launch", "--bin", "refkernel", "--conns", "1", "--inputs", "2", "--quiet", "--out", str(tmp_path / "runs")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr[-2000:]
