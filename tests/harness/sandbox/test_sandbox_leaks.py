"""Nothing leaks when the owner dies: its guardian cleans up within 2 s, and a
namespace whose owner and guardian are both gone is swept by the next start,
while a live owner's namespace is left alone."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys

import pytest

from harness.sandbox.namespace import NETNS_DIR, Sandbox, default_prefix
from sbx_helpers import alive, await_until, boot_clock, leftovers, wait_gone

LEAK_DEADLINE_S = 2.0


class Owner:
    """sbx_owner.py running in its own process, in the runner's variant."""

    def __init__(self, runner, *args: str) -> None:
        self.argv, self.env, self.cwd = runner.owner_argv(*args)
        self.proc: asyncio.subprocess.Process | None = None
        self.info: dict = {}

    async def __aenter__(self) -> "Owner":
        self.proc = await asyncio.create_subprocess_exec(
            *self.argv, env=self.env, cwd=self.cwd,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        line = await asyncio.wait_for(self.proc.stdout.readline(), 30)
        if not line:
            err = await asyncio.wait_for(self.proc.stderr.read(), 10)
            await self.proc.wait()
            raise AssertionError(f"owner exited ({self.proc.returncode}) before ready:\n{err.decode()}")
        self.info = json.loads(line)
        return self

    def sigkill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)

    def everything(self, born_before: float | None = None) -> dict:
        i = self.info
        return leftovers(i["name"], i["net_inode"], i["lock_path"], i["pids"] + [i["guardian_pid"]], born_before)

    async def __aexit__(self, *exc) -> None:
        if self.proc.returncode is None:
            self.proc.stdin.close()  # EOF: the owner closes its sandbox and exits
            try:
                await asyncio.wait_for(self.proc.wait(), 15)
            except asyncio.TimeoutError:
                self.proc.kill()
        await asyncio.wait_for(self.proc.wait(), 15)


async def test_sigkill_owner_leaves_nothing_within_2s(runner):
    # The owner runs with the default grace (3 s) and one process inside ignores
    # SIGTERM: the guardian must still be done within the 2 s.
    async with Owner(runner) as owner:
        assert owner.everything(), "control: the live sandbox must be visible to the leak check"
        owner.sigkill()
        await owner.proc.wait()
        left, elapsed = await asyncio.to_thread(wait_gone, owner.info, LEAK_DEADLINE_S)
    assert not left, f"{elapsed:.2f} s after SIGKILL of the owner, left: {left}"
    print(f"{runner.variant}: everything gone {elapsed:.3f} s after SIGKILL")


async def test_sigkill_owner_with_connector_and_held_connections_leaves_nothing(runner):
    # the connector is one more process in the namespace: the guardian's
    # cleanup ends it, and the connections it handed out die with the owner
    async with Owner(runner, "--connector") as owner:
        assert len(owner.info["pids"]) >= 7, owner.info["pids"]  # the sleeps, the connector, the server
        owner.sigkill()
        await owner.proc.wait()
        left, elapsed = await asyncio.to_thread(wait_gone, owner.info, LEAK_DEADLINE_S)
    assert not left, f"{elapsed:.2f} s after SIGKILL of the owner, left: {left}"


@pytest.mark.parametrize("how", ["guardian-killed", "no-guardian"])
async def test_stale_namespace_is_swept_and_a_live_one_left_alone(runner, how):
    args = ("--grace", "0.3") + (("--no-guardian",) if how == "no-guardian" else ())
    async with contextlib.AsyncExitStack() as stack:
        live, stale = await asyncio.gather(
            stack.enter_async_context(Owner(runner, "--grace", "0.3")), stack.enter_async_context(Owner(runner, *args))
        )
        # every process of the stale sandbox is older than this; once its
        # namespace is gone its inode is free for any other sandbox of the
        # suite (CI: another worker's guardian and mock were found in it)
        born = boot_clock()
        if how == "guardian-killed":
            os.kill(stale.info["guardian_pid"], signal.SIGKILL)
        stale.sigkill()
        await stale.proc.wait()
        # With no guardian nothing cleans up: the leak check must see the leftovers.
        left = await asyncio.to_thread(wait_gone, stale.info, 0.3)
        assert left[0], "control: the stale sandbox vanished before any sweep"
        assert alive(stale.info["guardian_pid"]) == (how == "no-guardian")

        result = await runner.check("start_and_sweep")
        assert stale.info["name"] in result["swept"]
        assert live.info["name"] not in result["swept"]
        assert not stale.everything(born), f"the sweep left {stale.everything(born)}"
        # The live owner's sandbox is intact: processes, guardian, lock (and /run/netns entry).
        still = live.everything()
        assert set(still.get("known_pids_alive", {})) == set(live.info["pids"]) | {live.info["guardian_pid"]}
        assert "lock_file" in still
        if runner.mechanism == "netns":
            assert "netns_entry" in still
    assert not live.everything(), f"the live owner's aclose left {live.everything()}"


