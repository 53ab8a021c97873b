"""A private network namespace holding only `lo`, with processes spawned into it.

One API, two mechanisms (docs/sandbox.md):

    netns   root: a named namespace `kst-<pid>-<rand>` created with pyroute2 and
            bind-mounted at /run/netns/NAME.
    userns  unprivileged: an unnamed user+net namespace (uid mapped to root inside).

All namespace work happens in a helper process, `python -m harness.sandbox.guardian`,
never in the harness process itself: the harness may already run threads
(asyncio's child watcher starts one per subprocess) and pyroute2 forks. The
guardian creates the namespace, lives in it (it is the holder that keeps an
unnamed namespace alive), brings `lo` up over netlink, reports the namespace's
inode and then watches its owner through a pidfd. Processes are spawned with
`nsenter` on namespace fds the owner pinned, so nothing leaks into the target.

Cleanup runs three ways and every one is idempotent:
  - `Sandbox.aclose()`: SIGTERM every process whose /proc/PID/ns/net is ours,
    grace, SIGKILL, reap, remove the namespace, unlink the lock file;
  - the guardian does the same when its owner dies (even by SIGKILL);
  - `sweep_stale()`, run by every `start()`, removes namespaces whose owner and
    guardian are both gone, gated by an flock on `<lock_dir>/<name>.lock` that
    the owner (and the guardian, which shares the open file) holds for life.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno as errno_mod
import fcntl
import json
import math
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import time
from pathlib import Path
from typing import Any, Iterable

from ..aio import finish_shielded as _finish_shielded
from ..aio import hurried
from ..errors import SandboxCleanupError, UsageError

__all__ = [
    "MECHANISMS",
    "NETNS_DIR",
    "Sandbox",
    "SandboxCleanupError",
    "SandboxError",
    "default_lock_dir",
    "processes_in",
    "sweep_stale",
]

MECHANISMS = ("auto", "netns", "userns")
NETNS_DIR = Path("/run/netns")

# Bounds of every wait in here, so a wedged helper surfaces as a named error.
GUARDIAN_READY_TIMEOUT_S = 15.0
GUARDIAN_EXIT_TIMEOUT_S = 10.0
KILL_TIMEOUT_S = 5.0
SWEEP_GRACE_S = 0.5
_POLL_S = 0.01

_MNT_DETACH = 2
_PREFIX_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")
# Suites that share a host (parallel test workers, two CI jobs) name their
# namespaces apart with it: a sweep removes only its own prefix's stale ones.
PREFIX_ENV = "KSTRESS_NS_PREFIX"


def default_prefix() -> str:
    """The namespaces' name prefix: $KSTRESS_NS_PREFIX, else `kst`."""
    prefix = os.environ.get(PREFIX_ENV) or "kst"
    if not _PREFIX_RE.match(prefix):
        raise UsageError(f"{PREFIX_ENV}={prefix!r} is invalid: 1-16 lowercase letters/digits starting with a letter, e.g. kst or kstw1")
    return prefix

_HINTS = {
    "netns": {
        errno_mod.EPERM: "creating a named network namespace needs CAP_SYS_ADMIN in the initial "
        "namespaces (real root); run as root or use mechanism='userns'",
        errno_mod.EACCES: "creating a named network namespace needs root (it mounts under /run/netns); "
        "run as root or use mechanism='userns'",
    },
    "userns": {
        errno_mod.EPERM: "unprivileged user namespaces are refused here (kernel.unprivileged_userns_clone=0, "
        "a seccomp or AppArmor policy, or a multi-threaded caller); run as root to use mechanism='netns'",
        errno_mod.ENOSPC: "the user namespace limit is reached (/proc/sys/user/max_user_namespaces is 0 "
        "or exhausted); raise it or run as root to use mechanism='netns'",
        errno_mod.EINVAL: "the kernel rejected the user namespace (is CONFIG_USER_NS enabled?)",
    },
}


