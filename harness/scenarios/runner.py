"""One way through a run, for every scenario.

A scenario is a module that registers a :class:`Scenario`: its settings class,
``run``, and three pure functions of the raw data, ``summarize(turns, settings,
extras)``, ``checks(summary, settings)`` and ``render(doc, summary)``. The
runner owns the rest, in small parts:

    open     check the targets (usage errors before any run directory), create
             the run directory, start what the run owns (sandboxes)
    record   one recorder for every turn: judge -> row -> turns.jsonl -> progress;
             a scenario with a digest (stress) feeds each row to it and keeps
             none (memory flat in turns: harness/scenarios/digest.py), the
             others keep their rows in memory for the summary
    close    stop what the run started, list orphans (every scenario that started
             its target fails naming them), copy the mock's log and process logs
    write    summary, checks, run.json and report.md -- on every path: pass,
             checks failed, target died (3), interrupted (130), a bug (4)

Signals are not handled here: the CLI edge turns SIGINT/SIGTERM/SIGHUP into a
cancellation of the run's task, which the runner records as interrupted.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Sequence

import psutil

from ..aio import finish_shielded, first_error
from ..wire.client import ConnError, Turn, failed_turn
from ..errors import (
    EXIT_CHECKS_FAILED,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_INCOMPLETE,
    EXIT_THRESHOLD,
    EXIT_USAGE,
    KstressError,
    TargetDied,
    TargetError,
    UsageError,
)
from ..judge.forensics import Forensics, entry_of
from ..results.comparison import CompareSpec
from ..results.observed import count_log, count_records, llm_api_checks, observed_entry
from ..results.rundir import FLUSH_EVERY_S, Check, RunDir, host_meta
from ..results.stats import LogHistogram
from ..results.report import html_wanted
from ..sandbox.launcher import copy_logs
from ..sandbox.sut import Target
from ..sandbox.target import scrub
from ..results.thresholds import evaluate, parse_thresholds
from ..judge.verdict import TurnVerdict

Rows = list[dict[str, Any]]
# connection failures that mean the peer went away: worth a look whether it died
VANISHED = frozenset({"refused", "no_socket", "reset", "closed"})
# how long a kernel that ended a turn with a `shutdown` error frame is given to
# exit (the reference kernel's default shutdown grace): a kernel stopping on a
# signal says so to every turn in flight, and those turns are the death's, not
# the kernel's failures
SHUTDOWN_EXIT_S = 5.0


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


def settings_json(settings: Any, targets: Sequence[Target] = ()) -> dict[str, Any]:
    """A settings dataclass as run.json stores it."""
    d = asdict(settings)
    for k, v in d.items():
        if isinstance(v, Path):
            d[k] = str(v)
    return d


@dataclass(frozen=True)
class Scenario:
    """A registry entry (harness/scenarios/__init__.py): everything the CLI,
    the runner and `kstress report` need to know of one scenario."""

    name: str
    help: str
    settings: type
    run: Callable[..., Awaitable[RunResult]]
    summarize: Callable[[Rows, dict[str, Any], dict[str, Any]], dict[str, Any]]
    checks: Callable[[dict[str, Any], dict[str, Any]], list[Check]]
    render: Callable[[dict[str, Any], dict[str, Any]], str]
    to_json: Callable[[Any, Sequence[Target]], dict[str, Any]] = settings_json
    access: bool = True  # takes --launch/--state/--socket and the target options
    # takes several kernels at once (repeatable --target/--bin, --weight; with
    # --launch): its run gets an Access with `more` and splits its load itself
    kernels: bool = False
    # what `kstress compare` compares of two stored runs (harness/results/comparison.py)
    compare: CompareSpec = CompareSpec(refused="it has no comparison")
    # settings (as run.json stores them), extras -> what the run keeps of its
    # rows instead of the rows: add(row), summary(), thresholds(), chart();
    # `summarize` must answer what the digest fed the same rows answers
    digest: Callable[[dict[str, Any], dict[str, Any]], Any] | None = None
    # the rows --threshold judges: the load, without probes and warm-up
    threshold_rows: Callable[[Rows], Rows] = lambda rows: [r for r in rows if r.get("kind") != "probe" and not r.get("warmup")]


def orphan_checks(extras: dict[str, Any]) -> list[Check]:
    """The one orphan check: present whenever the run started its target."""
    orphans = extras.get("orphans")
    if orphans is None:
        return []
    names = [k["name"] for k in extras.get("kernels") or ()]
    if names:
        # several kernels: one check each, naming it
        out = []
        for n in names:
            mine = [o for o in orphans if o.get("kernel") == n]
            detail = "; ".join(f"pid {o['pid']}: {o['cmdline']}" for o in mine)
            out.append(Check(f"no orphans after {n} exited", not mine, detail or "none"))
        return out
    detail = "; ".join((f"{o['target']}: " if o.get("target") else "") + f"pid {o['pid']}: {o['cmdline']}" for o in orphans)
    return [Check("no orphans after the target exited", not orphans, detail or "none")]


def all_checks(scenario: Scenario, summary: dict[str, Any], settings: dict[str, Any], extras: dict[str, Any]) -> list[Check]:
    return scenario.checks(summary, settings) + orphan_checks(extras) + llm_api_checks(extras)


class RowSink:
    """``run.rows`` of a scenario with a digest: each row goes to the digest
    (and to the live metrics) and is not kept."""

    def __init__(self, digest: Any, live: Any = None) -> None:
        self.digest = digest
        self.live = live
        self.n = 0

    def append(self, row: dict[str, Any]) -> None:
        self.n += 1
        self.digest.add(row)
        if self.live is not None:
            self.live.add(row)

    def __len__(self) -> int:
        return self.n


class RowList(list):
    """``run.rows`` of a scenario without a digest: kept, and counted for the live metrics."""

    def __init__(self, live: Any) -> None:
        super().__init__()
        self.live = live

    def append(self, row: dict[str, Any]) -> None:
        super().append(row)
        self.live.add(row)


def threshold_results(scenario: Scenario, rows: Rows, settings: dict[str, Any]) -> list[dict[str, Any]]:
    """summary.thresholds: each --threshold with its measured value, from the raw rows (or the run's digest)."""
    exprs = settings.get("thresholds") or ()
    if not exprs:
        return []
    if isinstance(rows, RowSink):
        return rows.digest.thresholds()
    return [r.to_json() for r in evaluate(parse_thresholds(exprs), scenario.threshold_rows(rows))]


def verdict_of(checks: Sequence[Check], summary: dict[str, Any]) -> tuple[bool, int]:
    """passed and exit code of a run that completed: checks first (1), then
    service levels (99, k6's code), then a core check that could not run (6:
    a run that proved less than its scenario promises is no pass), else 0."""
    if not all(c.passed for c in checks if c.ran):
        return False, EXIT_CHECKS_FAILED
    if not all(t["passed"] for t in summary.get("thresholds") or ()):
        return False, EXIT_THRESHOLD
    if not all(c.ran for c in checks):
        return False, EXIT_INCOMPLETE
    return True, EXIT_OK


def partial_summary(scenario: Scenario, rows: Rows, settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """What a cut-short run measured, from the turns that did finish: the same
    function `kstress report` uses, so the two always agree."""
    summary: dict[str, Any] = {"partial": True, "turns_recorded": len(rows)}
    if len(rows):
        try:
            summary.update(summarize_rows(scenario, rows, settings, extras))
        except Exception as exc:  # noqa: BLE001 - the files must still be written
            summary["summary_error"] = f"{type(exc).__name__}: {exc}"
    return summary


def summarize_rows(scenario: Scenario, rows: Rows, settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    """The scenario's summary of the rows: from the run's own digest when it kept one."""
    if isinstance(rows, RowSink):
        return rows.digest.summary()
    return scenario.summarize(rows, settings, extras)


class Progress:
    """A live progress line on a TTY; silent otherwise or when quiet."""

    def __init__(self, total: int | None, quiet: bool = False, stream: Any = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled = not quiet and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.total = total
        self.done = 0
        self.passed = 0
        # the whole run's p50 within 1% in O(buckets) memory, however long the
        # run: the exact percentiles are computed once, at the end
        self.latencies = LogHistogram()
        self.t0 = time.monotonic()
        self._task: asyncio.Task | None = None

    def add(self, passed: bool, latency: float | None) -> None:
        self.done += 1
        self.passed += passed
        if latency is not None and passed and self.enabled:  # the histogram is for the display only
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
        if self.enabled and self._task is None:
            self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            task, self._task = self._task, None
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.stream.write("\r\033[K")
            self.stream.flush()


class Run:
    """What a scenario body works with: the run directory, the recorder, the
    targets' liveness, and ``extras`` (measurements beside the turns, written
    to run.json as they stand even when the run is cut short)."""

    def __init__(self, rundir: RunDir, targets: Sequence[Target], progress: Progress) -> None:
        self.dir = rundir
        self.targets = list(targets)
        self.progress = progress
        self.rows: Rows = []
        self.extras: dict[str, Any] = {}
        self.t0 = time.monotonic()
        self.forensics = Forensics(rundir.path)

    async def record(self, turn: Turn, target: Target, /, *, progress: bool = True, more: Callable[[Turn, TurnVerdict], Awaitable[dict[str, Any]]] | None = None,
                     **labels: Any) -> TurnVerdict:
        """Judge one turn against the target's plan, write its row, count it.
        A turn that failed because the target or the mock just died is not
        load: the run ends (TargetDied / MockDied) instead. ``more`` adds a
        scenario's own fields judged from the verdict (resilience's grade)."""
        v = await target.verdict(turn)
        if more is not None:
            labels.update(await more(turn, v))
        if not v.passed:
            if turn.error_code == "shutdown" and (target.launch is not None or target.target_pid is not None):
                if await target.vanished(SHUTDOWN_EXIT_S):
                    target.check()
            elif turn.conn_kind in VANISHED or turn.outcome == "closed":
                if await target.vanished():
                    target.check()
            else:
                target.check()
        row = v.to_json()
        row.update(labels)
        if target.label:
            row["version"] = target.label
        if target.kernel:
            row["kernel"] = target.kernel
        row.setdefault("t_rel", round(turn.t_sent - self.t0, 4))
        self.dir.turn(row)
        self.rows.append(row)
        if not v.passed and self.forensics.wants(row):
            await self._keep_failure(turn, v, row, target)
        if progress:
            self.progress.add(v.passed, v.latency_s)
        return v

    async def _keep_failure(self, turn: Turn, v: TurnVerdict, row: dict[str, Any], target: Target) -> None:
        """failures.jsonl: the turn's story, for the first failures of each name (harness/judge/forensics.py)."""
        mock = await target.join.get(turn.nonce) if target.join is not None else None
        self.forensics.add(entry_of(turn, v, row, mock, target.label))
        self.extras["failure_examples"] = self.forensics.summary()

    def close_forensics(self) -> None:
        """After the mock logs are copied: their lines for each kept nonce join its entry."""
        if self.forensics.bounds.skipped or self.forensics.examples:
            self.extras["failure_examples"] = self.forensics.summary()
        logs = {t.label: self.dir.path / mock_log_name(t.label) for t in self.targets}
        self.forensics.join_mock_logs(logs)

    async def record_failure(self, marker: str, err: ConnError, target: Target, /, **labels: Any) -> TurnVerdict:
        """An input that could not be delivered: attempted, so it counts."""
        return await self.record(failed_turn(marker, err), target, **labels)

    def check_alive(self) -> None:
        """Between turns: end the run early when a target or its mock died."""
        for t in self.targets:
            t.check()


Body = Callable[[Run], Awaitable[None]]


async def run_scenario(scenario: Scenario, settings: Any, targets: Sequence[Target], body: Body, total: int | None = None) -> RunResult:
    """Open the targets, run the body, close, write run.json and report.md on
    every path. run.json is written first when the run starts (status
    ``running``), so even a run killed with SIGKILL leaves a directory
    `kstress report` can read."""
    for t in targets:
        t.prepare()  # usage errors end here, before a run directory exists
        await t.preflight(getattr(settings, "connect_timeout_s", 5.0))
    live = _live_metrics(scenario, settings, targets)  # a port in use is a usage error: before the run dir
    rundir = RunDir(scenario.name, Path(settings.out))
    started = time.time()
    run = Run(rundir, targets, Progress(total, settings.quiet))
    tally = live.tally if live is not None else None
    if scenario.digest is not None:
        run.rows = RowSink(scenario.digest(scenario.to_json(settings, targets), run.extras), tally)
    elif tally is not None:
        run.rows = RowList(tally)
    if any(t.kernel for t in targets):
        # the kernels' names, so that `kstress report` has a row (and an orphan
        # check) for every kernel, even one that never recorded a turn
        run.extras["kernels"] = [{"name": t.kernel} for t in targets]
    stack = contextlib.AsyncExitStack()
    if live is not None:
        stack.callback(live.close)
    error: BaseException | None = None
    rundir.write_doc(_doc(scenario, settings, targets, run, started, "running"))
    flusher: asyncio.Task | None = None
    try:
        for t in targets:
            t.results = rundir.path
            await stack.enter_async_context(t)
        rundir.write_doc(_doc(scenario, settings, targets, run, started, "running"))  # now with the targets' metadata
        flusher = asyncio.create_task(_flush_every(rundir))
        run.t0 = time.monotonic()
        run.progress.start()
        try:
            await body(run)
        finally:
            await run.progress.stop()
        orphans: list[dict[str, Any]] = []
        owned = False
        for t in targets:
            found = await t.stop_and_check_orphans()
            if found is not None:
                owned = True
                orphans += [{**o, **({"target": t.label} if t.label else {}), **({"kernel": t.kernel} if t.kernel else {})} for o in found]
        if owned:
            run.extras["orphans"] = orphans
    except BaseException as exc:  # noqa: BLE001 - every path writes its results
        error = first_error(exc)
    if flusher is not None:
        flusher.cancel()
    try:
        # after closing: an owned mock has exited and flushed its log
        await finish_shielded(stack.aclose())
    except BaseException as exc:  # noqa: BLE001
        error = error or first_error(exc)
    try:
        _keep_logs(rundir, targets)
        run.extras["observed"] = [_observed(rundir, t) for t in targets]
        run.close_forensics()
    finally:
        run.forensics.close()
        rundir.close()
    result = _write(scenario, settings, targets, run, started, error)
    if isinstance(error, asyncio.CancelledError):
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # the interruption is handled: it is the result
    elif error is not None and not isinstance(error, KstressError):
        raise error  # a bug in kstress: run.json says so, the CLI shows the traceback
    return result


# where this run's settings came from, when not (only) from flags: `kstress
# run FILE` puts the scenario file and its sha256 here; run.json records them
SOURCE: dict[str, str] = {}


def _live_metrics(scenario: Scenario, settings: Any, targets: Sequence[Target]) -> Any:
    """--metrics-port P: the run's Prometheus families on 127.0.0.1:P while it goes."""
    port = getattr(settings, "metrics_port", None)
    if port is None:
        return None
    from ..results.promexport import LiveMetrics

    def name() -> str:
        return ",".join(str((t.meta or {}).get("label") or (t.meta or {}).get("name") or "?") for t in targets) or "?"

    try:
        return LiveMetrics(port, scenario.name, name)
    except OSError as exc:
        raise UsageError(f"--metrics-port {port}: cannot listen on 127.0.0.1:{port} ({exc.strerror}); pick a free port, or 0 for any") from None


async def _flush_every(rundir: RunDir) -> None:
    """turns.jsonl on disk at most FLUSH_EVERY_S behind, even when no turn
    ends for a while (a killed run keeps what it measured)."""
    while True:
        await asyncio.sleep(FLUSH_EVERY_S)  # a flush period, not synchronisation
        rundir.flush()


def mock_log_name(label: str) -> str:
    return f"mock-{label}.jsonl" if label else "mock.jsonl"


def _keep_logs(rundir: RunDir, targets: Sequence[Target]) -> None:
    for t in targets:
        if t.mock_log is not None:
            rundir.copy_mock_log(t.mock_log, t.mock_log_offset, mock_log_name(t.label))
        if t.launch is not None and t.launch.run_dir is not None:
            # the sandbox's own directory goes; its process logs stay with the results
            logs = rundir.path / (f"logs-{t.label}" if t.label else f"logs-{t.kernel}" if t.kernel else "logs")
            copy_logs(t.launch.logs, logs, t.launch.secrets)  # a kernel may print its token
    # after every copy: a joined kernel's directory is inside its host's
    for t in targets:
        if t.launch is not None and t.launch.run_dir is not None:
            t.launch.remove_run_dir()


def _observed(rundir: RunDir, t: Target) -> dict[str, Any]:
    """What the mock saw of this kernel's LLM requests (extras.observed): from
    this run's copy of its mock's log when the log is this kernel's alone, else
    from the mock's records of the turns its verdicts were joined to."""
    meta = t.meta or {}
    declared = (meta.get("workload") or {}).get("llm_api")
    log = rundir.path / mock_log_name(t.label)
    counts = count_log(log) if t.mock_log is not None and not t.kernel else None
    if counts is None:
        counts = count_records(t.llm_seen)
    if t.mock_log is None and t.join is None:
        why = "no mock log and no mock to ask (a bare --socket or --url without --mock): not checked"
    else:
        why = "the mock recorded no request of this run's turns: not checked"
    return observed_entry(t.label or t.kernel, declared, counts, why)


def _exit_for(error: BaseException | None) -> tuple[int, str | None, str]:
    """exit code, message, run.json status"""
    if error is None:
        return EXIT_OK, None, "completed"
    if isinstance(error, (asyncio.CancelledError, KeyboardInterrupt)):
        return EXIT_INTERRUPTED, "interrupted: partial results written", "interrupted"
    if isinstance(error, TargetError):
        return error.exit_code, str(error), "target_failed"
    if isinstance(error, KstressError):
        return error.exit_code, str(error), "failed"
    return EXIT_INTERNAL, f"internal error: {error!r}", "failed"


def _doc(scenario: Scenario, settings: Any, targets: Sequence[Target], run: Run, started: float, status: str) -> dict[str, Any]:
    ended = time.time()
    return {
        "scenario": scenario.name,
        "status": status,
        "passed": False,
        "exit_code": None,
        "error": None,
        "started": started,
        "ended": None if status == "running" else ended,
        "duration_s": round(ended - started, 3),
        # who wrote a run.json that still says running: `kstress report` tells
        # a run in progress from one that was killed
        "process": {"pid": os.getpid(), "started": _process_start()},
        "meta": {"host": host_meta(), "targets": [t.meta for t in targets], **({"source": dict(SOURCE)} if SOURCE else {})},
        "settings": scenario.to_json(settings, targets),
        "summary": {},
        "checks": [],
        "extras": run.extras,
    }


def _process_start() -> float | None:
    try:
        return psutil.Process().create_time()
    except psutil.Error:
        return None


def _write(scenario: Scenario, settings: Any, targets: Sequence[Target], run: Run, started: float, error: BaseException | None) -> RunResult:
    exit_code, message, status = _exit_for(error)
    rundir, rows = run.dir, run.rows
    if exit_code == EXIT_USAGE and not len(rows) and not any(rundir.path.glob("logs*")):
        # bad input caught before anything ran: the message is the result; an
        # empty FAIL report beside it would only be noise
        shutil.rmtree(rundir.path, ignore_errors=True)
        return RunResult(scenario.name, False, exit_code, None, {}, (), "", message)
    doc = _doc(scenario, settings, targets, run, started, status)
    summary, checks = recompute(scenario, doc, rows, reason=message)
    passed = False
    if exit_code == EXIT_OK:
        passed, exit_code = verdict_of(checks, summary)
    doc.update(passed=passed, exit_code=exit_code, error=message, summary=summary, checks=[c.to_json() for c in checks])
    secrets = [x for t in targets if t.launch is not None for x in t.launch.secrets]
    doc = scrub(doc, secrets)  # an error message or a kernel's stderr tail may quote one
    summary = doc["summary"]
    rundir.finish(doc)
    report = scenario.render(doc, summary)
    (rundir.path / "report.md").write_text(report)
    if html_wanted():
        write_html(rundir.path, doc, rows, report)
    return RunResult(scenario.name, passed, exit_code, rundir.path, summary, tuple(checks), report, message)


def write_html(path: Path, doc: dict[str, Any], rows: Rows, report: str) -> Path | None:
    """report.html beside report.md. Charts are a view: when they cannot be
    drawn the run's result stands, and the page (or stderr) says why. A run
    with a digest draws the rows it sampled (every row of a short run)."""
    from ..results.htmlreport import render_html

    sampled: dict[str, Any] = {}
    if isinstance(rows, RowSink):
        rows, sampled = rows.digest.chart()
    try:
        text = render_html(doc, list(rows), report, path, **sampled)
    except Exception as exc:  # noqa: BLE001 - the run's files are written; only the view is lost
        print(f"kstress: report.html not written: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    out = path / "report.html"
    out.write_text(text)
    return out


def recompute(scenario: Scenario, doc: dict[str, Any], rows: Rows, reason: str | None = None) -> tuple[dict[str, Any], list[Check]]:
    """The summary and checks of a run from its raw data: what the run writes
    at its end, and what `kstress report` recomputes from the files."""
    settings, extras = doc.get("settings") or {}, doc.get("extras") or {}
    if doc.get("status", "completed") == "completed" and not (doc.get("summary") or {}).get("partial"):
        summary = summarize_rows(scenario, rows, settings, extras)
        checks = all_checks(scenario, summary, settings, extras)
    else:
        summary, checks = partial_summary(scenario, rows, settings, extras), [Check("run completed", False, reason or doc.get("error") or "")]
    if settings.get("thresholds"):
        summary["thresholds"] = threshold_results(scenario, rows, settings)
    return summary, checks
