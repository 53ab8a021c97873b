"""The head's side of a fleet: the bridge process, its frames, and what the
head learns of each worker."""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import secrets
import shutil
import signal
import struct
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

from ..aio import finish_shielded
from ..errors import InfraError, KstressError, UsageError
from .bridge import START_TIMEOUT_S, STOP_GRACE_S
from .spec import FleetSpec

ROOT = str(Path(__file__).resolve().parents[2])
TAG_ENV = "KSTRESS_FLEET"
# the bridge's own exit after the end frame (ray.shutdown stops a local instance)
EXIT_GRACE_S = 20.0
# the longest a running fleet may be silent: every worker answers a take
# within TAKE_WAIT_S (harness/fleet/actor.py), so this is a hung bridge
SILENCE_S = 60.0


class FleetLost(InfraError):
    """A worker of the fleet (or the node it ran on) is gone: kstress's own
    side failed, not the kernel (exit 5); the rows it sent are kept."""


@dataclass
class WorkerInfo:
    index: int
    pid: int
    host: str
    node_id: str
    node_ip: str
    clock_offset_s: float
    clock_bound_s: float
    sent: int = 0
    sent_before: int = 0  # what earlier runs on this fleet sent (findmax's stages)
    recorded: int = 0
    batches: int = 0
    state: str = "running"  # running | done | stopped | failed | lost
    error: str | None = None
    extras: dict[str, Any] = field(default_factory=dict)
    final: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        out = {"worker": self.index, "pid": self.pid, "host": self.host, "node_ip": self.node_ip, "node_id": self.node_id[:12],
               "clock_offset_s": round(self.clock_offset_s, 6), "clock_bound_s": round(self.clock_bound_s, 6),
               "inputs_sent": self.sent, "turns_recorded": self.recorded, "batches": self.batches, "state": self.state}
        if self.error:
            out["error"] = self.error
        return out


Batch = dict[str, Any]


