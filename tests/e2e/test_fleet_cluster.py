"""A fleet on a Ray cluster of three nodes (issue 25): a head and two worker
nodes, each a separate `ray start` in a PID namespace of its own, all in one
private network namespace holding only lo -- Ray's servers bind every address
they find, and there they find only loopback. kstress runs in that namespace
too and joins with `--fleet ray://127.0.0.1:10001`: one worker per node;
killing a worker node mid-run is a named fleet failure (exit 5) with the rows
merged until then."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import wait_until
from test_fleet import loaded, ray_left, run_dir

# three Ray nodes started one after another, then two fleet runs: minutes on a loaded CI
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
RAY = str(Path(sys.executable).with_name("ray"))
STARTED = "Ray runtime started"


class Cluster:
    def __init__(self, tmp: Path) -> None:
        self.ns = f"rayfleet{os.getpid()}{secrets.token_hex(2)}"
        self.temp = Path("/tmp") / f"kst-rayc-{secrets.token_hex(3)}"  # Ray's socket paths: short
        self.logs = tmp
        self.nodes: list[tuple[subprocess.Popen, Path]] = []
        # each node's workers import kstress from this checkout, as a real cluster's nodes have it installed
        self.env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled", PYTHONPATH=str(Path(__file__).resolve().parents[2]))

    def _in_ns(self, argv: list[str]) -> list[str]:
        # a PID namespace per node, its `ray start` as PID 1: killing it kills the node whole
        return ["ip", "netns", "exec", self.ns, "unshare", "--pid", "--fork", "--kill-child", "--mount-proc", *argv]

    def start(self) -> None:
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        subprocess.run(["ip", "-n", self.ns, "link", "set", "lo", "up"], check=True)
        self.temp.mkdir()
        self._node(["--head", "--port", "6379", "--include-dashboard", "false", "--temp-dir", str(self.temp)])
        for _ in range(2):  # one at a time: two joining at once time out on a 2-core machine
            self._node(["--address", "127.0.0.1:6379"])

    def _node(self, args: list[str]) -> None:
        log = self.logs / f"node{len(self.nodes)}.log"
        with log.open("w") as f:
            p = subprocess.Popen(self._in_ns([RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1", *args]),
                                 stdout=f, stderr=subprocess.STDOUT, env=self.env, start_new_session=True, stdin=subprocess.DEVNULL)
        self.nodes.append((p, log))
        wait_until(lambda: STARTED in log.read_text() or p.poll() is not None, timeout=120, what=f"ray node {len(self.nodes) - 1} started")
        assert p.poll() is None, log.read_text()[-3000:]

    def kill_node(self, i: int) -> None:
        os.killpg(self.nodes[i][0].pid, signal.SIGKILL)
        self.nodes[i][0].wait()

    def listeners(self) -> list[str]:
        out = subprocess.run(["ip", "netns", "exec", self.ns, "ss", "-Hltn"], capture_output=True, text=True, check=True).stdout
        return [ln.split()[3] for ln in out.splitlines() if ln.strip()]

    def stop(self) -> None:
        for p, _ in self.nodes:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        subprocess.run(["ip", "netns", "del", self.ns], check=False)
        for f in self.temp.glob("session_*/logs/ray_client_server*"):  # kept for a failure's story
            shutil.copy(f, self.logs / f.name)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path)
    try:
        c.start()
        yield c
    finally:
        c.stop()


def test_a_three_node_cluster_runs_a_fleet_and_a_lost_node_is_named(cli, cluster):
    # every Ray server of the three nodes listens on loopback only
    assert cluster.listeners() and all(a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:", "[::1]:")) for a in cluster.listeners()), cluster.listeners()
    kstress = ["ip", "netns", "exec", cluster.ns, sys.executable, "-m", "harness", "stress", "--fleet", "ray://127.0.0.1:10001", "--launch", "--quiet", "--out", str(cli.out)]
    r = subprocess.run([*kstress, "--conns", "30", "--inputs", "10"], env=cli.env, cwd=cli.out.parent, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    doc, rows = loaded(run_dir(r))
    f = doc["extras"]["fleet"]
    assert f["kind"] == "cluster" and len(f["workers"]) == 3 and len({w["node_id"] for w in f["workers"]}) == 3  # one per node
    assert doc["summary"]["attempted"] == 300 and sorted(w["turns_recorded"] for w in f["workers"]) == [100, 100, 100]
    assert len({r["nonce"] for r in rows}) == len(rows)

    # a timed run; worker node 2 is killed once every worker has recorded turns
    p = subprocess.Popen([*kstress, "--conns", "6", "--duration", "60s", "--mix", "!batch2"], env=cli.env, cwd=cli.out.parent,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    try:
        def workers_recording() -> bool:
            runs = sorted(cli.out.glob("stress-*"), key=lambda d: d.stat().st_mtime)
            t = runs[-1] / "turns.jsonl" if len(runs) == 2 else None
            lines = t.read_text().splitlines() if t and t.exists() else []
            seen = {json.loads(ln).get("worker") for ln in lines[:-1]}  # the last line may be half written
            return {0, 1, 2} <= seen

        wait_until(workers_recording, timeout=120, what="three workers recording turns")
        cluster.kill_node(2)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()  # reaped, and its pipes closed
    assert p.returncode == 5, out + err
    doc, rows = loaded(run_dir(subprocess.CompletedProcess([], 0, out, err)))
    lost = [w for w in doc["extras"]["fleet"]["workers"] if w["state"] == "lost"]
    assert len(lost) == 1 and f"fleet worker {lost[0]['worker']}" in doc["error"] and "was lost" in doc["error"], doc["error"]
    assert doc["summary"]["partial"] and doc["summary"]["turns_recorded"] == len(rows) > 0
    assert {r["worker"] for r in rows if r["kind"] == "load"} == {0, 1, 2}  # the lost worker's rows up to its node's death are kept
    # the nodes run on (they are the cluster's), but not the run's bridge nor its workers
    wait_until(lambda: ray_left() == [], timeout=30, what="the runs' bridges and workers gone")