def _plant(name: str, with_process: bool) -> subprocess.Popen | None:
    subprocess.run(
        [sys.executable, "-c", "import sys; from pyroute2 import netns; netns.create(sys.argv[1])", name],
        check=True, timeout=30,
    )
    if with_process:
        return subprocess.Popen(["nsenter", f"--net={NETNS_DIR / name}", "sleep", "300"])
    return None


async def test_sweep_of_planted_named_namespaces_honours_locks(lock_dir):
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid whose owner is certainly gone
    kst = default_prefix()  # this worker's namespaces (KSTRESS_NS_PREFIX): another worker's sweep never takes them
    names = {k: f"{kst}-{dead.pid}-{v}" for k, v in
             dict(stale_unlocked="0000aaa1", stale_no_lock="0000aaa2", live_locked="0000aaa3").items()}
    names["live_owner_alive"] = f"{kst}-{os.getpid()}-0000aaa4"  # no lock file in lock_dir, owner alive
    procs = []
    holder = None
    try:
        procs.append(_plant(names["stale_unlocked"], with_process=True))
        (lock_dir / f"{names['stale_unlocked']}.lock").write_text("{}")
        _plant(names["stale_no_lock"], with_process=False)
        _plant(names["live_locked"], with_process=False)
        live_lock = lock_dir / f"{names['live_locked']}.lock"
        live_lock.write_text("{}")
        # One process holding the lock (flock(1) with a command would fork a
        # child that outlives a kill of flock itself).
        holder = subprocess.Popen(["sh", "-c", 'exec 9<>"$1" && flock --exclusive 9 && exec sleep 300', "sh",
                                   str(live_lock)])
        await await_until(lambda: _locked(live_lock), 10, f"flock to hold {live_lock}")
        _plant(names["live_owner_alive"], with_process=False)
        staging = lock_dir / f".{kst}-{dead.pid}-0000aaa5.new"  # an owner died before naming its lock
        staging.write_text("{}")

        async with Sandbox(lock_dir=lock_dir, mechanism="netns") as sb:
            swept = set(sb.swept)
        assert {names["stale_unlocked"], names["stale_no_lock"]} <= swept
        assert not swept & {names["live_locked"], names["live_owner_alive"]}
        for key in ("stale_unlocked", "stale_no_lock"):
            assert not leftovers(names[key], None, lock_dir / f"{names[key]}.lock", [p.pid for p in procs])
        procs[0].wait(timeout=5)  # the sweep killed the process inside the stale namespace
        for key in ("live_locked", "live_owner_alive"):
            assert (NETNS_DIR / names[key]).exists()
        assert live_lock.exists()
        assert not staging.exists()
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        for p in procs:
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        for name in names.values():
            subprocess.run(["umount", "-l", str(NETNS_DIR / name)], capture_output=True)
            try:
                os.unlink(NETNS_DIR / name)
            except FileNotFoundError:
                pass


def _locked(path) -> bool:
    import fcntl

    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False


@pytest.mark.parametrize("mechanism", ["netns", "userns"])
async def test_sigterm_to_the_guardian_cleans_up_and_aclose_still_works(mechanism, lock_dir):
    async with Sandbox(mechanism=mechanism, lock_dir=lock_dir, grace_s=0.3) as sb:
        proc = await sb.spawn(["sleep", "60"])
        name, inode, lock = sb.name, sb.net_inode, sb.lock_path
        os.kill(sb.guardian_pid, signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 10)
        await await_until(lambda: not (NETNS_DIR / name).exists() and not lock.exists(), 10,
                          "the guardian to remove the namespace and the lock")
        assert sb.pids() == []
    assert not leftovers(name, inode, lock, [proc.pid, sb.guardian_pid])