class Fleet:
    """``async with Fleet(spec, log) as f: await f.run(entry, jobs, t0, on_batch)``.

    Entering starts the bridge (and Ray, and the workers) and reads each
    worker's identity and clock; ``run`` hands every worker its job and
    passes each batch to ``on_batch`` until all are done (and may be called
    again: the same workers run the next stage); leaving stops the bridge on
    every path. A lost worker ends the run: the others are stopped,
    their last batches still handed on, and FleetLost is raised naming it."""

    def __init__(self, spec: FleetSpec, log: Path) -> None:
        self.spec = spec
        self.log = log
        self.workers: list[WorkerInfo] = []
        self.init_s: float | None = None
        self.proc: asyncio.subprocess.Process | None = None
        self._temp: str | None = None
        self._stopped = False
        # in the environment of the bridge and every process it starts (Ray's
        # inherit it): `grep -l KSTRESS_FLEET=<tag> /proc/*/environ` finds them
        self.tag = f"{os.getpid()}-{secrets.token_hex(4)}"

    def argv(self) -> list[str]:
        bridge = [sys.executable, "-m", "harness.fleet.bridge"]
        if self.spec.kind != "local":
            return bridge
        if shutil.which("unshare") is None:
            raise UsageError("--fleet local:N runs its Ray instance in a private network namespace: unshare (util-linux) is not installed")
        # its own network namespace (Ray binds every address it finds: there only lo), and
        # its own PID namespace with the bridge as PID 1: whatever ends the bridge ends Ray
        ns = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]
        if os.geteuid() != 0:
            ns.insert(1, "--map-root-user")
        return ns + bridge

    async def __aenter__(self) -> "Fleet":
        # /tmp, not $TMPDIR: Ray's unix sockets live under its temp dir, and a
        # socket's path is at most 107 bytes
        self._temp = tempfile.mkdtemp(prefix="kst-ray-", dir="/tmp") if self.spec.kind == "local" else None
        err = self.log.open("ab")
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.argv(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=err,
                cwd=ROOT, start_new_session=True, limit=2**26, env={**os.environ, TAG_ENV: self.tag})
        finally:
            err.close()
        try:
            self._send({"op": "hello", "spec": self.spec, "root": ROOT, "temp_dir": self._temp})
            ready = await self._read(START_TIMEOUT_S, "starting Ray and its workers")
            if ready is not None and ready.get("op") == "unreachable":
                raise InfraError(f"the fleet ({self.spec.text}) did not start: {ready['why']} -- " + (
                    "--fleet auto joins the cluster RAY_ADDRESS names or the one `ray start` runs on this machine; start one "
                    "(`ray start --head --node-ip-address 127.0.0.1`), or run the workers here with --fleet local:N"
                    if self.spec.address == "auto" else
                    f"is a Ray head with its client server (`ray start --head --ray-client-server-port PORT`) running at {self.spec.address}?"))
            if ready is None or ready.get("op") != "ready":
                raise InfraError(f"the fleet ({self.spec.text}) did not start: {self._tail()}")
            self.init_s = ready["init_s"]
            self.workers = [WorkerInfo(**{k: w[k] for k in ("index", "pid", "host", "node_id", "node_ip", "clock_offset_s", "clock_bound_s")})
                            for w in ready["workers"]]
            if not self.workers:
                raise InfraError(f"the fleet ({self.spec.text}) has no worker: the cluster has no alive node")
        except BaseException:
            await finish_shielded(self._close())
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await finish_shielded(self._close())

    def stop(self) -> None:
        """Every worker's share is cancelled; their last batches still come."""
        if not self._stopped:
            self._stopped = True
            with contextlib.suppress(OSError, RuntimeError):
                self._send({"op": "stop"})

    def signal(self, name: str) -> None:
        """Every worker's ``sink.signal(name)`` is set (a share waiting on the head)."""
        self._send({"op": "signal", "name": name})

    async def run(self, entry: str, jobs: list[Any], t0: float, on_batch: Callable[[WorkerInfo, Batch], Awaitable[None]]) -> None:
        assert len(jobs) == len(self.workers)
        self._stopped = False
        for w in self.workers:
            w.sent_before, w.state = w.sent, "running"
        self._send({"op": "run", "entry": entry, "jobs": jobs, "t0": t0})
        lost: list[WorkerInfo] = []
        failed: BaseException | None = None
        try:
            while True:
                msg = await self._read(SILENCE_S, "waiting for the workers' rows")
                if msg is None:
                    raise FleetLost(f"the fleet's bridge exited during the run: {self._tail()}")
                op = msg["op"]
                if op == "end":
                    break
                w = self.workers[msg["worker"]]
                if op in ("lost", "failed"):
                    w.state, w.error = op, msg["error"]
                    if op == "lost":
                        lost.append(w)
                    else:
                        failed = failed or KstressError(f"fleet worker {w.index} (pid {w.pid} on {w.host}) failed: {msg['error']}")
                    self.stop()
                    continue
                w.batches += 1
                w.sent = max(w.sent, w.sent_before + (msg.get("sent") or 0))
                w.recorded += len(msg["rows"])
                try:
                    await on_batch(w, msg)
                except BaseException:
                    # the head's own verdict on a batch (the target died): the
                    # workers are stopped and the run ends on that verdict, as a
                    # single process ends on it without waiting for its other turns
                    self.stop()
                    raise
                if msg.get("done"):
                    w.extras = msg.get("extras") or {}
                    w.final = msg.get("final") or {}
                    if msg.get("error") is not None:
                        w.state, w.error = "failed", f"{type(msg['error']).__name__}: {msg['error']}"
                        failed = failed or msg["error"]
                        self.stop()
                    else:
                        w.state = "stopped" if msg.get("stopped") else "done"
        except asyncio.CancelledError:
            # Ctrl-C: stop every worker and keep what they send until the end (bounded)
            self.stop()
            with contextlib.suppress(Exception):
                await finish_shielded(self._drain(on_batch))
            raise
        if lost:
            raise FleetLost("; ".join(
                f"fleet worker {w.index} (pid {w.pid} on {w.host}, node {w.node_ip}) was lost: {w.error}; "
                f"{max(0, w.sent - w.recorded)} of its inputs were in flight, its {w.recorded} recorded turns are kept" for w in lost))
        if failed is not None:
            raise failed

    async def _drain(self, on_batch: Callable[[WorkerInfo, Batch], Awaitable[None]]) -> None:
        deadline = time.monotonic() + STOP_GRACE_S + 5
        while True:
            msg = await self._read(max(0.1, deadline - time.monotonic()), "the workers' last rows after a stop")
            if msg is None or msg["op"] == "end":
                return
            if msg["op"] == "batch":
                w = self.workers[msg["worker"]]
                w.recorded += len(msg["rows"])
                w.state = "stopped" if msg.get("done") else w.state
                await on_batch(w, msg)

    # --- frames -------------------------------------------------------------------------

    def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc is not None and self.proc.stdin is not None
        data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.write(struct.pack(">I", len(data)) + data)

    async def _read(self, timeout_s: float, doing: str) -> dict[str, Any] | None:
        assert self.proc is not None and self.proc.stdout is not None
        try:
            async with asyncio.timeout(timeout_s):
                head = await self.proc.stdout.readexactly(4)
                (n,) = struct.unpack(">I", head)
                return pickle.loads(await self.proc.stdout.readexactly(n))
        except asyncio.IncompleteReadError:
            return None
        except TimeoutError:
            raise InfraError(f"the fleet ({self.spec.text}) said nothing for {timeout_s:.0f} s while {doing}; its log: {self.log}") from None

    def _tail(self, lines: int = 15) -> str:
        try:
            text = self.log.read_text(errors="replace").strip().splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:]) or "(its log is empty)"

    async def _close(self) -> None:
        proc, self.proc = self.proc, None
        try:
            if proc is not None:
                if proc.stdin is not None:
                    with contextlib.suppress(OSError, RuntimeError):
                        proc.stdin.close()  # EOF: the bridge shuts Ray down and exits
                try:
                    await asyncio.wait_for(proc.wait(), EXIT_GRACE_S)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGKILL)  # a local fleet: PID 1 of its namespace, whose end ends Ray
                    await proc.wait()
        finally:
            if self._temp is not None:
                shutil.rmtree(self._temp, ignore_errors=True)