class SandboxError(UsageError):
    """A sandbox could not be created or used; says which mechanism failed and why.

    `mechanism` is "netns" or "userns" (or "auto" when every fallback failed),
    `errno` is the OS error number when there was one, `reason` the bare cause."""

    def __init__(self, mechanism: str, reason: str, errno: int | None = None, hint: str | None = None) -> None:
        self.mechanism = mechanism
        self.reason = reason
        self.errno = errno
        if hint is None and errno is not None:
            hint = _HINTS.get(mechanism, {}).get(errno)
        detail = reason
        if errno is not None and "[Errno" not in reason:
            detail += f" [Errno {errno}] {os.strerror(errno)}"
        if hint:
            detail += f" — {hint}"
        self.detail = detail
        super().__init__(f"sandbox mechanism {mechanism!r} failed: {detail}")


# --------------------------------------------------------------------------- /proc helpers


def ns_inode(pid: int | str, kind: str = "net") -> int | None:
    """The inode of /proc/PID/ns/KIND, or None when the process is gone, a
    zombie, or not ours to inspect."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/{kind}")
    except OSError:
        return None
    try:
        return int(link[link.index("[") + 1 : -1])
    except ValueError:
        return None


def processes_in(net_inode: int, *, user_inode: int | None = None, exclude: Iterable[int] = ()) -> list[int]:
    """Host pids of every live process whose network namespace has this inode
    (and, when given, whose user namespace has `user_inode`).

    The caller must keep the namespace pinned (an open fd) for the inode to
    mean this namespace: a freed namespace's inode number is reused."""
    skip = set(exclude)
    found = []
    try:
        entries = os.scandir("/proc")
    except OSError:
        return found
    with entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            if pid in skip or ns_inode(pid) != net_inode:
                continue
            if user_inode is not None and ns_inode(pid, "user") != user_inode:
                continue
            found.append(pid)
    return sorted(found)


def _signal_if_in(pid: int, sig: int, net_inode: int, user_inode: int | None) -> bool:
    """Signal `pid` only if it is still in the namespace. The pidfd pins the
    process, so a pid reused between the scan and the kill is never hit."""
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False
    try:
        if ns_inode(pid) != net_inode:
            return False
        if user_inode is not None and ns_inode(pid, "user") != user_inode:
            return False
        signal.pidfd_send_signal(pidfd, sig)
        return True
    except OSError:
        return False
    finally:
        os.close(pidfd)


def terminate_sync(
    net_inode: int,
    *,
    grace_s: float,
    user_inode: int | None = None,
    exclude: Iterable[int] = (),
    kill_timeout_s: float = KILL_TIMEOUT_S,
) -> list[int]:
    """SIGTERM everything in the namespace, wait up to `grace_s`, SIGKILL what is
    left until nothing is. Returns survivors (only a process stuck in the kernel
    survives SIGKILL). Blocking: for the guardian and the sweep."""
    exclude = tuple(exclude)

    def scan() -> list[int]:
        return processes_in(net_inode, user_inode=user_inode, exclude=exclude)

    pids = scan()
    for pid in pids:
        _signal_if_in(pid, signal.SIGTERM, net_inode, user_inode)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(_POLL_S)
        pids = scan()
    deadline = time.monotonic() + kill_timeout_s
    while pids:
        for pid in pids:
            _signal_if_in(pid, signal.SIGKILL, net_inode, user_inode)
        if time.monotonic() >= deadline:
            break
        time.sleep(_POLL_S)
        pids = scan()
    return pids


# --------------------------------------------------------------------------- namespace and lock files


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def remove_netns(name: str) -> bool:
    """Unmount and unlink /run/netns/NAME. True when something was removed.
    Detaching (not a plain umount) so a namespace still in use by a process
    does not make the removal fail; the namespace itself dies with its last user."""
    path = NETNS_DIR / name
    removed = False
    if _libc().umount2(str(path).encode(), _MNT_DETACH) == 0:
        removed = True
    else:
        err = ctypes.get_errno()
        if err not in (errno_mod.EINVAL, errno_mod.ENOENT):  # EINVAL: not a mount point (any more)
            raise OSError(err, f"umount {path}: {os.strerror(err)}", str(path))
    try:
        os.unlink(path)
        removed = True
    except FileNotFoundError:
        pass
    return removed


