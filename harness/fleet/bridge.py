"""The bridge: the only process of the head's side that imports Ray.

    python -m harness.fleet.bridge     (started by harness/fleet/head.py)

It speaks length-prefixed pickled frames: the head's on stdin, its own on
stdout (Ray's chatter goes to stderr, which the head keeps in fleet.log).

    head   -> hello {spec, root, temp_dir}
    bridge -> ready {workers: [identity + clock offset and bound], init_s}
    head   -> run {entry, jobs, t0}          one job per worker; t0 on the head's clock
    bridge -> batch {worker, rows, failures, sent[, done, extras|error|stopped]}  ...
    bridge -> lost {worker, error}            a worker (or its node) is gone
    head   -> signal {name}                   (any time) every worker's sink.signal(name) is set
    head   -> stop                            (any time) every worker's share is cancelled
    bridge -> end
    head   -> run ...                         again: the next stage, on the same workers (findmax)

A local fleet's bridge runs as PID 1 of its own PID namespace (unshare
--kill-child): when it exits, however, the kernel ends every Ray process it
started. A cluster's bridge kills its actors before it exits."""

from __future__ import annotations

import os
import pickle
import queue
import re
import struct
import sys
import threading
import time
from typing import Any, BinaryIO

CLOCK_ROUNDS = 5  # round trips per worker; the shortest bounds the offset
STOP_GRACE_S = 10.0  # after a stop, how long the workers' last batches are awaited
START_TIMEOUT_S = 120.0  # ray.init and the actors' start, on a loaded machine
CLIENT_TRIES = 3  # connections to a cluster's Ray Client server


def write(out: BinaryIO, lock: threading.Lock, msg: dict[str, Any]) -> None:
    data = pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)
    with lock:
        out.write(struct.pack(">I", len(data)) + data)
        out.flush()


def read(inp: BinaryIO) -> dict[str, Any] | None:
    head = inp.read(4)
    if len(head) < 4:
        return None
    (n,) = struct.unpack(">I", head)
    return pickle.loads(inp.read(n))


def _lo_up() -> None:
    """A fresh network namespace's lo is down."""
    from pyroute2 import IPRoute

    with IPRoute() as ip:
        idx = ip.link_lookup(ifname="lo")[0]
        ip.link("set", index=idx, state="up")


def main() -> int:
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # anything printed goes to the log, not into the frames
    lock = threading.Lock()
    hello = read(inp)
    if hello is None:
        return 0
    spec, root = hello["spec"], hello["root"]
    t_start = time.monotonic()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    sys.path.insert(0, root)
    if spec.kind == "local":
        os.environ["RAY_AUTH_MODE"] = "disabled"  # a private instance no other process can reach: no token file in $HOME
        _lo_up()
    import ray

    from harness.fleet.actor import Worker

    if spec.kind == "local":
        ray.init(num_cpus=spec.workers, include_dashboard=False, _node_ip_address="127.0.0.1", _temp_dir=hello["temp_dir"],
                 object_store_memory=100 * 1024 * 1024, log_to_driver=False, configure_logging=False)
        n = spec.workers
        options: dict[str, Any] = {"num_cpus": 1}
    else:
        # no runtime_env: a cluster's workers import kstress as its nodes have it
        # installed (docs/fleet.md). Through Ray Client a runtime_env is made by the
        # head node's runtime-env agent, and a client server that started before
        # the agent had its port (http://127.0.0.1:0, seen on a loaded machine)
        # fails every client that asks for one
        for attempt in range(1, CLIENT_TRIES + 1):
            try:
                ray.init(address=spec.address, log_to_driver=False, configure_logging=False)
                break
            except ConnectionError as exc:
                if not isinstance(exc, ConnectionAbortedError) or attempt == CLIENT_TRIES:
                    # no cluster where the address says: the head names it, without Ray's traceback
                    write(out, lock, {"op": "unreachable", "why": str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__})
                    return 0
                # Ray Client's proxier at times fails to start this client's server
                # (its shim process seen exiting at once on a loaded machine; 2 of 3
                # runs of the cluster test under -n 2): a new connection gets a new one
                print(f"bridge: ray.init({spec.address}) attempt {attempt} of {CLIENT_TRIES}: {str(exc).strip().splitlines()[-1]}", file=sys.stderr, flush=True)
                try:
                    ray.shutdown()
                except Exception:  # noqa: BLE001 - nothing was connected
                    pass
        nodes = sorted(x["NodeID"] for x in ray.nodes() if x.get("Alive"))
        n = spec.workers or len(nodes)
        options = {"num_cpus": 0}
    Remote = ray.remote(Worker)
    common = dict(max_restarts=0, max_task_retries=0, max_concurrency=64, **options)
    if spec.kind == "local":
        actors = [Remote.options(**common).remote(i, n) for i in range(n)]
    else:
        # worker i on node i mod the nodes, pinned: SPREAD is a preference, and was seen putting two of three on one node
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        actors = [Remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(nodes[i % len(nodes)], soft=False), **common).remote(i, n)
                  for i in range(n)]
    try:
        ids = ray.get([a.identity.remote() for a in actors], timeout=START_TIMEOUT_S)
        for a, ident in zip(actors, ids):
            ident.update(_clock(ray, a))
        write(out, lock, {"op": "ready", "workers": ids, "init_s": round(time.monotonic() - t_start, 3)})
        # one reader for the bridge's whole life: a run's stop and signals, and the next run
        inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def listen() -> None:
            while True:
                msg = read(inp)
                inbox.put(msg)
                if msg is None:
                    return

        threading.Thread(target=listen, daemon=True).start()
        while True:
            cmd = inbox.get()
            if cmd is None or cmd.get("op") != "run":
                return 0
            if not _drive(ray, actors, ids, cmd, inbox, out, lock):
                return 0  # a worker was lost: no further run on this fleet
    finally:
        if spec.kind != "local":
            for a in actors:
                try:
                    ray.kill(a)
                except Exception:  # noqa: BLE001 - a lost node's actor is gone already
                    pass
        ray.shutdown()
    return 0


