"""Run Python code as an unprivileged user (nobody) from a root test run.

root's home is 0700 here, so the pyenv interpreter behind .venv and possibly
the checkout itself are unreadable to nobody. We use the distribution's
world-readable interpreter of the same minor version (/usr/bin/python3.X) and
copy into a world-readable temp dir what the code needs: the harness and mock
packages, this directory's helper modules, and the installed distributions of
aiohttp, psutil, pyroute2 and click with their dependencies (same minor
version, so the compiled extensions load). Measured on the 2-core CI machine:
copying takes ~0.6 s (22 MB; the .pyc files come along, which halves each
interpreter's start); the fallback, a venv plus `pip install` from the
registry, ~6 s.

Privileges are dropped with `setpriv --reuid --regid --clear-groups`, which
execs the interpreter: the pid we get is the unprivileged process itself.
"""

from __future__ import annotations

import grp
import importlib.metadata as md
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from packaging.requirements import Requirement

ROOT_DISTS = ("aiohttp", "psutil", "pyroute2", "click", "orjson")
REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent


def _closure(names) -> list[md.Distribution]:
    seen: dict[str, md.Distribution] = {}
    todo = list(names)
    while todo:
        name = todo.pop()
        dist = md.distribution(name)
        key = dist.metadata["Name"].lower().replace("_", "-")
        if key in seen:
            continue
        seen[key] = dist
        for spec in dist.requires or ():
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen.values())


def _copy_tree(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"), dirs_exist_ok=True)


class UnprivEnv:
    """A temp dir nobody can read, holding `site/` (importable packages) and
    per-test work dirs owned by nobody."""

    def __init__(self) -> None:
        self.uid = pwd.getpwnam("nobody").pw_uid
        try:
            self.gid = grp.getgrnam("nogroup").gr_gid
        except KeyError:
            self.gid = pwd.getpwnam("nobody").pw_gid
        self.root = Path(tempfile.mkdtemp(prefix="kst-unpriv-"))
        os.chmod(self.root, 0o755)
        self.site = self.root / "site"
        self.python = f"/usr/bin/python{sys.version_info[0]}.{sys.version_info[1]}"
        self.how = "copy"
        self._count = 0
        t0 = time.monotonic()
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        self.build_s = time.monotonic() - t0

    def _build(self) -> None:
        self.site.mkdir()
        for pkg in ("harness", "mock", "refkernel"):
            _copy_tree(REPO / pkg, self.site / pkg)
        for helper in HERE.glob("sbx_*.py"):
            shutil.copy2(helper, self.site / helper.name)
        copied = False
        if os.access(self.python, os.X_OK):
            for dist in _closure(ROOT_DISTS):
                for f in dist.files or ():
                    rel = Path(str(f))
                    if rel.parts[0] == "..":
                        continue
                    src = Path(f.locate())
                    if src.is_file():
                        (self.site / rel).parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy2(src, self.site / rel)
            self._compile()
            subprocess.run(["chmod", "-R", "a+rX", str(self.root)], check=True)
            probe = self.run(["-c", "import aiohttp, psutil, pyroute2, click, orjson, harness.sandbox.namespace"], timeout=60)
            copied = probe.returncode == 0
        if not copied:
            # Another interpreter version, or extensions that do not load: a
            # venv of the system python with the dependencies from the registry.
            self.how = "venv"
            venv = self.root / "venv"
            subprocess.run(["/usr/bin/python3", "-m", "venv", str(venv)], check=True, timeout=300)
            subprocess.run(
                [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", *ROOT_DISTS],
                check=True, timeout=600, env={k: v for k, v in os.environ.items() if k != "SSL_CERT_FILE"},  # the registry may be https
            )
            self.python = str(venv / "bin" / "python")
            self._compile()
            subprocess.run(["chmod", "-R", "a+rX", str(self.root)], check=True)
            probe = self.run(["-c", "import aiohttp, psutil, pyroute2, click, orjson, harness.sandbox.namespace"], timeout=60)
            if probe.returncode != 0:
                raise RuntimeError(f"no interpreter nobody can use: {probe.stderr}")

    def _compile(self) -> None:
        """The copied project's bytecode, made once by the interpreter nobody
        runs: each of nobody's processes (PYTHONDONTWRITEBYTECODE, in a tree it
        cannot write) compiled what it imported from source again, ~0.35 CPU-s
        for the whole harness."""
        sources = [str(self.site / pkg) for pkg in ("harness", "mock", "refkernel")] + [str(p) for p in self.site.glob("sbx_*.py")]
        subprocess.run([self.python, "-m", "compileall", "-q", *sources], check=True, timeout=300, stdout=subprocess.DEVNULL)

    def workdir(self) -> Path:
        """A fresh 0700 dir owned by nobody (short path: unix sockets go there)."""
        self._count += 1
        path = self.root / f"w{self._count}"
        path.mkdir(mode=0o700)
        os.chown(path, self.uid, self.gid)
        return path

    def env(self, home: Path | None = None) -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            "PYTHONPATH": str(self.site),
            "PYTHONDONTWRITEBYTECODE": "1",
            "HOME": str(home or self.root),
            "LANG": "C.UTF-8",
        }

    def argv(self, args: list[str]) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", self.python, *args]

    def run(self, args: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.argv(args), env=self.env(cwd), cwd=cwd or self.root,
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )

    def script(self, name: str) -> str:
        return str(self.site / name)

    def close(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
