"""Shared test settings: every test must leave no process of its own behind."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest


# tests/ itself is importable: shared helpers such as waiting.py
sys.path.insert(0, str(Path(__file__).resolve().parent))
# pytest keeps a test module's assert-rewritten code only where bytecode may be written: with
# PYTHONDONTWRITEBYTECODE set (as on CI) every xdist worker and then the serial phase rewrote all the test
# modules again (`pytest -m serial --collect-only`: 14-16 s, 8.8-9.7 s once they are kept). This process
# only: the programs the tests start keep the environment's setting.
sys.dont_write_bytecode = False
TESTS = Path(__file__).resolve().parent

# Parallel workers (pytest-xdist, `make test`) share this host. Each names its
# network namespaces apart (a sandbox's start sweeps stale namespaces of its
# own prefix only: a test's deliberately stale one is not another worker's to
# take) and keeps its own pointer to a detached sandbox; subprocesses inherit
# both. Run dirs and sockets already live under each test's tmp_path.
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ... under xdist
os.environ["KSTRESS_NS_PREFIX"] = "kstw" + _WORKER.removeprefix("gw") if _WORKER else "kstt"
os.environ["KSTRESS_HOME"] = tempfile.mkdtemp(prefix=f"kst-home-{_WORKER or 'main'}-")
atexit.register(shutil.rmtree, os.environ["KSTRESS_HOME"], True)
# report.html costs a kstress run about 2 CPU-seconds (1.1 of them importing
# matplotlib), and the suite is CPU-bound on two cores: its runs are read
# through run.json, report.md and stdout, so the page is drawn only where a
# test reads it (the `draws_html` fixture). A developer's own setting wins.
os.environ.setdefault("KSTRESS_HTML", "0")
# Every aiohttp import builds two verified TLS contexts, loading the system's
# CA bundle (~0.07 CPU-s of a reference kernel's 0.58 at start-up); the suite
# starts mocks and kernels by the hundred and speaks only plain HTTP on
# loopback. An empty bundle for its processes (a pip install that needs one
# takes it back: tests/harness/sandbox/sbx_unpriv.py).
os.environ.setdefault("SSL_CERT_FILE", os.devnull)
# folders whose tests need root: named network namespaces, or dropping to
# nobody for the rootless variant (CI runs as root)
ROOT_DIRS = ("e2e", "harness/sandbox")


@pytest.fixture
def draws_html(monkeypatch):
    """kstress runs the test starts end by drawing report.html (request it
    before the fixtures that build their environment, such as `cli`)."""
    monkeypatch.setenv("KSTRESS_HTML", "1")


def pytest_collection_modifyitems(config, items):
    """The tiers by marker: `slow` (marked in the module), `root` (by folder)
    and `fast` (everything not slow), so `pytest -m fast` is the quick tier."""
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(TESTS).as_posix()
        if any(rel.startswith(d + "/") for d in ROOT_DIRS):
            item.add_marker(pytest.mark.root)
        if item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.fast)


def _children() -> dict[int, str]:
    out = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out[p.pid] = " ".join(p.cmdline()[:4])
        except psutil.Error:
            pass
    return out


@pytest.fixture(autouse=True)
def no_leaked_processes():
    """Fail a test that leaves a child process running (waits up to 5 s for
    stragglers that are already on their way out)."""
    before = set(_children())
    yield
    deadline = time.monotonic() + 5.0
    leaked = {}
    while time.monotonic() < deadline:
        leaked = {pid: cmd for pid, cmd in _children().items() if pid not in before}
        if not leaked:
            return
        time.sleep(0.05)  # polling a condition with a deadline, not synchronising
    for pid in leaked:
        try:
            psutil.Process(pid).kill()
        except psutil.Error:
            pass
    pytest.fail(f"test leaked processes: {leaked}")


@pytest.fixture(scope="session")
def unpriv():
    """An interpreter and a copy of the project that the user nobody can run
    (root's home is 0700 here): for the rootless tests, run from a root CI."""
    if os.geteuid() != 0:
        pytest.fail("these tests run as root (CI does); the unprivileged variant drops to nobody itself")
    sys.path.insert(0, str(Path(__file__).resolve().parent / "harness" / "sandbox"))
    from sbx_unpriv import UnprivEnv

    env = UnprivEnv()
    print(f"\nunprivileged env: {env.how} in {env.build_s:.2f} s ({env.python})")
    yield env
    env.close()
