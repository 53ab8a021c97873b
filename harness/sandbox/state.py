"""A sandbox's state file (``state.json`` in its run dir), and the one reader
of it. The launcher writes it; every scenario, ``kcli``, ``status`` and
``stop`` read it through :func:`read_state`, so each sees the same sandbox:
where its kernel listens and how to reach it (the transport, the address, and
for TCP or a WebSocket inside the namespace the connector's socket), the
token, the protocol adapter, and everything needed to plan and judge turns
exactly as its mock plans them (tool times, catalog).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mock.catalog import DEFAULT_CATALOG, Catalog
from mock.markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS

from ..judge.contract import Contract
from ..judge.contract import from_json as contract_from_json
from ..errors import UsageError
from .target import LISTENS, load_catalog_file, redact
from ..wire.transport import Address, parse_address

STATE_NAME = "state.json"


def invoking_ids() -> tuple[int, int]:
    """The user a run belongs to: the sudo caller when run through sudo."""
    if os.geteuid() == 0 and os.environ.get("SUDO_UID", "").isdigit():
        return int(os.environ["SUDO_UID"]), int(os.environ.get("SUDO_GID", os.environ["SUDO_UID"]))
    return os.getuid(), os.getgid()


def state_home() -> Path:
    """Where the pointer to the current sandbox lives, per invoking user
    ($KSTRESS_HOME overrides: several independent sandboxes, tests)."""
    if os.environ.get("KSTRESS_HOME"):
        return Path(os.environ["KSTRESS_HOME"])
    uid, _ = invoking_ids()
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.geteuid() != 0 and Path(xdg).is_dir():
        return Path(xdg) / "kstress"
    return Path(tempfile.gettempdir()) / f"kstress-{uid}"


def pointer_path() -> Path:
    return state_home() / "current"


def secure_home(create: bool = True) -> Path:
    """The state home, checked: a directory (not a symlink) owned by the
    invoking user and closed to everyone else (0700); created so when missing.
    Anything else is refused: its default name in /tmp is predictable, and a
    pointer planted there would aim `kstress stop` at any process."""
    home = state_home()
    uid, gid = invoking_ids()
    if create and not os.path.lexists(home):
        try:
            home.mkdir(mode=0o700, parents=True)
        except FileExistsError:
            pass  # made meanwhile by another kstress: checked below like any other
        except OSError as exc:
            raise UsageError(f"state home {home}: cannot create it ({exc.strerror}); set KSTRESS_HOME to a directory of yours") from None
        else:
            if os.geteuid() == 0 and uid != 0:
                os.chown(home, uid, gid)
    try:
        st = os.lstat(home)
    except FileNotFoundError:
        return home  # nothing there yet, and not to be created: nothing to trust either
    fix = f"remove it (rm -r {home}) or set KSTRESS_HOME to a directory of yours with mode 0700"
    if stat.S_ISLNK(st.st_mode):
        raise UsageError(f"state home {home} is a symlink; kstress does not follow it: {fix}")
    if not stat.S_ISDIR(st.st_mode):
        raise UsageError(f"state home {home} is not a directory: {fix}")
    if st.st_uid not in (uid, os.geteuid()):
        raise UsageError(f"state home {home} is owned by uid {st.st_uid}, not by you (uid {uid}): {fix}")
    if st.st_mode & 0o077:
        raise UsageError(f"state home {home} has mode {stat.S_IMODE(st.st_mode):o}, open to other users (want 700): {fix}")
    return home


def open_nofollow(path: Path, flags: int, mode: int = 0o600) -> int:
    """os.open that refuses a symlink in the last component (ELOOP)."""
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def read_nofollow(path: Path) -> str:
    fd = open_nofollow(path, os.O_RDONLY)
    with os.fdopen(fd, "r") as f:
        return f.read()


@dataclass(frozen=True)
class SandboxState:
    """What a running (or stopped) sandbox holds."""

    path: Path
    status: str
    run_dir: Path
    socket: str  # unix: the socket's path; tcp, ws: the address (as `address`)
    transport: str = "unix"  # unix | tcp | ws
    address: str | None = None  # unix:PATH, tcp:127.0.0.1:PORT, ws://127.0.0.1:PORT/PATH
    connector: str | None = None  # tcp, ws: the connector's socket, the way in to the namespace
    token: str | None = None
    protocol: str | None = None
    llm_url: str = ""
    mock_socket: str | None = None
    namespace: str | None = None
    mechanism: str | None = None
    net_inode: int | None = None
    supervisor_pid: int | None = None
    supervisor_started: float | None = None  # its process start time: with the pid, who it is
    supervisor_cmdline: tuple[str, ...] = ()
    target_pid: int | None = None
    mock_pid: int | None = None
    argv: tuple[str, ...] = ()
    target_name: str | None = None
    bin: str | None = None
    bin_sha256: str | None = None
    tool_ms: int = DEFAULT_TOOL_MS
    mixed_ms: int = DEFAULT_MIXED_MS
    tools: str | None = None  # the mock's tool catalog file, None for the default
    returncode: int | None = None
    contract: Contract | None = None  # None: a state file from before contracts
    raw: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def mock_log(self) -> Path:
        return self.run_dir / "mock.jsonl"

    def catalog(self) -> Catalog:
        """The catalog the sandbox's mock plans with."""
        if not self.tools:
            return DEFAULT_CATALOG
        return load_catalog_file(self.tools, f"the catalog of the sandbox in {self.path}")

    def kernel_address(self) -> Address:
        """Where to connect: the unix socket, or the address inside the
        namespace together with the connector that reaches it."""
        if self.transport == "unix":
            return Address("unix", path=self.socket)
        where = f"state file {self.path}"
        if not self.connector:
            raise UsageError(f"{where}: a {self.transport} kernel without 'connector', the way into its namespace; the file is damaged (relaunch the sandbox)")
        a = parse_address(self.address or self.socket, f"{where}: address")
        if a.scheme != self.transport:
            raise UsageError(f"{where}: transport {self.transport!r} but address {a.url!r}; the file is damaged (relaunch the sandbox)")
        return Address(a.scheme, host=a.host, port=a.port, url_path=a.url_path, via=self.connector)

    def meta(self) -> dict[str, Any]:
        """The target's metadata as a run records it."""
        return {
            "name": self.target_name, "argv": redact(self.argv, (self.token,)), "bin": self.bin, "bin_sha256": self.bin_sha256,
            "namespace": self.namespace, "mechanism": self.mechanism, "sandbox_dir": str(self.run_dir), "launched": False,
            "transport": self.transport, "address": self.address or self.socket,
        }

    @classmethod
    def from_json(cls, path: Path, data: Any) -> "SandboxState":
        where = f"state file {path}"
        if not isinstance(data, dict):
            raise UsageError(f"{where}: a JSON {type(data).__name__}, not the object kstress launch writes; pass the state.json of a sandbox (--state)")

        def get(key: str, typ: type, required: bool = False, default: Any = None) -> Any:
            v = data.get(key)
            if v is None:
                if required:
                    raise UsageError(f"{where}: it has no {key!r}; it is not a state file kstress launch wrote (pass the state.json of a sandbox)")
                return default
            if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
                raise UsageError(f"{where}: {key!r} is {v!r}, not a {typ.__name__}; the file is damaged (relaunch the sandbox)")
            return v

        pids = data.get("pids") if isinstance(data.get("pids"), dict) else {}
        transport = get("transport", str, default="unix")
        if transport not in LISTENS:
            raise UsageError(f"{where}: 'transport' is {transport!r}, not one of {', '.join(LISTENS)}; the file is damaged (relaunch the sandbox)")
        argv = get("argv", list, default=[])
        if not all(isinstance(a, str) for a in argv):
            raise UsageError(f"{where}: 'argv' must be a list of strings; the file is damaged (relaunch the sandbox)")
        return cls(
            path=path,
            status=get("status", str, default="unknown"),
            run_dir=Path(get("run_dir", str, required=True)),
            socket=get("socket", str, required=True),
            transport=transport,
            address=get("address", str),
            connector=get("connector", str),
            token=get("token", str),
            protocol=get("protocol", str),
            llm_url=get("llm_url", str, default=""),
            mock_socket=get("mock_socket", str),
            namespace=get("namespace", str),
            mechanism=get("mechanism", str),
            net_inode=get("net_inode", int),
            supervisor_pid=get("supervisor_pid", int),
            supervisor_started=float(data["supervisor_started"]) if isinstance(data.get("supervisor_started"), (int, float)) else None,
            supervisor_cmdline=tuple(c for c in data.get("supervisor_cmdline") or () if isinstance(c, str)) if isinstance(data.get("supervisor_cmdline"), list) else (),
            target_pid=pids.get("target") if isinstance(pids.get("target"), int) else None,
            mock_pid=pids.get("mock") if isinstance(pids.get("mock"), int) else None,
            argv=tuple(argv),
            target_name=get("target_name", str),
            bin=get("bin", str),
            bin_sha256=get("bin_sha256", str),
            tool_ms=get("tool_ms", int, default=DEFAULT_TOOL_MS),
            mixed_ms=get("mixed_ms", int, default=DEFAULT_MIXED_MS),
            tools=get("tools", str),
            returncode=get("returncode", int),
            contract=contract_from_json(data.get("contract")),
            raw=dict(data),
        )


def read_state(path: Path) -> SandboxState:
    """The one reader of a sandbox's state file."""
    try:
        text = read_nofollow(path)
    except OSError as exc:
        why = "a symlink, which kstress does not follow" if exc.errno == errno.ELOOP else exc.strerror
        raise UsageError(f"state file {path}: cannot read it ({why}); pass the state.json of a running sandbox (--state)") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise UsageError(f"state file {path}: not valid JSON ({exc}); pass the state.json of a running sandbox (--state)") from None
    return SandboxState.from_json(path, data)
