"""Launch a target and the mock LLM together inside a sandbox.

``async with Launch(settings) as run:`` creates a run directory (0700, owned by
the invoking user -- SUDO_UID under sudo), a sandbox, the mock inside it (port
chosen inside the namespace; also reachable from the host through a unix socket
in the run dir), then the target inside it, and waits until the target's socket
accepts and the auth handshake succeeds. Leaving the block stops the target
(stop signal, grace, SIGKILL), records orphans, and tears everything down.

A target that listens on TCP or a WebSocket (``listen``) gets a port inside
the namespace, which the harness cannot reach from outside: the launcher
starts the sandbox's connector first (harness/sandbox/connector.py: it picks that
port and opens connections to it on request, handing them out over
``connector.sock`` in the run dir), and every client of the run dials through
it (harness/wire/transport.py: Dialer).
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import secrets
import selectors
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import psutil

from mock.markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS, MS_MAX, VERDICT_KEY_ENV

from ..aio import finish_shielded, grace, hurried
from ..wire.client import ConnError, KernelClient
from ..judge.contract import Contract
from ..errors import ConnectorGone, TargetError, UsageError
from ..wire.protocol import load_protocol
from .state import STATE_NAME, invoking_ids, pointer_path, state_home  # noqa: F401 - re-exported
from .target import REDACTED, TOKEN_ENV, TargetSpec, render, scrub
from ..wire.transport import Address, Dialer

SOCKET_NAME = "kernel.sock"
OWNER_LOCK = "owner.lock"
TEARDOWN_NAME = "teardown.json"  # a detached sandbox stopped cleanly: its directory is kept
MOCK_SOCKET_NAME = "mock.sock"
CONNECTOR_SOCKET_NAME = "connector.sock"
LOOPBACK = "127.0.0.1"
UNIX_PATH_MAX = 107  # sun_path is 108 bytes with the terminating NUL
# state.json's fields that hold a live secret: there while the sandbox runs (a
# later run reconnects, or checks verdicts, with them), null once it stopped --
# its directory is kept for its logs -- and never in any other field. A new
# secret in state.json goes here.
SECRET_FIELDS = ("token", "verdict_key")


def give_to_invoking_user(*paths: Path) -> None:
    """Under sudo, what a run creates belongs to the user who ran sudo."""
    uid, gid = invoking_ids()
    if os.geteuid() == 0 and uid != 0:
        for p in paths:
            os.chown(p, uid, gid)


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tail(path: Path, lines: int = 15) -> str:
    try:
        data = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(data[-lines:])


def read_line(proc: subprocess.Popen, timeout_s: float) -> str | None:
    """The first line ``proc`` writes on stdout (a ready line), newline
    included; what it wrote before closing stdout ('' for nothing) when it
    exits first; None when neither happens within ``timeout_s``. Reads the raw
    fd, so a partial line cannot block past the deadline."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout_s
    with selectors.DefaultSelector() as sel:
        sel.register(fd, selectors.EVENT_READ)
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            if sel.select(left):
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                buf += chunk
    return buf.decode(errors="replace")


@dataclass(frozen=True)
class LaunchSettings:
    target: TargetSpec
    mechanism: str = "auto"
    tool_ms: int = DEFAULT_TOOL_MS
    mixed_ms: int = DEFAULT_MIXED_MS
    mock_args: tuple[str, ...] = ()
    token: str | None = None
    run_root: Path | None = None
    mock_ready_timeout_s: float = 20.0
    sandbox_grace_s: float = 3.0
    label: str = "run"
    contract_pairs: tuple[str, ...] = ()  # --contract KEY=VALUE, over the target file's table

    def __post_init__(self) -> None:
        self.contract  # a bad --contract fails here, before anything starts
        # the mock would refuse these too, but only after a sandbox was made:
        # a bad value is the user's, so it is an error before anything starts
        for flag, v in (("--tool-ms", self.tool_ms), ("--mixed-ms", self.mixed_ms)):
            if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MS_MAX:
                raise UsageError(f"{flag} {v!r} is invalid: the mock's tool sleeps are whole milliseconds from 1 to {MS_MAX}")


    @property
    def contract(self) -> Contract:
        return self.target.contract_with(self.contract_pairs)


