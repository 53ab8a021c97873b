"""Runs an sbx_checks check or an sbx_owner process in one of the three
variants: root/netns, root/userns (in-process) and nobody/userns (subprocess)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

import sbx_checks
from sbx_unpriv import UnprivEnv

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

VARIANTS = ["netns", "userns", "userns-nobody"]


def mechanism_of(variant: str) -> str:
    return variant.split("-")[0]


class Runner:
    """Runs an sbx_checks check in one variant: in-process as root, or as
    nobody in a subprocess (with its own work and lock dirs)."""

    def __init__(self, variant: str, tmp_path: Path, lock_dir: Path, request) -> None:
        self.variant = variant
        self.mechanism = mechanism_of(variant)
        self.unprivileged = variant.endswith("-nobody")
        self.env: UnprivEnv | None = request.getfixturevalue("unpriv") if self.unprivileged else None
        if self.env is not None:
            self.workdir = self.env.workdir()
            self.lock_dir = self.workdir / "locks"
        else:
            self.workdir, self.lock_dir = tmp_path, lock_dir

    async def check(self, name: str, mechanism: str | None = None, timeout: float = 60) -> dict:
        mechanism = mechanism or self.mechanism
        if self.env is None:
            return await asyncio.wait_for(
                sbx_checks.CHECKS[name](mechanism, self.workdir, self.lock_dir), timeout
            )
        proc = await asyncio.create_subprocess_exec(
            *self.env.argv([self.env.script("sbx_checks.py"), name, "--mechanism", mechanism,
                            "--workdir", str(self.workdir), "--lock-dir", str(self.lock_dir)]),
            env=self.env.env(self.workdir), cwd=self.workdir,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        assert proc.returncode == 0, f"check {name} as nobody failed (rc={proc.returncode}):\n{err.decode()}{out.decode()}"
        return json.loads(out.decode().strip().splitlines()[-1])

    def owner_argv(self, *args: str) -> tuple[list[str], dict, Path]:
        """argv, env and cwd of sbx_owner.py in this variant."""
        if self.env is None:
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(REPO)])
            argv = [sys.executable, str(HERE / "sbx_owner.py")]
            cwd = self.workdir
        else:
            env = self.env.env(self.workdir)
            argv = self.env.argv([self.env.script("sbx_owner.py")])
            cwd = self.workdir
        return argv + ["--mechanism", self.mechanism, "--lock-dir", str(self.lock_dir), *args], env, cwd
