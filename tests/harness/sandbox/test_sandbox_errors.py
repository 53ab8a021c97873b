"""Refusals and misuse: each gets a SandboxError (or UsageError) that names the
mechanism or the bad value, the reason with its errno, and leaves nothing."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sbx_runner import HERE, REPO, Runner
from harness.errors import UsageError
from harness.sandbox.namespace import Sandbox, SandboxError
from sbx_helpers import boot_clock, leftovers


def _run_check_as_root(prefix: list[str], check: str, mechanism: str, tmp_path: Path) -> dict:
    """sbx_checks.py as root under a wrapper (setpriv, unshare) that takes
    privileges away."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE), str(REPO)]))
    lock_dir = tmp_path / "locks"
    proc = subprocess.run(
        [*prefix, sys.executable, str(HERE / "sbx_checks.py"), check, "--mechanism", mechanism,
         "--workdir", str(tmp_path), "--lock-dir", str(lock_dir)],
        env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, f"{check} failed:\n{proc.stderr}{proc.stdout}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


async def test_netns_as_unprivileged_user_is_refused_with_the_reason(tmp_path, lock_dir, request):
    runner = Runner("userns-nobody", tmp_path, lock_dir, request)
    result = await runner.check("expect_error", mechanism="netns")
    assert result["mechanism"] == "netns"
    assert result["errno"] in (errno.EACCES, errno.EPERM), result
    assert "netns" in result["message"] and "root" in result["message"] and "userns" in result["message"]
    assert result["locks"] == [], "a refused start left its lock file"


def test_netns_without_cap_sys_admin_is_refused_and_auto_falls_back_to_userns(tmp_path):
    no_admin = ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin"]
    refused = _run_check_as_root(no_admin, "expect_error", "netns", tmp_path)
    assert refused["mechanism"] == "netns" and refused["errno"] == errno.EPERM, refused
    assert "Operation not permitted" in refused["message"] and "CAP_SYS_ADMIN" in refused["message"]
    assert refused["locks"] == []
    fallback = _run_check_as_root(no_admin, "auto_works", "auto", tmp_path)
    assert fallback["mechanism"] == "userns" and fallback["inside"] == {"links": ["lo"], "lo_up": True}


def test_userns_refused_when_user_namespaces_are_exhausted(tmp_path):
    # max_user_namespaces is per user namespace: 0 inside a throwaway one
    # refuses nested ones there, without touching the machine's setting.
    wrap = ["unshare", "--user", "--map-root-user", "sh", "-c",
            'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"', "sh"]
    result = _run_check_as_root(wrap, "expect_error", "userns", tmp_path)
    assert result["mechanism"] == "userns" and result["errno"] == errno.ENOSPC, result
    assert "unshare(CLONE_NEWUSER|CLONE_NEWNET)" in result["message"]
    assert "max_user_namespaces" in result["message"]
    assert result["locks"] == []
    # "root" inside that user namespace: auto tries netns first, then userns, and names both.
    both = _run_check_as_root(wrap, "expect_error", "auto", tmp_path)
    assert both["mechanism"] == "auto" and both["locks"] == []
    assert "netns: create /run/netns/" in both["message"] and "Operation not permitted" in both["message"]
    assert "userns: unshare(" in both["message"] and "No space left on device" in both["message"]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        (dict(mechanism="docker"), ["'docker'", "auto, netns, userns"]),
        (dict(grace_s=-1), ["grace_s=-1", ">= 0"]),
        (dict(grace_s=float("nan")), ["grace_s=nan"]),
        (dict(prefix="KST!"), ["prefix='KST!'", "lowercase"]),
    ],
)
def test_bad_arguments_name_the_value_and_the_rule(kwargs, words):
    with pytest.raises(UsageError) as info:
        Sandbox(**kwargs)
    for word in words:
        assert word in str(info.value)


async def test_lock_dir_owned_by_someone_else_is_refused(tmp_path):
    foreign = tmp_path / "foreign"
    foreign.mkdir(mode=0o700)
    os.chown(foreign, 65534, 65534)
    with pytest.raises(SandboxError, match=r"owned by uid 65534.*must be owned by uid 0"):
        await Sandbox(lock_dir=foreign).start()


async def test_spawn_misuse_and_missing_binaries(lock_dir, tmp_path):
    sb = Sandbox(lock_dir=lock_dir, mechanism="netns")
    with pytest.raises(UsageError, match="not started"):
        await sb.spawn(["true"])
    async with sb:
        with pytest.raises(FileNotFoundError):
            await sb.spawn(["/nonexistent/kernel"])
        with pytest.raises(FileNotFoundError):
            await sb.spawn(["no-such-binary-kst"])
        script = tmp_path / "not-executable.sh"
        script.write_text("#!/bin/sh\n")
        with pytest.raises(PermissionError):
            await sb.spawn([str(script)])
        with pytest.raises(UsageError, match="non-empty list"):
            await sb.spawn("sleep 1")
        assert sb.pids() == []
    with pytest.raises(UsageError, match="closed"):
        await sb.spawn(["true"])
    with pytest.raises(UsageError, match="twice"):
        await sb.start()


async def test_run_is_bounded_and_kills_on_timeout(lock_dir):
    async with Sandbox(lock_dir=lock_dir, mechanism="netns") as sb:
        assert await sb.run(["sh", "-c", "echo out; echo err >&2; exit 3"], 10) == (3, "out\n", "err\n")
        with pytest.raises(TimeoutError, match="did not finish within 0.3 s"):
            await sb.run(["sleep", "30"], 0.3)
        assert sb.pids() == []


async def test_two_sandboxes_are_separate(lock_dir):
    async with Sandbox(lock_dir=lock_dir, mechanism="netns") as a, Sandbox(lock_dir=lock_dir, mechanism="userns") as b:
        assert a.net_inode != b.net_inode and a.name != b.name
        pa = await a.spawn(["sleep", "30"])
        pb = await b.spawn(["sleep", "30"])
        assert a.pids() == [pa.pid] and b.pids() == [pb.pid]
        info = [(s.name, s.net_inode, s.lock_path) for s in (a, b)]
        stopping = boot_clock()
    for name, inode, lock in info:
        assert not leftovers(name, inode, lock, [pa.pid, pb.pid], stopping)