@dataclass
class TargetExit:
    returncode: int | None
    signalled: bool
    orphans: list[dict[str, Any]] = field(default_factory=list)


class Launch:
    """One target in a sandbox. With ``host`` (another Launch, already
    started) the target joins the host's sandbox and talks to the host's mock:
    several kernels in one namespace with one shared mock (several kernels at
    once, docs/targets.md). A joined launch owns only its target (and its
    connector): its directory is a subdirectory of the host's, and closing it
    leaves the sandbox and the mock to the host."""

    def __init__(self, settings: LaunchSettings, host: "Launch | None" = None, key: str = "") -> None:
        self.settings = settings
        self.host = host
        self.key = key  # a joined launch's subdirectory name: short, for the socket path's sake
        # every launch of one sandbox: an orphan check must not take a sibling
        # kernel (or what it still runs) for this one's orphan
        self.group: list[Launch] = host.group if host is not None else []
        self.group.append(self)
        self.spec = settings.target
        self.protocol = load_protocol(self.spec.protocol)
        self.token = settings.token or secrets.token_hex(8)
        self.secrets: tuple[str | None, ...] = (self.token,)
        # the mock tags every verdict line with it (mock/markers.py: sign); the
        # kernel never sees it, so a line it writes itself cannot verify. A
        # joined kernel shares the host's mock, and so its key.
        self.verdict_key: bytes = host.verdict_key if host is not None else secrets.token_bytes(16)
        self.run_dir: Path | None = None
        self.sandbox: Any = None
        self.mock_proc: asyncio.subprocess.Process | None = None
        self.target_proc: asyncio.subprocess.Process | None = None
        self.connector_proc: asyncio.subprocess.Process | None = None
        self.dialer: Dialer | None = None  # shared by every client of this sandbox's TCP or ws kernel
        self.port: int | None = None  # the kernel's port inside the namespace (tcp, ws)
        self.llm_url = ""
        self.agent_url: str | None = None  # an agent protocol's URL, rendered ({port} filled)
        self.exit: TargetExit | None = None
        self.bin_path: Path | None = None
        self.bin_sha256 = ""
        self.argv: list[str] = []
        self._closed = False
        self._files: list[Any] = []
        self._owner_fd: int | None = None
        self.results: Path | None = None  # the run directory collecting this sandbox's results, if any
        self.startup_s: float | None = None
        self.ready_rss_mb: float | None = None
        self.label = ""

    # --- paths -----------------------------------------------------------------

    @property
    def socket_path(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / SOCKET_NAME

    @property
    def mock_socket(self) -> Path:
        if self.host is not None:
            return self.host.mock_socket
        assert self.run_dir is not None
        return self.run_dir / MOCK_SOCKET_NAME

    @property
    def mock_process(self) -> asyncio.subprocess.Process | None:
        """The mock this target talks to: its own, or its host's."""
        return self.host.mock_proc if self.host is not None else self.mock_proc

    @property
    def connector_socket(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / CONNECTOR_SOCKET_NAME

    @property
    def address(self) -> Address:
        """Where the target listens, and for TCP or ws the way in to it."""
        listen = self.spec.listen
        if listen == "unix":
            return Address("unix", path=str(self.socket_path))
        return Address(listen, host=LOOPBACK, port=self.port or 0, url_path=self.spec.ws_path, via=str(self.connector_socket))

    @property
    def data_dir(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / "data"

    @property
    def logs(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / "logs"

    @property
    def state_path(self) -> Path:
        assert self.run_dir is not None
        return self.run_dir / STATE_NAME

    def client(self, **kw: Any) -> KernelClient:
        return KernelClient(self.address, self.token, self.protocol, dialer=self.dialer, **kw)

    # --- lifecycle ---------------------------------------------------------------

    async def __aenter__(self) -> "Launch":
        try:
            await self.start()
        except BaseException:
            await finish_shielded(self.aclose())
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await finish_shielded(self.aclose())

    def _make_run_dir(self) -> Path:
        root = self.settings.run_root or Path(tempfile.gettempdir())
        root.mkdir(parents=True, exist_ok=True)
        sweep_sandbox_dirs(root)
        run_dir = Path(tempfile.mkdtemp(prefix="kst-", dir=root))  # mode 0700
        # held for this process's life (not inherited: O_CLOEXEC): a sweep that
        # can lock it knows the owner is gone
        self._owner_fd = os.open(run_dir / OWNER_LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._owner_fd, fcntl.LOCK_EX)
        sock = run_dir / SOCKET_NAME
        if len(os.fsencode(sock)) > UNIX_PATH_MAX:
            shutil.rmtree(run_dir, ignore_errors=True)
            raise UsageError(
                f"socket path {sock} is {len(os.fsencode(sock))} bytes, over the {UNIX_PATH_MAX}-byte limit of "
                "unix socket paths; choose a shorter run root (e.g. /tmp)"
            )
        for sub in ("data", "logs"):
            (run_dir / sub).mkdir(mode=0o700)
        give_to_invoking_user(run_dir, run_dir / "data", run_dir / "logs")
        return run_dir

    def _as_user(self, argv: list[str]) -> list[str]:
        """Under sudo the processes inside run as the invoking user, so that
        the socket they create is theirs to connect to."""
        uid, gid = invoking_ids()
        if os.geteuid() == 0 and uid != 0 and self.sandbox.mechanism == "netns":
            return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]
        return argv

    def _log(self, name: str) -> Any:
        f = open(self.logs / name, "wb")
        self._files.append(f)
        give_to_invoking_user(self.logs / name)
        return f

    def _make_joined_dir(self) -> Path:
        """A joined launch's directory, inside its host's (whose owner lock and
        sweep cover it)."""
        assert self.host is not None and self.host.run_dir is not None
        run_dir = self.host.run_dir / self.key
        sock = run_dir / SOCKET_NAME
        if len(os.fsencode(sock)) > UNIX_PATH_MAX:
            raise UsageError(f"socket path {sock} is {len(os.fsencode(sock))} bytes, over the {UNIX_PATH_MAX}-byte limit of "
                             "unix socket paths; choose a shorter run root (e.g. /tmp)")
        run_dir.mkdir(mode=0o700)
        for sub in ("data", "logs"):
            (run_dir / sub).mkdir(mode=0o700)
        give_to_invoking_user(run_dir, run_dir / "data", run_dir / "logs")
        return run_dir

    async def start(self) -> None:
        from .namespace import Sandbox

        self.bin_path = self.spec.check_binary()
        if self.host is not None:
            self.run_dir = self._make_joined_dir()
            self.sandbox, self.llm_url = self.host.sandbox, self.host.llm_url
            if self.spec.listen != "unix":
                await self._start_connector()
            await self._start_target()
            self.write_state(status="ready")
            return
        self.run_dir = self._make_run_dir()
        self.sandbox = Sandbox(mechanism=self.settings.mechanism, grace_s=self.settings.sandbox_grace_s)
        await self.sandbox.start()
        await self._start_mock()
        if self.spec.listen != "unix":
            await self._start_connector()
        await self._start_target()
        self.write_state(status="ready")

    def _python_env(self) -> dict[str, str]:
        env = _environ()
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]))
        return env

    async def _await_line(self, proc: asyncio.subprocess.Process, name: str, prefix: str, what: str) -> str:
        """The rest of the first line of logs/NAME.out starting with ``prefix``."""
        out_path = self.logs / f"{name}.out"
        deadline = time.monotonic() + self.settings.mock_ready_timeout_s
        while True:
            text = out_path.read_text(errors="replace") if out_path.exists() else ""
            for line in text.splitlines():
                if line.startswith(prefix):
                    return line[len(prefix):].strip()
            if proc.returncode is not None:
                raise TargetError(
                    f"{what} exited with code {proc.returncode} before it was ready; "
                    f"its stderr:\n{tail(self.logs / f'{name}.err')}"
                )
            if time.monotonic() > deadline:
                raise TargetError(f"{what} did not print its ready line within {self.settings.mock_ready_timeout_s:.0f}s")
            await _wait_exit(proc, 0.02)

    async def _start_connector(self) -> None:
        """The way in to a TCP port inside the namespace; it also picks that port."""
        from .connector import READY

        argv = [sys.executable, "-m", "harness.sandbox.connector", "--unix", str(self.connector_socket), "--host", LOOPBACK, "--pick-port"]
        self.connector_proc = await self.sandbox.spawn(
            self._as_user(argv), env=self._python_env(), cwd=str(self.run_dir),
            stdout=self._log("connector.out"), stderr=self._log("connector.err"),
        )
        line = await self._await_line(self.connector_proc, "connector", READY, "the sandbox's connector")
        try:
            self.port = int(line.rsplit(" port ", 1)[1])
        except (IndexError, ValueError):
            raise TargetError(f"the sandbox's connector said {line!r}, not `PATH port N`") from None
        self.dialer = Dialer(self.address)

    async def _start_mock(self) -> None:
        argv = [
            sys.executable, "-m", "mock", "--host", "127.0.0.1", "--port", "0",
            "--unix", str(self.mock_socket), "--log", str(self.run_dir / "mock.jsonl"),
            "--tool-ms", str(self.settings.tool_ms), "--mixed-ms", str(self.settings.mixed_ms),
        ]
        if self.spec.tools:
            argv += ["--tools", self.spec.tools]
        argv += list(self.settings.mock_args)
        env = self._python_env()
        env[VERDICT_KEY_ENV] = self.verdict_key.hex()  # by environment: argv is world-readable
        self.mock_proc = await self.sandbox.spawn(
            self._as_user(argv), env=env, cwd=str(self.run_dir), stdout=self._log("mock.out"), stderr=self._log("mock.err")
        )
        self.llm_url = await self._await_line(self.mock_proc, "mock", "mock listening on ", "the mock LLM") + "/v1"

    async def _start_target(self) -> None:
        values = {
            "bin": str(self.bin_path),
            "socket": str(self.socket_path),
            "llm_url": self.llm_url,
            # the same mock without /v1: what SDKs that add their own path want (ANTHROPIC_BASE_URL)
            "llm_root": self.llm_url.removesuffix("/v1"),
            "llm_api": self.spec.llm_api,
            "data_dir": str(self.data_dir),
            "token": self.token,
            "run_dir": str(self.run_dir),
            "config": str(self.data_dir / self.spec.config_file) if self.spec.config_file else "",
            "port": str(self.port) if self.port is not None else "",
            "listen_url": self.address.url,
        }
        if self.spec.config_template is not None and self.spec.config_file:
            (self.data_dir / self.spec.config_file).write_text(render(self.spec.config_template, values))
        self.argv = self.spec.render_argv(values)
        if self.spec.url is not None:
            self.agent_url = render(self.spec.url, values)
        self.bin_sha256 = await asyncio.to_thread(sha256_of, self.bin_path)
        # the token by the environment, never argv: ps shows argv to every local user (issue 22 item 13)
        env = {**_environ(), TOKEN_ENV: self.token}
        rendered_env = self.spec.render_env(values)
        env.update(rendered_env)
        # what every report shows in place of these: the token, and what the target file marks secret
        self.secrets = (self.token, *self.spec.secret_values(self.argv, rendered_env))
        spawned = time.monotonic()
        self.target_proc = await self.sandbox.spawn(
            self._as_user(self.argv), env=env, cwd=str(self.data_dir), stdout=self._log("target.out"), stderr=self._log("target.err")
        )
        await self._wait_ready()
        # start-up: spawn -> ready (socket accepting, handshake done), and what it holds then
        self.startup_s = round(time.monotonic() - spawned, 4)
        rss = tree_rss_mb(self.target_proc.pid)
        self.ready_rss_mb = None if rss is None else round(rss, 2)

    def agent_driver(self) -> Any:
        """The agent protocol's driver for this target's URL (None: protocol v1)."""
        if self.agent_url is None:
            return None
        from ..wire.agents import agent_driver

        return agent_driver(self.spec.protocol or "", self.agent_url, f"target {self.spec.source}: url")

    async def _agent_ready(self) -> bool:
        """An agent is ready when its URL answers as an endpoint of its
        protocol (the driver's probe: AG-UI and OpenAI a refused request, A2A
        its card), through the sandbox's connector; not yet while nothing
        listens. A 404 or a web page is the target file's mistake: exit 2."""
        from ..wire.agents import HttpAgentClient

        try:
            async with HttpAgentClient(self.agent_driver(), self.address, dialer=self.dialer, connect_timeout_s=2.0) as c:
                await c.prepare(2.0)
        except ConnError as exc:
            self._ready_last = str(exc)
            return False
        return True

    async def _wait_ready(self) -> None:
        proc = self.target_proc
        assert proc is not None
        agent = self.agent_url is not None
        self._ready_last = ""
        deadline = time.monotonic() + self.spec.start_timeout_s
        unix = self.spec.listen == "unix"
        last = "the socket never appeared" if unix else "nothing listened there"
        while True:
            if proc.returncode is not None:
                raise TargetError(
                    f"target {self.spec.name} exited at once with code {proc.returncode}; the tail of its stderr:\n"
                    f"{tail(self.logs / 'target.err') or '(empty)'}"
                )
            if self.connector_proc is not None and self.connector_proc.returncode is not None:
                raise ConnectorGone(f"the sandbox's connector exited ({self.connector_proc.returncode}) while the target started; its stderr:\n"
                                    f"{tail(self.logs / 'connector.err') or '(empty)'}")
            if agent:
                if await self._agent_ready():
                    return
                last = self._ready_last or last
            elif not unix or self.socket_path.exists():
                token = self.token if self.spec.ready == "auth" else None
                try:
                    async with KernelClient(self.address, token, self.protocol, connect_timeout_s=2.0, dialer=self.dialer):
                        return
                except ConnError as exc:
                    last = str(exc)
                    if exc.kind == "auth":
                        raise TargetError(f"target {self.spec.name} refused the handshake: {exc}") from None
            if time.monotonic() > deadline:
                where = f"a listening socket at {self.socket_path}" if unix else f"it to listen on {self.address.url} inside the sandbox"
                raise TargetError(
                    f"target {self.spec.name} did not become ready within {self.spec.start_timeout_s:.0f}s: "
                    f"expected {where} ({last}); its stderr:\n"
                    f"{tail(self.logs / 'target.err') or '(empty)'}"
                )
            await _wait_exit(proc, 0.02)

    def write_state(self, status: str, **extra: Any) -> None:
        if self.run_dir is None:
            return
        _me = psutil.Process()
        state = {
            "status": status,
            "run_dir": str(self.run_dir),
            # unix: the path, as always; tcp, ws: the address inside, reached through `connector`
            "socket": str(self.socket_path) if self.spec.listen == "unix" else self.address.url,
            "transport": self.spec.listen,
            "address": self.address.url,
            "connector": str(self.connector_socket) if self.connector_proc is not None else None,
            "llm_url": self.llm_url,
            "mock_socket": str(self.mock_socket),
            "namespace": getattr(self.sandbox, "name", None),
            "mechanism": getattr(self.sandbox, "mechanism", None),
            "net_inode": getattr(self.sandbox, "net_inode", None),
            # SECRET_FIELDS: null once stopped (below)
            "token": self.token,
            # for a later run against this sandbox to authenticate verdict lines
            "verdict_key": self.verdict_key.hex(),
            "supervisor_pid": os.getpid(),
            # who that pid is: `stop` signals it only while all three still match
            "supervisor_started": _me.create_time(),
            "supervisor_cmdline": _me.cmdline(),
            "pids": {
                "mock": self.mock_proc.pid if self.mock_proc else None,
                "target": self.target_proc.pid if self.target_proc else None,
                **({"connector": self.connector_proc.pid} if self.connector_proc else {}),
            },
            "argv": self.argv,
            "target_name": self.spec.name,
            "bin": str(self.bin_path) if self.bin_path else None,
            "bin_sha256": self.bin_sha256,
            "protocol": self.spec.protocol,
            "url": self.agent_url,
            "tool_ms": self.settings.tool_ms,
            "mixed_ms": self.settings.mixed_ms,
            "tools": self.spec.tools,
            # absolute: a sweep from another directory copies the logs there (issue 22 item 11)
            "results": os.path.abspath(self.results) if self.results else None,
            "contract": self.settings.contract.to_json(),
            "startup_s": self.startup_s,
            "ready_rss_mb": self.ready_rss_mb,
            "mock_args": list(self.settings.mock_args),
            "llm_api": self.spec.llm_api,
            "label": self.label,
            "updated": time.time(),
            **extra,
        }
        live = {k: state.pop(k) for k in SECRET_FIELDS}
        # no secret in any other field (argv, an error in extra), nor the target file's anywhere
        state = scrub(state, [*live.values(), *self.secrets])
        state.update({k: None if status == "stopped" else v for k, v in live.items()})
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        give_to_invoking_user(tmp)
        os.replace(tmp, self.state_path)

    def target_alive(self) -> bool:
        return self.target_proc is not None and self.target_proc.returncode is None

    def orphans(self) -> list[dict[str, Any]]:
        """Processes still in the namespace other than the mock (and the target
        itself while it runs)."""
        if self.sandbox is None:
            return []
        mock = self.mock_process
        skip = {p.pid for p in (mock, self.target_proc, self.connector_proc) if p is not None}
        mock_tree: set[int] = set()
        if mock is not None:
            try:
                mock_tree = {c.pid for c in psutil.Process(mock.pid).children(recursive=True)}
            except psutil.Error:
                pass
        for other in self.group:
            if other is self:
                continue
            # a sibling kernel that still runs, with what it runs; one already
            # stopped has had its orphans named (an orphan's parent is init,
            # never a sibling, so what is left is this target's)
            for p in (other.target_proc, other.connector_proc):
                if p is not None:
                    skip.add(p.pid)
            if other.target_proc is not None and other.target_proc.returncode is None:
                try:
                    mock_tree |= {c.pid for c in psutil.Process(other.target_proc.pid).children(recursive=True)}
                except psutil.Error:
                    pass
            if other.exit is not None:
                skip |= {o["pid"] for o in other.exit.orphans}
        out = []
        for pid in self.sandbox.pids():
            if pid in skip or pid in mock_tree:
                continue
            try:
                p = psutil.Process(pid)
                if p.status() == psutil.STATUS_ZOMBIE:
                    continue
                out.append({"pid": pid, "cmdline": " ".join(p.cmdline())[:200]})
            except psutil.Error:
                continue
        return out

    async def stop_target(self) -> TargetExit:
        """Stop signal -> grace -> SIGKILL; then list what the target left behind."""
        if self.exit is not None:
            return self.exit
        proc = self.target_proc
        signalled = False
        if proc is not None and proc.returncode is None:
            try:
                proc.send_signal(self.spec.stop_signal)
                signalled = True
            except ProcessLookupError:
                pass
            if not await grace(proc.wait(), self.spec.stop_grace_s):
                try:
                    proc.kill()
                except ProcessLookupError:
                    pass
                await _wait_exit(proc, 5.0)
        # Children the target started may still be on their way out.
        deadline = time.monotonic() + 1.0
        orphans = self.orphans()
        while orphans and time.monotonic() < deadline and not hurried():
            await asyncio.sleep(0.05)  # re-check with a deadline: exiting children need a moment to be reaped
            orphans = self.orphans()
        self.exit = TargetExit(returncode=proc.returncode if proc else None, signalled=signalled, orphans=orphans)
        return self.exit

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self.target_proc is not None:
                await self.stop_target()
        finally:
            if self.dialer is not None:
                await self.dialer.aclose()
            if self.sandbox is not None and self.host is None:  # a joined launch leaves the sandbox to its host
                await self.sandbox.aclose()
            for f in self._files:
                f.close()
            for proc in (self.mock_proc, self.target_proc, self.connector_proc):
                if proc is not None and proc.returncode is None:
                    await _wait_exit(proc, 1.0)
            # no socket file survives a run (a killed kernel cannot remove its own)
            if self.run_dir is not None:
                for sock in (self.socket_path, self.connector_socket, *((self.mock_socket,) if self.host is None else ())):
                    try:
                        sock.unlink()
                    except FileNotFoundError:
                        pass

    def remove_run_dir(self) -> None:
        """For a run that copied what it needs (logs, mock log) elsewhere."""
        if self.run_dir is not None and self._closed:
            shutil.rmtree(self.run_dir, ignore_errors=True)
            self._release_owner()

    def _release_owner(self) -> None:
        if self._owner_fd is not None:
            os.close(self._owner_fd)
            self._owner_fd = None


