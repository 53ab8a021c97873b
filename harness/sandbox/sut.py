"""The system under test, however a run reaches it.

``Access`` says how: a sandbox this run launches (``launch``), a bare socket
(``socket``, no sandbox), or the running detached sandbox (``state`` or the
pointer). ``Target`` is the opened handle every scenario drives: the socket,
token and protocol to connect with, the catalog and tool times to plan and
judge turns exactly as the mock plans them, and the target's metadata.

Opening is two steps. ``prepare()`` checks everything that can be checked
without starting anything (a bad catalog, protocol, binary or state file is a
usage error before any run directory exists); entering the context starts the
sandbox when this run owns one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from mock.catalog import DEFAULT_CATALOG, Catalog
from mock.markers import DEFAULT_MIXED_MS, DEFAULT_TOOL_MS, VERDICT_KEY_ENV, Plan, build_plan, verdict_key

from ..aio import finish_shielded, grace
from ..wire.client import ConnError, KernelClient, Turn
from ..judge.contract import OTHER, REFKERNEL, Contract, merged
from ..errors import ConnectorGone, KstressError, MockDied, TargetDied, TargetError, UsageError
from .launcher import UNIX_PATH_MAX, Launch, LaunchSettings, tail
from ..judge.mockjoin import MockJoin, check_mock_address
from ..wire.protocol import FrameKind, Protocol, ProtocolError, load_protocol
from .state import SandboxState
from .supervisor import require_running
from .target import load_catalog_file, redact
from ..judge.verdict import TurnVerdict, judge
from ..judge.cancel import cancel_window_s, judge_cancel, ran_on
from ..wire.transport import Address, Dialer, parse_address
from ..wire.agents import AGENT_PROTOCOLS, HttpAgentClient, agent_driver, check_agent_url, is_agent_protocol

ALIVE_EVERY_S = 0.05
# how often a cancel's point and window ask the mock for the turn's record
CANCEL_POLL_S = 0.02


def check_socket_path(path: Path) -> None:
    """--socket names a unix socket that exists, within sun_path's limit."""
    import stat as stat_

    n = len(os.fsencode(path))
    if n > UNIX_PATH_MAX:
        raise UsageError(f"--socket {path}: {n} bytes, over the {UNIX_PATH_MAX}-byte limit of a unix socket path; use a shorter path (a symlinked directory, or a socket nearer /)")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"--socket {path}: no such file; is the kernel running, and is this its socket? (or use --launch)") from None
    except OSError as exc:
        raise UsageError(f"--socket {path}: cannot look at it ({exc.strerror})") from None
    if not stat_.S_ISSOCK(st.st_mode):
        what = "a directory" if stat_.S_ISDIR(st.st_mode) else "a regular file" if stat_.S_ISREG(st.st_mode) else "not a socket"
        raise UsageError(f"--socket {path}: {what}, not a unix socket; pass the socket the kernel listens on")


