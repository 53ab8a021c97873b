"""Helpers of the end-to-end tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from harness.sandbox.namespace import processes_in

REPO = Path(__file__).resolve().parents[2]


class Cli:
    """conftest's `cli`, for a module-scoped fixture (a conftest cannot be
    imported by name: every tests/ directory has one)."""

    def __init__(self, home: Path, out: Path) -> None:
        self.out = out
        out.parent.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, KSTRESS_HOME=str(home), PYTHONPATH=str(REPO), TMPDIR=str(out.parent))

    def run(self, *args: str, timeout: float = 120, script: str | None = None) -> subprocess.CompletedProcess:
        argv = [sys.executable, str(REPO / "scripts" / script), *args] if script else [sys.executable, "-m", "harness", *args]
        return subprocess.run(argv, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def run_dir(r) -> Path:
    """The run directory a command printed last (`run: DIR`)."""
    return Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))


def namespace_gone(name: str | None, inode: int | None, born_before: float | None = None) -> bool:
    """The namespace's /run/netns entry is gone and no process is left in it.
    A freed namespace's inode is reused, by another worker's sandbox too: with
    ``born_before`` (a boot_clock() taken before the sandbox was stopped) only
    processes older than that count, and a namespace made after ours was
    freed holds none of those."""
    if name and Path("/run/netns", name).exists():
        return False
    if not inode:
        return True
    left = []
    for pid in processes_in(inode):
        try:
            if born_before is None or _started(pid) < born_before:
                left.append(pid)
        except (OSError, IndexError, ValueError):
            pass
    return not left


def boot_clock() -> float:
    """Seconds since boot: the clock /proc/PID/stat counts start times in, to
    the tick (psutil's create_time goes through btime, whole seconds only)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def _started(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19]) / os.sysconf("SC_CLK_TCK")


DEAF = """\
import argparse, asyncio, json, pathlib, signal
ap = argparse.ArgumentParser()
ap.add_argument("--socket")
a, _ = ap.parse_known_args()
# a SIGTERM is noted, and ignored
signal.signal(signal.SIGTERM, lambda *_: pathlib.Path("{mark}").touch())

async def serve(r, w):
    try:
        json.loads(await r.readuntil(b"\\n"))
        w.write(b'{{"type":"response","kind":"auth","ok":true,"protocol":1}}\\n')
        await asyncio.Event().wait()  # authenticated, and never answers an input
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        pass

async def main():
    async with await asyncio.start_unix_server(serve, a.socket):
        await asyncio.Event().wait()

asyncio.run(main())
"""


def deaf_kernel(tmp: Path, grace_s: float) -> tuple[Path, Path]:
    """A target file for a kernel that authenticates, never answers, and notes
    then ignores SIGTERM (so only a SIGKILL ends it); and the file it touches
    when it gets one."""
    mark = tmp / "got-sigterm"
    deaf = tmp / "deaf.py"
    deaf.write_text(f"#!{sys.executable}\n" + DEAF.format(mark=mark))
    deaf.chmod(0o755)
    target = tmp / "deaf.toml"
    target.write_text(f'[target]\nbin = "{deaf}"\nstop_grace_s = {grace_s}\n')
    return target, mark


def handles_sigterm(pid: int) -> bool:
    """The process catches SIGTERM: kstress's edge is in place (Python itself
    catches only SIGINT at start-up), or a kernel's handler is."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("SigCgt:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGTERM - 1)))
    except OSError:
        pass
    return False