def _first_line(exc: BaseException) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    # a RayTaskError's text is the remote traceback: its last line names the error
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[-1].strip() if lines else ''}"


def _clock(ray: Any, actor: Any) -> dict[str, float]:
    """The worker's monotonic clock against this process's (the head's, on
    the same host; across hosts, against the bridge's): the round trip with
    the shortest time bounds the offset to half of it."""
    best: tuple[float, float] | None = None
    for _ in range(CLOCK_ROUNDS):
        t1 = time.monotonic()
        w = ray.get(actor.clock.remote())
        t2 = time.monotonic()
        if best is None or t2 - t1 < 2 * best[1]:
            best = (w - (t1 + t2) / 2, (t2 - t1) / 2)
    assert best is not None
    return {"clock_offset_s": best[0], "clock_bound_s": best[1]}


def _drive(ray: Any, actors: list[Any], ids: list[dict[str, Any]], cmd: dict[str, Any], inbox: "queue.Queue[dict[str, Any] | None]",
           out: BinaryIO, lock: threading.Lock) -> bool:
    """One run on the workers, until every one is done; False when one was lost."""
    stop = threading.Event()
    signals: list[str] = []
    healthy = True

    def take_inbox() -> None:
        while True:
            try:
                msg = inbox.get_nowait()
            except queue.Empty:
                return
            if msg is None or msg.get("op") == "stop":
                stop.set()
                if msg is None:
                    inbox.put(None)  # EOF stays for the loop after this run
            elif msg.get("op") == "signal":
                signals.append(msg["name"])

    # started before the first take: an async actor runs its calls concurrently, in no promised order
    ray.get([a.start.remote(cmd["entry"], cmd["jobs"][i], cmd["t0"] + ids[i]["clock_offset_s"]) for i, a in enumerate(actors)], timeout=START_TIMEOUT_S)
    pending = {a.take.remote(): i for i, a in enumerate(actors)}
    stopping_until: float | None = None
    while pending:
        take_inbox()
        while signals:
            name = signals.pop(0)
            for a in actors:
                a.signal.remote(name)
        if stop.is_set() and stopping_until is None:
            for a in actors:
                a.stop.remote()
            stopping_until = time.monotonic() + STOP_GRACE_S
        if stopping_until is not None and time.monotonic() > stopping_until:
            for i in pending.values():
                write(out, lock, {"op": "lost", "worker": i, "error": f"no answer within {STOP_GRACE_S:g} s of the stop"})
            healthy = False
            break
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=0.1)
        for ref in ready:
            i = pending.pop(ref)
            try:
                batch = ray.get(ref)
            except Exception as exc:  # noqa: BLE001 - the worker is lost to the run, either way
                # RayActorError: the worker's process or its node is gone; any other: take() itself raised (a bug of kstress)
                gone = isinstance(exc, ray.exceptions.RayActorError)
                write(out, lock, {"op": "lost" if gone else "failed", "worker": i, "error": _first_line(exc)})
                stop.set()  # one worker gone: the run ends, as it does when the target dies
                healthy = False
                continue
            batch["op"], batch["worker"] = "batch", i
            write(out, lock, batch)
            if not batch.get("done"):
                pending[actors[i].take.remote()] = i
    write(out, lock, {"op": "end"})
    return healthy


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    # not sys.exit: the stdin listener thread may hold stdin's lock, which
    # the interpreter's shutdown would wait on
    os._exit(code)