def _environ() -> dict[str, str]:
    """The environment a sandbox's process starts with: ours, without a
    verdict key the user exported for a bare-socket run (the mock is given
    its own; the kernel must never have one)."""
    env = dict(os.environ)
    env.pop(VERDICT_KEY_ENV, None)
    return env


def tree_rss_mb(pid: int | None) -> float | None:
    """Resident memory of a process and all its descendants, MiB; None when it is gone."""
    if pid is None:
        return None
    try:
        p = psutil.Process(pid)
        total = p.memory_info().rss
        for c in p.children(recursive=True):
            try:
                total += c.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20
    except psutil.Error:
        return None


SWEPT_DIR = "swept"  # in the state home: the logs of swept sandboxes no run directory took
SWEPT_KEEP = 10  # of those, the newest kept; the directories they came from are gone already


def sweep_sandbox_dirs(root: Path, say: Callable[[str], None] | None = None) -> list[Path]:
    """Remove the sandbox directories under ``root`` whose owner is gone:
    their owner.lock can be locked (a running owner -- a kstress run, the
    supervisor of a detached sandbox -- holds it for its life). That is a
    run killed without cleaning up (SIGKILL, a closed terminal), and a
    detached sandbox once stopped or dead: its directory was kept for its logs,
    and is swept by the next launch (one grew to 12 MB, issue 22 item 16).

    Nothing is removed before its logs are copied (issue 22 item 11): the
    process logs and the mock's log go to the run directory state.json names
    (an absolute path), else -- none named (a detached sandbox), or not there
    (removed, or a relative path from an older kstress) -- to SWEPT_DIR in the
    state home. ``say`` is told where each went; a directory whose logs could
    not be copied is kept, and ``say`` is told why. Returns what was removed."""
    say = say or _say
    removed = []
    me = invoking_ids()[0]
    for d in root.glob("kst-*"):
        lock = d / OWNER_LOCK
        try:
            if not d.is_dir() or d.is_symlink() or d.stat().st_uid not in (me, os.geteuid()):
                continue
            fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue  # not a sandbox dir of ours (no lock file), or gone meanwhile
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its owner lives
            try:
                where = _rescue_logs(d)
            except (OSError, UsageError) as exc:
                say(f"kstress: kept {d}: its owner is gone, but its logs could not be copied ({exc}); "
                    f"copy {d}/logs and {d}/mock.jsonl yourself, then remove it (rm -r {d})")
                continue
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
            if where:
                say(f"kstress: swept {d} (its owner is gone); its logs are in {', '.join(map(str, where))}")
        finally:
            os.close(fd)
    return removed


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _rescue_logs(sandbox_dir: Path) -> list[Path]:
    """Copy the logs of a sandbox directory and of the kernels that joined it
    (its subdirectories) to the run directories their state.json names; when
    one of them has none to go to, the whole directory's to the state home.
    Where they went. Raises OSError (or UsageError: an untrusted state home)
    when a copy fails."""
    where: list[Path] = []
    homeless = False
    for sub in (sandbox_dir, *sorted(p.parent for p in sandbox_dir.glob(f"*/{STATE_NAME}"))):
        if not any((sub / n).exists() for n in ("logs", "mock.jsonl")):
            continue
        state = _read_json(sub / STATE_NAME)
        results = state.get("results")
        results = Path(results) if isinstance(results, str) and os.path.isabs(results) else None
        if results is None or not results.is_dir():
            homeless = True
            continue
        label = state.get("label") or ""
        logs = results / (f"logs-{label}" if label else "logs")
        if (sub / "logs").is_dir() and not logs.exists():
            copy_logs(sub / "logs", logs, _secrets_of(state))
        mock_log = results / (f"mock-{label}.jsonl" if label else "mock.jsonl")
        if (sub / "mock.jsonl").is_file() and not mock_log.exists():
            shutil.copyfile(sub / "mock.jsonl", mock_log)
        if results not in where:
            where.append(results)
    if homeless:
        where.append(_archive(sandbox_dir))
    return where


