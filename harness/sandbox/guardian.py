"""The sandbox's helper process: creates the namespace, lives in it, brings `lo`
up, and cleans up when its owner dies. Started by `Sandbox.start()`.

    python -m harness.sandbox.guardian --mechanism netns|userns --name NAME --owner PID
        --grace S (--lock-fd N --lock-path PATH | --no-watch)

Protocol with the owner: exactly one JSON line on stdout, then stdout and
stderr are pointed at /dev/null (so the owner reads both pipes to EOF):
    {"ok": true, "pid": P, "net_inode": I, "user_inode": J, "links": ["lo"]}
    {"ok": false, "stage": "...", "errno": E, "error": "..."}
Then it waits for one of:
    - the owner's pidfd becomes readable (the owner died, SIGKILL included);
    - "close" on stdin (the owner's aclose() has finished its own cleanup);
    - EOF on stdin without "close" (the owner died);
    - SIGTERM.
and cleans up: SIGTERM -> grace -> SIGKILL every other process in the
namespace, remove /run/netns/NAME (netns), unlink the lock file, exit.

It runs in its own session (Ctrl-C in the owner's terminal does not reach it)
and inherits the owner's open lock file, so the lock is held until both are
gone. With --no-watch it is only a holder: it ignores the owner's death, holds
no lock, and leaves a dead owner's namespace to the next sweep (or SIGTERM).

Everything here is single-threaded on purpose: unshare(CLONE_NEWUSER) refuses
a multi-threaded caller, and pyroute2's netns.create forks.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import json
import os
import select
import signal
import sys
from pathlib import Path

from .namespace import NETNS_DIR, remove_netns, terminate_sync, unlink_lock

# After the owner died: SIGTERM, at most this long, then SIGKILL -- so the
# whole cleanup fits in the 2 s the leak tests allow.
OWNER_DEATH_GRACE_S = 1.0

CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000


class _Stop(Exception):
    """SIGTERM arrived."""


class _Failed(Exception):
    def __init__(self, stage: str, error: BaseException) -> None:
        super().__init__(stage)
        self.stage = stage
        self.errno = getattr(error, "errno", None)
        text = str(error) or type(error).__name__
        if isinstance(error, OSError) and error.errno:
            # pyroute2 puts its own words where strerror goes ("mount rundir
            # failed"): keep them, but say what the errno means too.
            text = f"[Errno {error.errno}] {os.strerror(error.errno)}"
            if error.strerror and error.strerror != os.strerror(error.errno):
                text += f" ({error.strerror})"
        self.error = text


def _report(payload: dict) -> None:
    sys.stdout.write(json.dumps(payload) + "\n")
    sys.stdout.flush()


def _detach_stdio() -> None:
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.close(devnull)


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _oserror(what: str) -> OSError:
    err = ctypes.get_errno()
    return OSError(err, os.strerror(err), what)


def _create_netns(name: str) -> None:
    from pyroute2 import netns  # the import costs ~0.1 s: only here, only when needed

    stage = f"create {NETNS_DIR / name} (pyroute2 netns.create)"
    try:
        netns.create(name)
        stage = f"join {NETNS_DIR / name} (setns)"
        fd = os.open(NETNS_DIR / name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if _libc().setns(fd, CLONE_NEWNET) != 0:
                raise _oserror("setns")
        finally:
            os.close(fd)
    except Exception as e:
        raise _Failed(stage, e) from e


def _create_userns() -> None:
    uid, gid = os.geteuid(), os.getegid()
    stage = "unshare(CLONE_NEWUSER|CLONE_NEWNET)"
    try:
        if _libc().unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0:
            raise _oserror("unshare")
        stage = "write /proc/self/{setgroups,uid_map,gid_map}"
        # setgroups must be denied before an unprivileged process may write gid_map.
        for path, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
            with open(f"/proc/self/{path}", "w") as f:
                f.write(text)
    except Exception as e:
        raise _Failed(stage, e) from e


async def _lo_up() -> list[str]:
    from pyroute2 import AsyncIPRoute

    async with AsyncIPRoute() as ipr:
        (index,) = await ipr.link_lookup(ifname="lo")
        await ipr.link("set", index=index, state="up")
        names = []
        async for link in await ipr.link("dump"):
            names.append(link.get("ifname"))
            if link.get("ifname") == "lo" and not link["flags"] & 1:  # IFF_UP
                raise OSError(0, "lo is still down after RTM_NEWLINK", "lo")
        return names


def _on_sigterm(signum, frame) -> None:
    raise _Stop()


def _watch(owner_fd: int | None, watch: bool) -> str:
    poller = select.poll()
    if watch and owner_fd is not None:
        poller.register(owner_fd, select.POLLIN)
    poller.register(0, select.POLLIN)
    buffered = b""
    while True:
        for fd, _events in poller.poll():
            if fd == owner_fd:
                return "owner exited"
            data = os.read(0, 4096)
            buffered += data
            if b"close" in buffered:
                return "closed by owner"
            if not data:
                poller.unregister(0)
                if watch:
                    return "owner's pipe closed"
                # a holder without watch keeps holding until SIGTERM (or a sweep)


def _cleanup(args: argparse.Namespace, net_inode: int) -> int:
    survivors = terminate_sync(net_inode, grace_s=args.grace, exclude=(os.getpid(),))
    if args.mechanism == "netns":
        try:
            remove_netns(args.name)
        except OSError:
            pass
    if args.lock_fd is not None:
        try:
            unlink_lock(Path(args.lock_path), args.lock_fd)
        except OSError:
            pass
    return 2 if survivors else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.sandbox.guardian", description=__doc__.splitlines()[0])
    parser.add_argument("--mechanism", choices=("netns", "userns"), required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--grace", type=float, default=3.0)
    parser.add_argument("--lock-fd", type=int)
    parser.add_argument("--lock-path")
    parser.add_argument("--no-watch", action="store_true")
    args = parser.parse_args(argv)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # until there is something to clean
    try:
        owner_fd: int | None = os.pidfd_open(args.owner)
    except OSError:
        owner_fd = None
    if owner_fd is None or os.getppid() != args.owner:
        _report({"ok": False, "stage": "watch owner", "errno": None, "error": f"owner pid {args.owner} is gone"})
        return 1
    try:
        if args.mechanism == "netns":
            _create_netns(args.name)
        else:
            _create_userns()
        try:
            links = asyncio.run(_lo_up())
        except Exception as e:
            raise _Failed("bring lo up over netlink (AsyncIPRoute)", e) from e
        net_inode = os.stat("/proc/self/ns/net").st_ino
        user_inode = os.stat("/proc/self/ns/user").st_ino
    except _Failed as f:
        if args.mechanism == "netns":
            try:
                remove_netns(args.name)
            except OSError:
                pass
        _report({"ok": False, "stage": f.stage, "errno": f.errno, "error": f.error})
        return 1
    # From the ok report on, the owner may SIGTERM us at once (it is told our
    # pid there). A SIGTERM that lands before _watch is remembered, not
    # ignored: CI once sent it between the report and the handler, and the
    # sandboxed process outlived the guardian's "cleanup".
    early: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: early.append(signum))
    _report({"ok": True, "pid": os.getpid(), "net_inode": net_inode, "user_inode": user_inode, "links": links})
    _detach_stdio()
    try:
        signal.signal(signal.SIGTERM, _on_sigterm)
        if early:
            raise _Stop()
        reason = _watch(owner_fd, watch=not args.no_watch)
    except _Stop:
        reason = "SIGTERM"
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleanup runs to the end
    if reason.startswith("owner"):
        # Nobody waits for a graceful stop any more, and everything must be
        # gone within about 2 s of the owner's death.
        args.grace = min(args.grace, OWNER_DEATH_GRACE_S)
    return _cleanup(args, net_inode)


if __name__ == "__main__":
    sys.exit(main())