def default_lock_dir() -> Path:
    """/run/kstress for root, else $XDG_RUNTIME_DIR/kstress, else /tmp/kstress-<uid>."""
    if os.geteuid() == 0:
        return Path("/run/kstress")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        return Path(xdg) / "kstress"
    return Path(f"/tmp/kstress-{os.geteuid()}")


def _ensure_lock_dir(path: Path, mechanism: str) -> Path:
    """Create the lock dir 0700, refusing one someone else controls (a planted
    /tmp/kstress-<uid> could otherwise feed us lock files and records)."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(path)
    except OSError as e:
        raise SandboxError(mechanism, f"cannot create lock dir {path}: {e.strerror}", e.errno,
                           hint="pass lock_dir= a directory you own") from e
    if not stat.S_ISDIR(st.st_mode):
        raise SandboxError(mechanism, f"lock dir {path} is not a directory (a symlink?)",
                           hint="remove it or pass lock_dir= a directory you own")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SandboxError(
            mechanism,
            f"lock dir {path} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}; "
            f"it must be owned by uid {os.geteuid()} and not group/world writable",
            hint="remove it or pass lock_dir= a directory you own",
        )
    return path


def _read_record(fd: int) -> dict[str, Any]:
    try:
        data = os.pread(fd, 65536, 0)
        record = json.loads(data.decode()) if data else {}
        return record if isinstance(record, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_record(fd: int, record: dict[str, Any]) -> None:
    data = json.dumps(record, sort_keys=True).encode() + b"\n"
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def unlink_lock(path: Path, fd: int) -> None:
    """Unlink the lock file only if the path still names the file behind `fd`."""
    try:
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True  # gone altogether


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------- sweep


def sweep_stale(lock_dir: Path | None = None, *, prefix: str | None = None) -> list[str]:
    """Remove `<prefix>-*` namespaces whose owner is gone; return their names.

    A namespace is stale when its lock file in `lock_dir` can be locked (neither
    owner nor guardian holds it), or — root only, for a named namespace with no
    lock file there — when the owner pid in its name is dead. A namespace whose
    lock is held, or whose named owner is alive, is never touched (its lock may
    live in another lock dir). Processes inside a stale namespace are SIGTERMed,
    then SIGKILLed after SWEEP_GRACE_S."""
    lock_dir = Path(lock_dir) if lock_dir is not None else default_lock_dir()
    prefix = prefix if prefix is not None else default_prefix()
    names: set[str] = set()
    if lock_dir.is_dir():
        names.update(p.name[: -len(".lock")] for p in lock_dir.glob(f"{prefix}-*.lock"))
    is_root = os.geteuid() == 0
    if is_root and NETNS_DIR.is_dir():
        names.update(p.name for p in NETNS_DIR.glob(f"{prefix}-*"))
    if lock_dir.is_dir():
        for staging in lock_dir.glob(f".{prefix}-*.new"):
            # an owner died between creating and naming its lock file; a live
            # owner may be between creating it and locking it, so its pid (in
            # the name) must be dead too
            pid = staging.name[len(prefix) + 2 :].split("-", 1)[0]
            if not (pid.isdigit() and _pid_alive(int(pid))):
                _remove_if_unlocked(staging)
    removed = []
    for name in sorted(names):
        try:
            if _sweep_one(lock_dir, name, prefix, is_root):
                removed.append(name)
        except OSError:
            continue  # not ours to remove (permissions) or raced with its owner: leave it
    return removed


def _remove_if_unlocked(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        unlink_lock(path, fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _owner_pid_from_name(name: str, prefix: str) -> int | None:
    m = re.fullmatch(rf"{re.escape(prefix)}-(\d+)-[0-9a-f]+", name)
    return int(m.group(1)) if m else None


def _sweep_one(lock_dir: Path, name: str, prefix: str, is_root: bool) -> bool:
    lock_path = lock_dir / f"{name}.lock"
    netns_path = NETNS_DIR / name
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    if fd is None:
        owner = _owner_pid_from_name(name, prefix)
        if not is_root or owner is None or _pid_alive(owner) or not os.path.lexists(netns_path):
            return False
        _clean_netns(name)
        return True
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live owner or guardian holds it
        try:
            if os.stat(lock_path).st_ino != os.fstat(fd).st_ino:
                return False  # unlinked and replaced under us: not the file we locked
        except FileNotFoundError:
            return False
        record = _read_record(fd)
        if is_root and os.path.lexists(netns_path):
            _clean_netns(name)
        elif record.get("mechanism") == "userns" and record.get("net_inode") and record.get("user_inode"):
            # An unnamed namespace cannot be pinned once its holder is gone, so
            # its inode may be reused: both the net and the user inode must match.
            terminate_sync(int(record["net_inode"]), user_inode=int(record["user_inode"]), grace_s=SWEEP_GRACE_S)
        unlink_lock(lock_path, fd)
        return True
    finally:
        os.close(fd)


def _clean_netns(name: str) -> None:
    path = NETNS_DIR / name
    try:
        pin = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        st = os.fstat(pin)
        # Not on nsfs: the empty placeholder of a creation that failed half way;
        # its inode is a filesystem's and must not be matched against namespaces.
        if st.st_dev == os.stat("/proc/self/ns/net").st_dev:
            terminate_sync(st.st_ino, grace_s=SWEEP_GRACE_S)
    finally:
        os.close(pin)
    remove_netns(name)


# --------------------------------------------------------------------------- the sandbox


def _harness_pythonpath(env: dict[str, str]) -> str:
    """PYTHONPATH for the guardian: the dir holding this `harness` package first,
    so `python -m harness.sandbox.guardian` imports the same code as its owner."""
    root = str(Path(__file__).resolve().parent.parent)
    old = env.get("PYTHONPATH", "")
    return root + (os.pathsep + old if old else "")


class Sandbox:
    """A private network namespace with only `lo` (up); see the module docstring.

        async with Sandbox() as sb:
            proc = await sb.spawn(["refkernel", "--socket", path, ...])
            sb.pids()   # every process inside, as host pids

    `mechanism`: "auto" (netns when root, falling back to userns if that is
    refused; userns otherwise), "netns" or "userns". `grace_s`: SIGTERM -> SIGKILL
    delay on close. `lock_dir`: where the per-namespace lock files live.
    `guardian`: watch the owner and clean up when it dies; with False the helper
    only holds the namespace, and a dead owner's namespace is left to the next
    sweep."""

    def __init__(
        self,
        *,
        mechanism: str = "auto",
        grace_s: float = 3.0,
        prefix: str | None = None,
        lock_dir: Path | None = None,
        guardian: bool = True,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise SandboxError(
                str(mechanism), f"unknown mechanism {mechanism!r}",
                hint=f"use one of {', '.join(MECHANISMS)}",
            )
        if not isinstance(grace_s, (int, float)) or not math.isfinite(grace_s) or grace_s < 0:
            raise UsageError(f"sandbox grace_s={grace_s!r} must be a finite number of seconds >= 0, e.g. 3.0")
        prefix = default_prefix() if prefix is None else prefix
        if not isinstance(prefix, str) or not _PREFIX_RE.match(prefix):
            raise UsageError(
                f"sandbox prefix={prefix!r} must be 1-16 lowercase letters/digits starting with a letter, e.g. 'kst'"
            )
        self.requested_mechanism = mechanism
        self.mechanism: str = mechanism
        self.grace_s = float(grace_s)
        self.prefix = prefix
        self.lock_dir: Path | None = Path(lock_dir) if lock_dir is not None else None
        self.guardian = guardian
        self.name: str | None = None
        self.net_inode: int | None = None
        self.user_inode: int | None = None
        self.guardian_pid: int | None = None
        self.lock_path: Path | None = None
        self.swept: list[str] = []
        self.timings: dict[str, float] = {}
        self._lock_fd: int | None = None
        self._net_fd: int | None = None
        self._user_fd: int | None = None
        self._helper: asyncio.subprocess.Process | None = None
        self._nsenter: str | None = None
        self._procs: list[asyncio.subprocess.Process] = []
        self._started = False
        self._close_task: asyncio.Task | None = None

    def __repr__(self) -> str:
        state = "closed" if self._close_task else ("running" if self._started else "new")
        return f"<Sandbox {self.mechanism} {self.name} net:[{self.net_inode}] {state}>"

    # ----------------------------------------------------------------- start

    async def __aenter__(self) -> "Sandbox":
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def start(self) -> "Sandbox":
        if self._started or self._close_task is not None:
            raise UsageError("Sandbox.start() called twice: a Sandbox is started once; make a new one")
        self._started = True
        t0 = time.monotonic()
        self._nsenter = shutil.which("nsenter")
        if self._nsenter is None:
            raise SandboxError(self.requested_mechanism, "nsenter not found on PATH",
                               hint="install util-linux (apt-get install util-linux)")
        self.lock_dir = _ensure_lock_dir(self.lock_dir or default_lock_dir(), self.requested_mechanism)
        self.swept = sweep_stale(self.lock_dir, prefix=self.prefix)
        self.timings["sweep_s"] = time.monotonic() - t0
        if self.requested_mechanism == "auto":
            order = ["netns", "userns"] if os.geteuid() == 0 else ["userns"]
        else:
            order = [self.requested_mechanism]
        failures: list[SandboxError] = []
        for mechanism in order:
            try:
                await self._start_with(mechanism)
            except SandboxError as e:
                failures.append(e)
                continue
            self.timings["start_s"] = time.monotonic() - t0
            return self
        if len(failures) == 1:
            raise failures[0]
        raise SandboxError(
            "auto", "no mechanism worked: " + "; ".join(f"{e.mechanism}: {e.detail}" for e in failures),
            errno=failures[-1].errno, hint="",
        )

    async def _start_with(self, mechanism: str) -> None:
        self.mechanism = mechanism
        self.name = f"{self.prefix}-{os.getpid()}-{secrets.token_hex(4)}"
        self.lock_path = self.lock_dir / f"{self.name}.lock"
        record = {"mechanism": mechanism, "name": self.name, "owner": os.getpid(), "uid": os.geteuid()}
        # Locked before it appears under its real name: a sweep that globs for
        # lock files must never find one it can lock while its owner lives.
        staging = self.lock_dir / f".{self.name}.new"
        try:
            self._lock_fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            _write_record(self._lock_fd, record)
            os.rename(staging, self.lock_path)
        except OSError as e:
            if self._lock_fd is not None:
                os.close(self._lock_fd)
                self._lock_fd = None
            try:
                os.unlink(staging)
            except OSError:
                pass
            raise SandboxError(mechanism, f"cannot create lock file {self.lock_path}: {e.strerror}", e.errno) from e
        try:
            ready = await self._start_helper(mechanism)
            self._pin(mechanism, ready)
            record.update(net_inode=self.net_inode, user_inode=self.user_inode, guardian=self.guardian_pid)
            _write_record(self._lock_fd, record)
        except BaseException:
            await _finish_shielded(self._teardown(grace_s=0.0))
            self._reset()
            raise

    async def _start_helper(self, mechanism: str) -> dict[str, Any]:
        env = dict(os.environ)
        env["PYTHONPATH"] = _harness_pythonpath(env)
        argv = [
            sys.executable, "-m", "harness.sandbox.guardian",
            "--mechanism", mechanism, "--name", self.name, "--owner", str(os.getpid()),
            "--grace", repr(self.grace_s),
        ]
        pass_fds: tuple[int, ...] = ()
        if self.guardian:
            # The guardian shares our open lock file, so the lock stays held
            # until both of us are gone: a sweep never races the guardian.
            argv += ["--lock-fd", str(self._lock_fd), "--lock-path", str(self.lock_path)]
            pass_fds = (self._lock_fd,)
        else:
            argv += ["--no-watch"]
        t0 = time.monotonic()
        try:
            self._helper = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd="/",
                pass_fds=pass_fds,
                start_new_session=True,
            )
        except OSError as e:
            raise SandboxError(mechanism, f"cannot start the guardian ({sys.executable}): {e.strerror}", e.errno) from e
        self.guardian_pid = self._helper.pid
        try:
            line = await asyncio.wait_for(self._helper.stdout.readline(), GUARDIAN_READY_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise SandboxError(
                mechanism, f"the guardian (pid {self._helper.pid}) did not report within {GUARDIAN_READY_TIMEOUT_S:g} s",
                hint="is the machine overloaded? see docs/sandbox.md",
            ) from None
        try:
            ready = json.loads(line.decode()) if line.strip() else None
        except ValueError:
            ready = None
        if not isinstance(ready, dict):
            err = await self._helper_stderr()
            raise SandboxError(mechanism, f"the guardian exited without reporting: {err or line!r}")
        # The guardian points its stdout and stderr at /dev/null once ready:
        # drain both to EOF so no pipe outlives the handshake.
        err = await self._helper_stderr()
        if not ready.get("ok"):
            raise SandboxError(
                mechanism,
                f"{ready.get('stage', '?')}: {ready.get('error', '?')}" + (f"\n{err}" if err else ""),
                ready.get("errno"),
            )
        self.timings["guardian_ready_s"] = time.monotonic() - t0
        return ready

    async def _helper_stderr(self) -> str:
        try:
            out = await asyncio.wait_for(self._helper.stderr.read(), 2.0)
            await asyncio.wait_for(self._helper.stdout.read(), 2.0)
        except asyncio.TimeoutError:
            return ""
        return out.decode(errors="replace").strip()[-2000:]

    def _pin(self, mechanism: str, ready: dict[str, Any]) -> None:
        """Hold fds on the namespace(s) for the sandbox's life: the inode we key
        every scan on stays this namespace's only while something pins it."""
        try:
            if mechanism == "netns":
                self._net_fd = os.open(NETNS_DIR / self.name, os.O_RDONLY | os.O_CLOEXEC)
            else:
                self._user_fd = os.open(f"/proc/{self.guardian_pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
                self._net_fd = os.open(f"/proc/{self.guardian_pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                self.user_inode = os.fstat(self._user_fd).st_ino
        except OSError as e:
            raise SandboxError(mechanism, f"cannot pin the namespace: {e}", e.errno) from e
        self.net_inode = os.fstat(self._net_fd).st_ino
        if self.net_inode != ready.get("net_inode") or (
            self.user_inode is not None and self.user_inode != ready.get("user_inode")
        ):
            raise SandboxError(
                mechanism,
                f"the pinned namespace (net:[{self.net_inode}]) is not the one the guardian created "
                f"(net:[{ready.get('net_inode')}]): the guardian died or the name was replaced",
            )
        if self._helper.returncode is not None:
            raise SandboxError(mechanism, f"the guardian exited ({self._helper.returncode}) right after starting")

    # ----------------------------------------------------------------- use

    def _check_running(self) -> None:
        if not self._started or self.net_inode is None:
            raise UsageError("the sandbox is not started: use `async with Sandbox() as sb` or `await sb.start()`")
        if self._close_task is not None:
            raise UsageError(f"the sandbox {self.name} is closed: make a new one")

    def _nsenter_argv(self) -> list[str]:
        me = os.getpid()
        # /proc/<owner>/fd/N rather than passing the fd down: nsenter opens the
        # path itself, so the target does not inherit a namespace fd.
        if self.mechanism == "netns":
            return [self._nsenter, f"--net=/proc/{me}/fd/{self._net_fd}", "--"]
        return [
            self._nsenter, "--preserve-credentials",
            f"--user=/proc/{me}/fd/{self._user_fd}", f"--net=/proc/{me}/fd/{self._net_fd}", "--",
        ]

    async def spawn(
        self,
        argv: list[str],
        *,
        env: dict | None = None,
        cwd: str | Path | None = None,
        stdout=None,
        stderr=None,
        stdin=None,
        start_new_session: bool = True,
    ) -> asyncio.subprocess.Process:
        """Start `argv` inside the namespace. The returned process is the target
        itself (nsenter execs it), so `.pid` is its host pid and signals reach it.
        Raises FileNotFoundError / PermissionError like exec would."""
        self._check_running()
        if isinstance(argv, (str, bytes)) or not argv or not all(isinstance(a, (str, os.PathLike)) for a in argv):
            raise UsageError(f"spawn argv={argv!r} must be a non-empty list of strings, e.g. ['sleep', '1']")
        argv = [os.fspath(a) for a in argv]
        path = (env if env is not None else os.environ).get("PATH", os.defpath)
        exe = argv[0] if os.sep in argv[0] else shutil.which(argv[0], mode=os.F_OK, path=path)
        if exe is None or not os.path.exists(exe):
            raise FileNotFoundError(errno_mod.ENOENT, f"cannot spawn in sandbox: {os.strerror(errno_mod.ENOENT)}", argv[0])
        if os.path.isdir(exe) or not os.access(exe, os.X_OK):
            raise PermissionError(errno_mod.EACCES, "cannot spawn in sandbox: not executable", exe)
        proc = await asyncio.create_subprocess_exec(
            *self._nsenter_argv(), *argv,
            env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
            start_new_session=start_new_session,
        )
        self._procs.append(proc)
        await self._entered(proc, argv)
        return proc

    async def _entered(self, proc: asyncio.subprocess.Process, argv: list[str]) -> None:
        """Return once `proc` is inside (or already gone), so that pids() right
        after spawn() lists it: nsenter needs a moment to setns and exec."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + KILL_TIMEOUT_S
        while ns_inode(proc.pid) != self.net_inode:
            if proc.returncode is not None or _is_zombie(proc.pid):
                return  # nsenter or the target failed at once: its exit status tells why
            if loop.time() >= deadline:
                proc.kill()
                await _reap(proc)
                raise SandboxError(self.mechanism, f"{argv[0]} (pid {proc.pid}) did not enter {self.name} "
                                   f"within {KILL_TIMEOUT_S:g} s")
            await asyncio.sleep(0.001)

    def pids(self) -> list[int]:
        """Host pids of every live process in the namespace (the guardian excluded)."""
        if self.net_inode is None or self._net_fd is None:
            return []
        exclude = (self.guardian_pid,) if self.guardian_pid else ()
        return processes_in(self.net_inode, exclude=exclude)

    async def run(self, argv: list[str], timeout_s: float) -> tuple[int, str, str]:
        """Run `argv` inside to completion: (returncode, stdout, stderr). Killed
        (its whole process group) and TimeoutError after `timeout_s`."""
        if not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
            raise UsageError(f"run timeout_s={timeout_s!r} must be > 0 seconds")
        proc = await self.spawn(
            argv, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(proc.communicate(), timeout_s)
        except BaseException as e:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            await asyncio.shield(_reap(proc))
            if isinstance(e, asyncio.TimeoutError):
                raise TimeoutError(f"{argv!r} did not finish within {timeout_s:g} s inside sandbox {self.name}") from None
            raise
        return proc.returncode, out.decode(errors="replace"), err.decode(errors="replace")

    # ----------------------------------------------------------------- close

    async def aclose(self) -> None:
        """Kill everything inside, remove the namespace and the lock file.
        Idempotent; finishes even when the awaiting task is cancelled (the
        cancellation is re-raised afterwards)."""
        if self._close_task is None:
            if not self._started:
                self._close_task = asyncio.get_running_loop().create_future()
                self._close_task.set_result(None)
                return
            self._close_task = asyncio.get_running_loop().create_task(self._close())
        await _finish_shielded(self._close_task)

    async def _close(self) -> None:
        t0 = time.monotonic()
        survivors = await self._teardown(grace_s=self.grace_s)
        self.timings["close_s"] = time.monotonic() - t0
        if survivors:
            raise SandboxCleanupError(
                f"sandbox mechanism {self.mechanism!r} failed: processes {survivors} in {self.name} survived SIGKILL "
                f"for {KILL_TIMEOUT_S:g} s (stuck in the kernel, state D?); the guardian keeps trying when kstress exits"
            )

    async def _teardown(self, grace_s: float) -> list[int]:
        survivors: list[int] = []
        if self.net_inode is not None and self._net_fd is not None:
            survivors = await self._terminate(grace_s)
        for proc in self._procs:
            if proc.returncode is None:
                try:
                    proc.kill()  # still in nsenter, never made it into the namespace
                except ProcessLookupError:
                    pass
            await _reap(proc)
        if self._helper is not None:
            await self._stop_helper()
        if self.mechanism == "netns" and self.name and os.geteuid() == 0:
            try:
                remove_netns(self.name)
            except OSError:
                pass  # the guardian removed it, or it was never created
        for attr in ("_net_fd", "_user_fd"):
            fd = getattr(self, attr)
            if fd is not None:
                os.close(fd)
                setattr(self, attr, None)
        self._release_lock()
        return survivors

    async def _terminate(self, grace_s: float) -> list[int]:
        exclude = (self.guardian_pid,) if self.guardian_pid else ()

        def scan() -> list[int]:
            return processes_in(self.net_inode, exclude=exclude)

        pids = scan()
        for pid in pids:
            _signal_if_in(pid, signal.SIGTERM, self.net_inode, None)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        while pids and loop.time() < deadline and not hurried():
            await asyncio.sleep(_POLL_S)
            pids = scan()
        deadline = loop.time() + KILL_TIMEOUT_S
        while pids:
            for pid in pids:
                _signal_if_in(pid, signal.SIGKILL, self.net_inode, None)
            if loop.time() >= deadline:
                break
            await asyncio.sleep(_POLL_S)
            pids = scan()
        return pids

    async def _stop_helper(self) -> None:
        helper = self._helper
        if helper.returncode is None and helper.stdin is not None:
            try:
                helper.stdin.write(b"close\n")
                await asyncio.wait_for(helper.stdin.drain(), 1.0)
            except (OSError, asyncio.TimeoutError):
                pass
            helper.stdin.close()
        try:
            await asyncio.wait_for(helper.wait(), GUARDIAN_EXIT_TIMEOUT_S)
        except asyncio.TimeoutError:
            try:
                helper.kill()
            except ProcessLookupError:
                pass
            await _reap(helper)
        if helper.stdin is not None:
            try:
                await helper.stdin.wait_closed()
            except OSError:
                pass

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            if self.lock_path is not None:
                unlink_lock(self.lock_path, self._lock_fd)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _reset(self) -> None:
        self.name = self.net_inode = self.user_inode = self.guardian_pid = self.lock_path = None
        self._helper = None
        self._procs = []


async def _reap(proc: asyncio.subprocess.Process, timeout_s: float = KILL_TIMEOUT_S) -> None:
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
    except asyncio.TimeoutError:
        pass
