"""What every scenario shares: where the inputs go (a sandbox this run launched,
or the detached one), the run directory, the progress line, and the wrapper
that turns interruption or the target's death into written partial results
and the right exit code."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import psutil

from mock.catalog import DEFAULT_CATALOG, Catalog, load_catalog
from mock.markers import N_MAX, N_MIN, Plan, build_plan

from ..client import KernelClient
from ..errors import EXIT_CHECKS_FAILED, EXIT_OK, EXIT_TARGET, EXIT_USAGE, KstressError, TargetError, UsageError
from ..launcher import Launch, LaunchSettings
from ..protocol import Protocol, load_protocol
from ..results import Check, RunDir, host_meta
from ..stats import LogHistogram
from ..supervisor import require_running

EXIT_INTERRUPTED = 130


@dataclass(frozen=True)
class Access:
    """How a scenario reaches its kernel: ``launch`` (own sandbox), else
    ``socket`` (a bare socket, no sandbox), else the running detached sandbox
    (``state`` or the pointer)."""

    launch: LaunchSettings | None = None
    state: Path | None = None
    socket: Path | None = None
    token: str | None = None
    protocol: str | None = None
    tool_ms: int = 200
    mixed_ms: int = 50
    tools: Path | None = None  # catalog, for a bare socket


class Target:
    """The kernel under test, however it was reached."""

    def __init__(self, access: Access, label: str = "") -> None:
        self.access = access
        self.label = label
        self.launch: Launch | None = None
        self.owned = access.launch is not None
        self.socket = ""
        self.token: str | None = None
        self.protocol: Protocol = Protocol()
        self.tool_ms = access.tool_ms
        self.mixed_ms = access.mixed_ms
        self.catalog: Catalog = DEFAULT_CATALOG
        self.target_pid: int | None = None
        self.mock_log: Path | None = None
        self.mock_log_offset = 0
        self.meta: dict[str, Any] = {}
        self.orphans: list[dict[str, Any]] | None = None

    async def __aenter__(self) -> "Target":
        a = self.access
        if a.launch is not None:
            self.launch = Launch(a.launch)
            await self.launch.__aenter__()
            L = self.launch
            self.socket, self.token, self.protocol = str(L.socket_path), L.token, L.protocol
            self.tool_ms, self.mixed_ms = a.launch.tool_ms, a.launch.mixed_ms
            if L.spec.tools:
                self.catalog = load_catalog(L.spec.tools)
            self.target_pid = L.target_proc.pid if L.target_proc else None
            self.mock_log = L.run_dir / "mock.jsonl" if L.run_dir else None
            self.meta = {
                "name": L.spec.name, "argv": L.argv, "bin": str(L.bin_path), "bin_sha256": L.bin_sha256,
                "namespace": L.sandbox.name, "mechanism": L.sandbox.mechanism, "sandbox_dir": str(L.run_dir), "launched": True,
            }
        elif a.socket is not None:
            self.socket, self.token = str(a.socket), a.token
            self.protocol = load_protocol(a.protocol)
            if a.tools:
                self.catalog = load_catalog(a.tools)
            self.meta = {"name": "socket", "socket": self.socket, "launched": False}
        else:
            running = require_running(a.state)
            s = running.state
            if s.get("status") == "target_died":
                raise TargetError(f"the target in the running sandbox died (exit code {s.get('returncode')}); stop it with scripts/launch.sh stop")
            self.socket, self.token = s["socket"], a.token or s.get("token")
            self.protocol = load_protocol(a.protocol or s.get("protocol"))
            self.tool_ms = int(s.get("tool_ms") or a.tool_ms)
            self.target_pid = (s.get("pids") or {}).get("target")
            self.mock_log = Path(s["run_dir"]) / "mock.jsonl"
            self.meta = {
                "name": s.get("target_name"), "argv": s.get("argv"), "bin": s.get("bin"), "bin_sha256": s.get("bin_sha256"),
                "namespace": s.get("namespace"), "mechanism": s.get("mechanism"), "sandbox_dir": s.get("run_dir"), "launched": False,
            }
        if self.label:
            self.meta["label"] = self.label
        if self.mock_log is not None and self.mock_log.exists():
            self.mock_log_offset = self.mock_log.stat().st_size
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.launch is not None:
            await asyncio.shield(self.launch.aclose())

    def client(self, **kw: Any) -> KernelClient:
        return KernelClient(self.socket, self.token, self.protocol, **kw)

    def plan(self, text: str) -> Plan:
        return build_plan(text, self.catalog, self.tool_ms, self.mixed_ms)

    def alive(self) -> bool:
        if self.launch is not None:
            return self.launch.target_alive()
        if self.target_pid is None:
            return True
        try:
            return psutil.Process(self.target_pid).status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    async def stop_and_check_orphans(self) -> list[dict[str, Any]] | None:
        """Only for a sandbox this run launched: stop the target, list what it left."""
        if self.launch is None:
            return None
        exit_ = await self.launch.stop_target()
        self.orphans = exit_.orphans
        return self.orphans


@dataclass(frozen=True)
class RunResult:
    scenario: str
    passed: bool
    exit_code: int
    dir: Path | None  # None: a usage error before any turn, nothing was written
    summary: dict[str, Any]
    checks: tuple[Check, ...]
    report: str
    error: str | None = None


class Progress:
    """A live progress line on a TTY; silent otherwise or when quiet."""

    def __init__(self, total: int | None, quiet: bool = False, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total
        self.done = 0
        self.passed = 0
        # the whole run's p50 within 1% in O(buckets) memory, however long the
        # run: the exact percentiles are computed once, from turns.jsonl
        self.latencies = LogHistogram()
        self.t0 = time.monotonic()
        self._task: asyncio.Task | None = None

    def add(self, passed: bool, latency: float | None) -> None:
        self.done += 1
        self.passed += passed
        if latency is not None and passed:
            self.latencies.record(latency)

    def line(self) -> str:
        p50 = self.latencies.percentile(50)
        rate = f"{self.passed / self.done:.1%}" if self.done else "-"
        total = f"/{self.total}" if self.total else ""
        p50s = f"{p50 * 1000:.0f}ms" if p50 is not None else "-"
        return f"{self.done}{total} done  pass {rate}  p50 {p50s}  {time.monotonic() - self.t0:.1f}s"

    def draw(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()

    async def _loop(self) -> None:
        while True:
            self.draw()
            await asyncio.sleep(0.5)  # refresh period of the display

    def start(self) -> None:
        if self.enabled:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self.stream.write("\r\033[K")
            self.stream.flush()


@dataclass
class Outcome:
    """What a scenario body hands back to the wrapper."""

    summary: dict[str, Any]
    checks: list[Check]
    settings: dict[str, Any]
    extras: dict[str, Any] = field(default_factory=dict)


Body = Callable[[RunDir, "Watch"], Awaitable[Outcome]]


class Watch:
    """Lets a body notice, between turns, that the run must end early."""

    def __init__(self, targets: list[Target]) -> None:
        self.targets = targets
        self.dead: str | None = None

    def check(self) -> None:
        for t in self.targets:
            if not t.alive():
                self.dead = f"target {t.meta.get('name')} died during the run"
                raise TargetDied(self.dead)


class TargetDied(TargetError):
    pass


async def run_scenario(
    scenario: str,
    out_root: Path,
    targets: list[Target],
    body: Callable[[RunDir, Watch], Awaitable[Outcome]],
    render: Callable[[dict[str, Any], list[dict[str, Any]]], str],
    settings_json: dict[str, Any],
) -> RunResult:
    """Open the targets, run the body, write run.json and report.md on every
    path: pass, checks failed, target died (exit 3), interrupted (130)."""
    rundir = RunDir(scenario, out_root)
    started = time.time()
    outcome: Outcome | None = None
    error: str | None = None
    exit_code = EXIT_OK
    watch = Watch(targets)
    stack = contextlib.AsyncExitStack()
    loop = asyncio.get_running_loop()
    main_task = asyncio.current_task()
    interrupted = False

    def on_signal() -> None:
        nonlocal interrupted
        interrupted = True
        if main_task is not None:
            main_task.cancel()

    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        try:
            loop.add_signal_handler(sig, on_signal)
            installed.append(sig)
        except (NotImplementedError, RuntimeError):
            pass
    try:
        try:
            for t in targets:
                await stack.enter_async_context(t)
            outcome = await body(rundir, watch)
        except asyncio.CancelledError:
            if not interrupted:
                raise
            error, exit_code = "interrupted: partial results written", EXIT_INTERRUPTED
        except TargetError as exc:
            error, exit_code = str(exc), EXIT_TARGET
        except KstressError as exc:
            error, exit_code = str(exc), exc.exit_code
        finally:
            # after closing: an owned mock has exited and flushed its log
            await asyncio.shield(stack.aclose())
            for t in targets:
                if t.mock_log is not None:
                    name = f"mock-{t.label}.jsonl" if t.label else "mock.jsonl"
                    rundir.copy_mock_log(t.mock_log, t.mock_log_offset, name)
                if t.launch is not None and t.launch.run_dir is not None:
                    # the sandbox's own directory goes; its process logs stay with the results
                    logs = rundir.path / (f"logs-{t.label}" if t.label else "logs")
                    shutil.copytree(t.launch.logs, logs, dirs_exist_ok=True)
                    t.launch.remove_run_dir()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        rundir.close()

    from ..results import read_jsonl

    rows = read_jsonl(rundir.path / "turns.jsonl")
    if exit_code == EXIT_USAGE and not rows and not any(rundir.path.glob("logs*")):
        # bad input caught before anything ran: the message is the result; an
        # empty FAIL report beside it would only be noise
        shutil.rmtree(rundir.path, ignore_errors=True)
        return RunResult(scenario, False, exit_code, None, {}, (), "", error)
    if outcome is None:
        from ..report import summarize

        # the numbers of the turns that did finish, as `kstress report` would
        # recompute them: a cut-short run still says what it measured
        summary: dict[str, Any] = {"partial": True, "turns_recorded": len(rows)}
        try:
            summary.update(summarize(scenario, settings_json, rows))
        except Exception as exc:  # noqa: BLE001 - the files below must still be written
            summary["summary_error"] = f"{type(exc).__name__}: {exc}"
        outcome = Outcome(summary=summary, checks=[Check("run completed", False, error or "")], settings=settings_json)
    checks = tuple(outcome.checks)
    passed = exit_code == EXIT_OK and all(c.passed for c in checks)
    if exit_code == EXIT_OK and not passed:
        exit_code = EXIT_CHECKS_FAILED
    doc = {
        "scenario": scenario,
        "passed": passed,
        "exit_code": exit_code,
        "error": error,
        "started": started,
        "ended": time.time(),
        "duration_s": round(time.time() - started, 3),
        "meta": {"host": host_meta(), "targets": [t.meta for t in targets]},
        "settings": outcome.settings,
        "summary": outcome.summary,
        "checks": [c.to_json() for c in checks],
        "extras": outcome.extras,
    }
    rundir.finish(doc)
    report = render(doc, rows)
    (rundir.path / "report.md").write_text(report)
    return RunResult(scenario, passed, exit_code, rundir.path, outcome.summary, checks, report, error)


def check_batch_sizes(ns: tuple[int, ...], example: str) -> None:
    """--n of batch and abtest: a non-empty list of counts the marker grammar takes."""
    if not ns:
        raise UsageError(f"--n is empty: give batch sizes, e.g. --n {example}")
    for n in ns:
        if not N_MIN <= n <= N_MAX:
            raise UsageError(f"--n {n} is out of range: batch sizes are {N_MIN} to {N_MAX}")


def require(cond: bool, message: str) -> None:
    if not cond:
        raise UsageError(message)