def _secrets_of(state: dict[str, Any]) -> list[str]:
    return [v for k in SECRET_FIELDS if isinstance(v := state.get(k), str)]


def copy_logs(src: Path, dst: Path, secrets: Sequence[str | None]) -> None:
    """A sandbox's logs directory to ``dst``, every secret replaced by
    [redacted]: a kernel that prints its token (a debug line, its config) must
    not hand it to whoever reads the run directory. The files are copied in
    blocks (a log may be large), holding back a secret's length but one at each
    block's end, so a secret split across two blocks is found too."""
    needles = [x.encode() for x in secrets if x and len(x) >= 4]  # as scrub: a short "secret" would blank the logs
    hold = max(map(len, needles), default=1) - 1
    dst.mkdir(mode=0o700, parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_symlink() or not f.is_file():
            continue  # kstress writes only files there; anything else a process made is not a log of ours
        with open(f, "rb") as fin, open(dst / f.name, "wb") as fout:
            carry = b""
            while True:
                block = fin.read(1 << 20)
                data = carry + block
                for n in needles:
                    data = data.replace(n, REDACTED.encode())
                if not block:
                    fout.write(data)
                    break
                cut = len(data) - hold
                fout.write(data[:cut])
                carry = data[cut:]


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _archive(sandbox_dir: Path) -> Path:
    """The sandbox directory's logs, mock log, teardown and state (without its
    secrets), joined kernels' too, under the state home's SWEPT_DIR; the
    newest SWEPT_KEEP are kept there."""
    from .state import secure_home

    home = secure_home()
    swept = home / SWEPT_DIR
    swept.mkdir(mode=0o700, exist_ok=True)
    give_to_invoking_user(swept)
    dest = swept / sandbox_dir.name
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(mode=0o700)
    for sub in (sandbox_dir, *(p.parent for p in sandbox_dir.glob(f"*/{STATE_NAME}"))):
        to = dest / sub.relative_to(sandbox_dir)
        to.mkdir(mode=0o700, exist_ok=True)
        kept = _read_json(sub / STATE_NAME)
        if (sub / "logs").is_dir():
            copy_logs(sub / "logs", to / "logs", _secrets_of(kept))
        for name in ("mock.jsonl", TEARDOWN_NAME):
            if (sub / name).is_file():
                shutil.copyfile(sub / name, to / name)
        if kept:
            kept = scrub({k: v for k, v in kept.items() if k not in SECRET_FIELDS}, _secrets_of(kept))
            (to / STATE_NAME).write_text(json.dumps({**kept, **dict.fromkeys(SECRET_FIELDS)}, indent=2))
    give_to_invoking_user(dest, *(p for p in dest.rglob("*") if not p.is_symlink()))
    old = sorted((p for p in swept.iterdir() if p.is_dir() and not p.is_symlink()), key=lambda p: p.stat().st_mtime, reverse=True)
    for p in old[SWEPT_KEEP:]:
        shutil.rmtree(p, ignore_errors=True)
    return dest


async def _wait_exit(proc: asyncio.subprocess.Process, timeout_s: float) -> bool:
    """True when the process exited within the timeout."""
    if proc.returncode is not None:
        return True
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
        return True
    except asyncio.TimeoutError:
        return False