def exit_status(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit code {returncode}"


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def mock_gone_before(s: SandboxState) -> str:
    """A detached sandbox's mock that died before this run: the check between
    turns called that "died during the run", with no stderr."""
    code = s.raw.get("mock_returncode")
    how = exit_status(code) if isinstance(code, int) else f"pid {s.mock_pid} is not running"
    return (
        f"the mock LLM of the sandbox died before this run started ({how}; {s.path} says status {s.status}), so no turn was sent; "
        f"its stderr:\n{tail(s.run_dir / 'logs' / 'mock.err') or '(empty)'}\n"
        f"stop the sandbox (kstress stop --state {s.path}) and launch a new one"
    )


@dataclass(frozen=True)
class Access:
    """How a scenario reaches its kernel: ``launch`` (own sandbox), else
    ``socket`` (a bare socket, no sandbox), else the running detached sandbox
    (``state`` or the pointer)."""

    launch: LaunchSettings | None = None
    state: Path | None = None
    socket: str | Path | None = None  # a --socket form (harness/wire/transport.py); a Path is a unix socket
    token: str | None = None
    protocol: str | None = None
    tool_ms: int = DEFAULT_TOOL_MS
    mixed_ms: int = DEFAULT_MIXED_MS
    tools: Path | None = None  # catalog, for a bare socket
    contract_pairs: tuple[str, ...] = ()  # --contract KEY=VALUE (a launch carries its own in LaunchSettings)
    mock: str | None = None  # a bare socket's mock, to ask for verdicts (unix:PATH or a loopback URL)
    url: str | None = None  # an agent already running, served over an agent protocol (--url; protocol names which)
    # several kernels at once (a scenario that opts in, Scenario.kernels): the
    # kernels after `launch`, started in its sandbox and judged by its mock
    more: tuple[LaunchSettings, ...] = ()
    names: tuple[str, ...] = ()  # every kernel's name, `launch` first (only with `more`)
    weights: tuple[float, ...] = ()  # the load's split, one per kernel (only with `more`)
    # hosts off loopback the user named with --allow-remote: a target, its mock or a fleet's cluster there is allowed
    allow_remote: tuple[str, ...] = ()

    @property
    def kernels(self) -> int:
        return 1 + len(self.more)


def kernel_targets(access: Access) -> list["Target"]:
    """One Target per kernel: the first launches the sandbox and the mock,
    the others join it. A single kernel is the Target of old, unnamed."""
    first = Target(replace(access, more=(), names=(), weights=()), kernel=access.names[0] if access.more else "")
    out = [first]
    for i, ls in enumerate(access.more, start=2):
        out.append(Target(Access(launch=ls, tool_ms=access.tool_ms, mixed_ms=access.mixed_ms), kernel=access.names[i - 1], host=first, key=f"k{i}"))
    return out


class Target:
    """The kernel under test, however it was reached."""

    def __init__(self, access: Access, label: str = "", kernel: str = "", host: "Target | None" = None, key: str = "") -> None:
        self.access = access
        self.label = label
        self.kernel = kernel  # its name when several kernels run at once: every row and orphan carries it
        self.host = host  # the Target whose sandbox and mock this one joins
        self._key = key
        self.launch: Launch | None = None
        self.owned = access.launch is not None
        self.socket = ""  # the address as messages name it
        self.address: Address | None = None
        self._dialer: Dialer | None = None  # shared by every connection to a kernel inside a sandbox
        self.token: str | None = None
        self.protocol: Protocol = Protocol()
        self.driver: Any = None  # an agent protocol's driver (harness/wire/agents.py); None: protocol v1
        # each session's (input, answer) pairs, for a protocol whose client carries
        # the history: shared by every connection, as a session may move between them
        self.histories: dict[str, list[tuple[str, str]]] = {}
        self.tool_ms = access.tool_ms
        self.mixed_ms = access.mixed_ms
        self.catalog: Catalog = DEFAULT_CATALOG
        self.contract: Contract = REFKERNEL
        self.target_pid: int | None = None
        self.mock_log: Path | None = None
        self.mock_log_offset = 0
        self.meta: dict[str, Any] = {}
        self.orphans: list[dict[str, Any]] | None = None
        self._sandbox: SandboxState | None = None
        self.results: Path | None = None  # the run directory, set by the runner
        self.mock_address: str | None = None  # where the mock's verdict store is asked
        self.join: MockJoin | None = None
        # (dialect, stream) of every mock record of a joined turn: what this
        # kernel really spoke, beside what the run declares (extras.observed)
        self.llm_seen: collections.Counter[tuple[Any, Any]] = collections.Counter()
        self.verdict_key: bytes | None = None  # what the mock tags its verdict lines with (judge: _forged)
        self._prepared = False
        self._alive_at = -ALIVE_EVERY_S
        self._stack = contextlib.AsyncExitStack()

    # --- opening ---------------------------------------------------------------------

    def prepare(self) -> None:
        """Check what can be checked before anything starts; raises UsageError."""
        if self._prepared:
            return
        a = self.access
        if a.launch is not None:
            spec = a.launch.target
            spec.check_binary()
            self.contract = a.launch.contract
            self.protocol = load_protocol(spec.protocol)
            self.tool_ms, self.mixed_ms = a.launch.tool_ms, a.launch.mixed_ms
            if spec.tools:
                self.catalog = load_catalog_file(spec.tools, f"target {spec.source}: tools")
        elif a.url is not None:
            self._prepare_url()
        elif a.socket is not None:
            if is_agent_protocol(a.protocol):
                raise UsageError(f"--protocol {a.protocol} is an agent protocol, served over HTTP: give the agent's URL with --url, "
                                 f"not --socket {a.socket} (which takes a protocol v1 kernel, or an adapter module:Class)")
            self.address = Address("unix", path=str(a.socket)) if isinstance(a.socket, Path) else parse_address(a.socket, allow=a.allow_remote)
            self.socket, self.token = str(self.address), a.token
            self.protocol = load_protocol(a.protocol)
            if a.tools:
                self.catalog = load_catalog_file(a.tools, "--tools")
            if self.address.scheme == "unix":
                check_socket_path(Path(self.address.path))
            # a bare socket: no knowing what kernel it is; it declares what it has
            self.contract = merged(OTHER, None, a.contract_pairs)
            self.mock_address = check_mock_address(a.mock, a.allow_remote) if a.mock else None
            self._require_authentication(f"--socket {self.socket}", "kernel", "unix:PATH or http://127.0.0.1:PORT")
            self.meta = {"name": "socket", "socket": self.socket, "transport": self.address.scheme, "launched": False}
        else:
            s = require_running(a.state).state
            if s.status == "mock_died" or (s.mock_pid is not None and not _running(s.mock_pid)):
                raise MockDied(mock_gone_before(s))
            self._sandbox = s
            self.address = s.kernel_address()
            self.socket, self.token = str(self.address), a.token or s.token
            self.protocol = load_protocol(a.protocol or s.protocol)
            if a.protocol and is_agent_protocol(a.protocol) != is_agent_protocol(s.protocol):
                raise UsageError(f"--protocol {a.protocol}: the running sandbox's target speaks {s.protocol or 'kstress-v1'}; "
                                 "drop --protocol (the sandbox knows what its target speaks)")
            url = s.raw.get("url")
            if is_agent_protocol(s.protocol) and isinstance(url, str):
                # a detached sandbox's agent: the same driver, through its connector
                self.driver = agent_driver(s.protocol or "", url, f"{s.path}: url")
            self.tool_ms, self.mixed_ms = s.tool_ms, s.mixed_ms
            self.catalog = s.catalog()
            self.target_pid = s.target_pid
            self.mock_log = s.mock_log
            base = s.contract or (REFKERNEL if s.target_name == "refkernel" else OTHER)
            self.mock_address = f"unix:{s.mock_socket}" if s.mock_socket else None
            self.verdict_key = verdict_key(s.raw.get("verdict_key") if isinstance(s.raw.get("verdict_key"), str) else None)
            self.contract = merged(base, None, a.contract_pairs)
            self.meta = s.meta()
            if self.driver is not None:
                # as a --launch run records it: without these a run against a detached
                # agent sandbox read as a plain tcp kernel in run.json
                self.meta.update(transport="http", protocol=self.driver.name, url=self.driver.url)
        if self.label:
            self.meta["label"] = self.label
        if self.kernel:
            self.meta["kernel"] = self.kernel
        if a.allow_remote:
            self.meta["allow_remote"] = list(a.allow_remote)
        self.meta["contract"] = self.contract.to_json()
        self.meta["workload"] = self._workload()
        self._prepared = True

    def _require_authentication(self, where: str, who: str, forms: str) -> None:
        """A kernel this run does not launch is judged by the mock it calls,
        or by the tags of a verdict key kstress shares with that mock: with
        neither, a verdict line it wrote itself would pass (issue 22)."""
        self.verdict_key = verdict_key(os.environ.get(VERDICT_KEY_ENV))
        if self.mock_address is None and self.verdict_key is None:
            raise UsageError(
                f"{where} without --mock: kstress could not tell a verdict line the mock wrote from one the {who} wrote itself; "
                f"pass --mock with the mock the {who} calls ({forms}), or start that mock with {VERDICT_KEY_ENV}=K in its "
                f"environment and run kstress with the same {VERDICT_KEY_ENV}"
            )

    def _prepare_url(self) -> None:
        """--url: an agent already running on loopback, driven over its own
        protocol; judged by the mock it calls, as a bare socket is."""
        a = self.access
        name = a.protocol
        if name and not is_agent_protocol(name):
            raise UsageError(f"--url {a.url}: --protocol {name} is not an agent protocol; --url takes one of {', '.join(AGENT_PROTOCOLS)} "
                             "(a protocol v1 kernel, or an adapter module:Class, is given with --socket)")
        if not name:
            raise UsageError(
                f"--url {a.url} needs --protocol naming what the agent serves there: one of {', '.join(AGENT_PROTOCOLS)} "
                f"(a protocol v1 kernel is given with --socket)"
            )
        self.address = check_agent_url(a.url, allow=a.allow_remote)
        self.driver = agent_driver(name, a.url)
        self.socket, self.token = self.driver.url, None
        if a.tools:
            self.catalog = load_catalog_file(a.tools, "--tools")
        self.contract = merged(OTHER, None, a.contract_pairs)
        self.mock_address = check_mock_address(a.mock, a.allow_remote) if a.mock else None
        self._require_authentication(f"--url {a.url}", "agent", "http://127.0.0.1:PORT, as `kstress mock` prints it")
        self.meta = {"name": "url", "url": self.driver.url, "protocol": name, "socket": self.driver.url, "transport": "http", "launched": False}

    def _workload(self) -> dict[str, Any]:
        """What the mock made of each marker (tool sleeps, LLM pacing, the
        catalog, the dialect): `kstress compare` refuses two runs where it
        differs. ``mock_args`` is None when it cannot be known (a bare socket)."""
        a, s = self.access, self._sandbox
        if a.launch is not None:
            spec = a.launch.target
            args: list[str] | None = list(a.launch.mock_args)
            tools, llm_api = spec.tools, spec.llm_api
        elif s is not None:
            args, tools, llm_api = s.raw.get("mock_args"), s.tools, s.raw.get("llm_api")
        else:
            args, tools, llm_api = None, str(a.tools) if a.tools else None, None
        return {"tool_ms": self.tool_ms, "mixed_ms": self.mixed_ms, "mock_args": args, "tools": tools, "llm_api": llm_api}

    async def preflight(self, connect_timeout_s: float = 5.0) -> None:
        """A bare socket, before anything starts: is a kernel listening, and
        does it take our token (or want one we did not give)? A usage error
        naming the fix, instead of a run of resets and auth errors."""
        if self.driver is not None and self.access.url is not None:
            await self._preflight_agent(connect_timeout_s)
            return
        if self.access.socket is None:
            return
        try:
            async with self.client(connect_timeout_s=connect_timeout_s) as c:
                if self.token is not None or self.protocol.stats_frame() is None:
                    return
                # no token: the first frame a token-taking kernel sees decides
                await c._send(self.protocol.stats_frame())
                try:
                    async with asyncio.timeout(connect_timeout_s):
                        frame = await c._recv_raw()
                except (TimeoutError, EOFError, ProtocolError, ConnectionError, OSError):
                    return  # no answer to a stats frame proves nothing
                kind, _ = self.protocol.classify(frame)
                code = str(frame.get("code", ""))
                if kind is FrameKind.ERROR and "auth" in code:
                    raise UsageError(f"--socket {self.socket}: the kernel wants a token (it answered {code}: {frame.get('message', '')}); pass --token T")
        except ConnError as exc:
            if exc.kind == "auth":
                raise UsageError(f"--socket {self.socket}: the kernel refused the token ({exc}); pass the right one with --token") from None
            if exc.kind in ("refused", "no_socket"):
                raise UsageError(f"--socket {self.socket}: nobody is listening there ({exc}); start the kernel first, or use --launch") from None
            # a kernel that is there but slow or broken (never reads, resets):
            # that is what the run is for -- each input fails by name

    async def _preflight_agent(self, timeout_s: float) -> None:
        """--url, before anything starts: is an agent of this protocol there?
        A usage error naming the URL, what answered and the fix (404, a web
        page, nobody listening), instead of a run of failed turns."""
        try:
            async with self.client(connect_timeout_s=timeout_s) as c:
                await c.prepare(timeout_s)
        except ConnError as exc:
            if exc.kind in ("refused", "no_socket"):
                raise UsageError(f"--url {self.socket}: nobody is listening there ({exc}); start the agent first, or use --launch") from None
            # there but slow or broken: that is what the run is for

    async def __aenter__(self) -> "Target":
        self.prepare()
        a = self.access
        if a.launch is not None:
            # assigned before it starts: a launch that fails half-way still
            # has a sandbox dir whose logs the run keeps and then removes
            host = None
            if self.host is not None:
                assert self.host.launch is not None, "the host kernel is entered first"
                host = self.host.launch
            L = self.launch = Launch(a.launch, host=host, key=self._key)
            L.results, L.label = self.results, self.label
            await self._stack.enter_async_context(L)
            self.mock_address = f"unix:{L.mock_socket}"
            self.verdict_key = L.verdict_key
            self.address, self._dialer = L.address, L.dialer
            self.socket, self.token = str(L.address), L.token
            self.driver = L.agent_driver()
            if self.driver is not None:
                self.socket = f"{self.driver.url} (in the sandbox)"
            self.target_pid = L.target_proc.pid if L.target_proc else None
            # the shared mock's log is kept once, with the kernel that started it
            self.mock_log = L.run_dir / "mock.jsonl" if L.run_dir and host is None else None
            self.meta = {
                "name": L.spec.name, "argv": redact(L.argv, L.secrets), "bin": str(L.bin_path), "bin_sha256": L.bin_sha256,
                "namespace": L.sandbox.name, "mechanism": L.sandbox.mechanism, "sandbox_dir": str(L.run_dir), "launched": True,
                "llm_api": L.spec.llm_api,
                "startup_s": L.startup_s, "ready_rss_mb": L.ready_rss_mb,
                "transport": L.address.scheme, "address": L.address.url,
            }
            if self.driver is not None:
                self.meta.update(transport="http", protocol=self.driver.name, url=self.driver.url)
            if self.label:
                self.meta["label"] = self.label
            if self.kernel:
                self.meta["kernel"] = self.kernel
            self.meta["contract"] = self.contract.to_json()
            self.meta["workload"] = self._workload()
        elif self._sandbox is not None and self._sandbox.status == "target_died":
            raise TargetError(
                f"the target in the running sandbox died (exit code {self._sandbox.returncode}); stop it with scripts/launch.sh stop"
            )
        elif self.address is not None and self.address.via is not None:
            # every connection of this run to the detached sandbox's kernel through one control connection
            self._dialer = Dialer(self.address)
            self._stack.push_async_callback(self._dialer.aclose)
        if self.mock_log is not None and self.mock_log.exists():
            self.mock_log_offset = self.mock_log.stat().st_size
        if self.mock_address is not None:
            self.join = await self._stack.enter_async_context(MockJoin(self.mock_address))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await finish_shielded(self._stack.aclose())

    # --- a fleet's workers (harness/fleet) -----------------------------------------

    def view(self) -> dict[str, Any]:
        """What a driver in another process needs to reach this opened target
        and judge its turns exactly as this process would: picklable, and
        nothing that starts or owns anything. A kernel in a sandbox is reached
        through the sandbox's connector socket (``address.via``), as a run
        against a detached sandbox reaches it."""
        assert self._prepared and self.address is not None, "a target is shared once it is open"
        return {
            "label": self.label, "kernel": self.kernel, "address": self.address, "token": self.token,
            "protocol": self.protocol, "driver": self.driver, "catalog": self.catalog,
            "tool_ms": self.tool_ms, "mixed_ms": self.mixed_ms, "contract": self.contract,
            "mock_address": self.mock_address, "verdict_key": self.verdict_key,
        }

    @classmethod
    def joined(cls, view: dict[str, Any]) -> "Target":
        """The target a fleet worker drives: ``view()`` of the head's, opened
        by entering it (its own connector dialer and mock join). It owns
        nothing and watches no process: the head checks the target's life."""
        here = [(what, path) for what, path in (
            ("the kernel's socket", view["address"].path if view["address"].scheme == "unix" else ""),
            ("the sandbox's connector", view["address"].via or ""),
            ("the mock's socket", view["mock_address"][5:] if (view["mock_address"] or "").startswith("unix:") else ""))
            if path and not os.path.exists(path)]
        if here:
            import socket as socket_

            what, path = here[0]
            raise UsageError(f"a fleet worker on {socket_.gethostname()} cannot reach {what} {path}: it is on the head's host. A fleet on "
                             "several hosts drives a target every worker reaches over the network: --socket tcp:HOST:PORT or ws://, or --url, "
                             "with --mock http://HOST:PORT, and --allow-remote HOST")
        t = cls(Access(), label=view["label"], kernel=view["kernel"])
        t.owned = False
        t.address, t.token, t.protocol, t.driver = view["address"], view["token"], view["protocol"], view["driver"]
        t.socket = str(t.address) if t.driver is None else t.driver.url
        t.catalog, t.tool_ms, t.mixed_ms, t.contract = view["catalog"], view["tool_ms"], view["mixed_ms"], view["contract"]
        t.mock_address, t.verdict_key = view["mock_address"], view["verdict_key"]
        t.meta = {"name": "fleet-worker", "socket": t.socket}
        t._prepared = True
        return t

    # --- driving ----------------------------------------------------------------------

    def client(self, **kw: Any) -> Any:
        """A KernelClient, or for an agent protocol an HttpAgentClient (the
        same surface: connect, send/collect, turn, stats, connected)."""
        assert self.address is not None, "prepare() first"
        if self.driver is not None:
            return HttpAgentClient(self.driver, self.address, dialer=self._dialer, histories=self.histories, **kw)
        return KernelClient(self.address, self.token, self.protocol, dialer=self._dialer, **kw)

    def plan(self, text: str) -> Plan:
        return build_plan(text, self.catalog, self.tool_ms, self.mixed_ms)

    async def cancel_point(self, turn: Turn) -> None:
        """Returns once the mock has answered the turn's first LLM request:
        the agent is running the turn's tools, the moment an interrupt over an
        agent protocol cancels it (HttpAgentClient.interrupt bounds the wait
        by the turn's deadline)."""
        if self.join is None:
            raise UsageError("a cancel is verified from the mock's side: give --mock (or --launch)")
        while True:
            entry = await self.join.get(turn.nonce)
            records = (entry or {}).get("records") or ()
            if records and records[0].get("status"):
                return
            await asyncio.sleep(CANCEL_POLL_S)  # polling the mock; bounded by the caller

    async def _cancel_verdict(self, turn: Turn, plan: Plan) -> TurnVerdict:
        """Watch the mock's record of a cancelled turn for the window
        (docs/protocol.md, *Cancels*): it ends early when the agent is seen to
        run on, a request arriving past the bound."""
        assert self.join is not None and turn.cancel is not None
        t_cancel = turn.cancel["t"]
        t_end = t_cancel + cancel_window_s(plan)
        while True:
            entry = await self.join.get(turn.nonce)
            now = time.monotonic()
            if ran_on(t_cancel, entry) or now >= t_end:
                return judge_cancel(turn, plan, entry, t_end=now)
            await asyncio.sleep(min(CANCEL_POLL_S, t_end - now))  # a window watched, bounded by t_end

    async def verdict(self, turn: Turn, **kw: Any) -> TurnVerdict:
        """Judge a turn by its plan and contract -- and by the mock's own record
        of it, when the mock can be asked: a kernel that rewords the model's
        answer is verified exactly as one that echoes it."""
        plan = self.plan(turn.text)
        if turn.cancel is not None and turn.cancel.get("t") is not None and self.join is not None:
            return await self._cancel_verdict(turn, plan)
        entry = None
        if self.join is not None and turn.outcome == "response" and not turn.duplicate:
            entry = await self.join.get(turn.nonce)
            for r in (entry or {}).get("records") or ():
                self.llm_seen[(r.get("dialect"), r.get("stream"))] += 1
        return judge(turn, plan, contract=self.contract, mock=entry, joined=self.join is not None, key=self.verdict_key, **kw)

    def alive(self) -> bool:
        try:
            self.check()
        except KstressError:
            return False
        return True

    def check(self) -> None:
        """Raise MockDied or TargetDied when either process of the sandbox
        has exited (the mock first: a dead mock makes the kernel fail too)."""
        if self.launch is not None:
            L = self.launch
            mock = L.mock_process
            if mock is not None and mock.returncode is not None:
                raise MockDied(f"the mock LLM died during the run ({exit_status(mock.returncode)}); its stderr:\n{tail((L.host or L).logs / 'mock.err') or '(empty)'}")
            if L.connector_proc is not None and L.connector_proc.returncode is not None:
                raise ConnectorGone(f"the sandbox's connector died during the run ({exit_status(L.connector_proc.returncode)}); its stderr:\n{tail(L.logs / 'connector.err') or '(empty)'}")
            if L.target_proc is not None and L.target_proc.returncode is not None:
                raise TargetDied(
                    f"target {self.kernel or L.spec.name} died during the run ({exit_status(L.target_proc.returncode)}); the tail of its stderr:\n"
                    f"{tail(L.logs / 'target.err') or '(empty)'}"
                )
            return
        if self.target_pid is None:
            return
        # a detached sandbox's processes are another process's children: ask
        # /proc, at most every ALIVE_EVERY_S (this runs between every two turns)
        now = time.monotonic()
        if now - self._alive_at < ALIVE_EVERY_S:
            return
        if self._sandbox is not None and self._sandbox.mock_pid is not None and not _running(self._sandbox.mock_pid):
            raise MockDied(f"the mock LLM of the sandbox died during the run (pid {self._sandbox.mock_pid}); its logs are in {self._sandbox.run_dir / 'logs'}")
        if not _running(self.target_pid):
            raise TargetDied(f"target {self.meta.get('name')} died during the run (pid {self.target_pid}, not our child: its exit status is in {self._sandbox.path if self._sandbox else 'the sandbox state'} once the supervisor saw it)")
        self._alive_at = now

    async def vanished(self, within_s: float = 0.5) -> bool:
        """After a connection was refused or reset: did the target (or the
        mock) just die? Waits up to ``within_s`` for the exit to be seen, so
        inputs that fail because of a death are not counted as load."""
        deadline = time.monotonic() + within_s
        while True:
            self._alive_at = -ALIVE_EVERY_S
            if not self.alive():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self.launch is not None and self.launch.target_proc is not None:
                await grace(self.launch.target_proc.wait(), left)
            else:
                await asyncio.sleep(min(0.02, left))  # polling /proc with a deadline

    async def stop_and_check_orphans(self) -> list[dict[str, Any]] | None:
        """Only for a sandbox this run launched: stop the target, list what it
        left behind (None when this run did not start the target)."""
        if self.launch is None:
            return None
        exit_ = await self.launch.stop_target()
        self.orphans = exit_.orphans
        return self.orphans
