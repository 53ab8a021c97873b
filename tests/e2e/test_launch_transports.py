"""A launched kernel listening on TCP or a WebSocket inside the sandbox,
reached through the sandbox's connector: every scenario, root and rootless;
a fault still caught; kcli, status and a scenario against a detached sandbox;
readiness; cleanup of the connector on every path; 10,000 held connections."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import psutil
import pytest

from e2ehelpers import boot_clock, namespace_gone
from waiting import wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
TRANSPORTS = ["tcp", "ws"]


def scenario_runs(bin_: str | None, listen: str, out: Path, api: str | None = None) -> dict[str, list[str]]:
    """One short run of every scenario, each in its own sandbox: of the kernel
    ``bin_``, else the reference kernel by name (whose argv kstress writes,
    `--llm-api` included); on the LLM API ``api``, else the default."""
    on_api = ["--llm-api", api] if api else []
    launch = ["--launch", *(["--bin", bin_] if bin_ else []), "--listen", listen, *on_api, "--quiet", "--out", str(out)]
    kernel = bin_ or "refkernel"
    return {
        "stress": ["stress", *launch, "--conns", "4", "--inputs", "3"],
        "batch": ["batch", *launch, "--n", "2,4", "--rounds", "1"],
        "abtest": ["abtest", *launch, "--n", "4", "--rounds", "3", "--tool-ms", "100"],
        "hold": ["hold", *launch, "--conns", "200", "--probe", "8"],
        # three rounds cannot reach p < 0.05: a build against itself is "same", never a coin toss
        "cmp": ["cmp", kernel, kernel, "--listen", listen, "--rounds", "3", "--bombard-conns", "8", "--bombard-rounds", "1",
                "--stability-rounds", "3", "--tool-ms", "100", *on_api, "--quiet", "--out", str(out)],
    }


def check_runs(run, runs: dict[str, list[str]], listen: str, out: Path, api: str | None = None) -> None:
    failed = {}
    for name, argv in runs.items():
        r = run(argv)
        if r.returncode != 0:
            failed[name] = f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            continue
        run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
        targets = json.loads((run_dir / "run.json").read_text())["meta"]["targets"]
        assert {t["transport"] for t in targets} == {listen}, targets
        if api:  # `--llm-api` reached every launched kernel
            assert all(t["llm_api"] == api and "--llm-api" in t["argv"] for t in targets), targets
        assert (run_dir / ("logs-old" if name == "cmp" else "logs") / "connector.out").exists()
    assert not failed, "\n\n".join(f"--- {k}: {v}" for k, v in failed.items())


# each transport's runs on one of the LLM APIs the mock speaks besides chat (every other test's): `--llm-api` reaches
# the launched reference kernel and stress, batch, abtest, hold and cmp pass on it, without runs of their own (a
# kernel given by --bin over the transport: the rootless variant)
@pytest.mark.parametrize("listen, api", [("tcp", "responses"), ("ws", "anthropic")])
def test_every_scenario_over_the_transport_as_root(listen, api, tmp_path):
    env = dict(os.environ, KSTRESS_HOME=str(tmp_path / "home"), TMPDIR=str(tmp_path), PYTHONPATH=str(REPO))

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)

    check_runs(run, scenario_runs(None, listen, tmp_path / "runs", api), listen, tmp_path / "runs", api)
    assert not list(tmp_path.glob("kst-*")), "a sandbox directory was left behind"


@pytest.mark.parametrize("listen", TRANSPORTS)
def test_every_scenario_over_the_transport_rootless(listen, unpriv):
    """As nobody: a user+net namespace, the connector inside it as nobody too."""
    work = unpriv.workdir()
    bin_ = work / "refkernel"
    bin_.write_text(f"#!{unpriv.python}\nfrom refkernel.__main__ import main\nmain()\n")
    bin_.chmod(0o755)
    os.chown(bin_, unpriv.uid, unpriv.gid)
    env = unpriv.env(work)
    env.update(KSTRESS_HOME=str(work / "home"), TMPDIR=str(work))

    def run(argv: list[str]) -> subprocess.CompletedProcess:
        return subprocess.run(unpriv.argv(["-m", "harness", *argv]), env=env, cwd=work, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)

    check_runs(run, scenario_runs(str(bin_), listen, work / "runs"), listen, work / "runs")
    for d in (work / "runs").iterdir():
        if d.is_symlink():  # runs/latest
            continue
        mechanisms = {t["mechanism"] for t in json.loads((d / "run.json").read_text())["meta"]["targets"]}
        assert mechanisms == {"userns"}, (d, mechanisms)
    assert not list(work.glob("kst-*")), "a sandbox directory was left behind"


@pytest.mark.parametrize("listen", TRANSPORTS)
def test_a_kernel_fault_is_still_caught_over_the_transport(listen, tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "harness", "batch", "--launch", "--listen", listen, "--n", "4", "--kinds", "batch", "--rounds", "2",
         "--quiet", "--out", str(tmp_path / "runs"), "--", "--fault", "first-tool-only"],
        cwd=REPO, env=dict(os.environ, TMPDIR=str(tmp_path)), capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 1, r.stdout + r.stderr
    assert "- FAIL every batch turn passed its verdict — 0/2 passed" in r.stdout, r.stdout
    run_dir = Path(r.stdout.strip().splitlines()[-1].removeprefix("run: "))
    rows = [json.loads(line) for line in (run_dir / "turns.jsonl").read_text().splitlines()]
    assert [(row["outcome"], row["failures"]) for row in rows] == [("response", ["count 1/4"])] * 2, rows


@pytest.mark.parametrize("listen", TRANSPORTS)
def test_a_detached_sandbox_is_reached_the_same_way_by_kcli_status_and_scenarios(listen, cli):
    r = cli.launch_sh("--listen", listen)
    assert r.returncode == 0, r.stderr
    lines = dict(line.split(": ", 1) for line in r.stdout.splitlines())
    st = cli.state()
    assert st["transport"] == listen and st["socket"] == st["address"] == lines["socket"] and lines["socket"].startswith(("tcp:", "ws://"))
    assert st["connector"] == lines["connector"] and Path(st["connector"]).exists()
    connector_pid = st["pids"]["connector"]
    assert "--listen" in st["argv"] and st["address"] in st["argv"]
    r = cli.run("kcli", "send", "!slowbatch4")
    assert r.returncode == 0 and r.stdout.rstrip().endswith("verdict: ok"), r.stdout + r.stderr
    r = cli.run("kcli", "stats")
    assert r.returncode == 0 and '"connections": 1' in r.stdout, r.stdout + r.stderr
    r = cli.launch_sh("status")
    assert r.returncode == 0 and "healthy; stats" in r.stdout and f"through the connector {st['connector']}" in r.stdout, r.stdout
    r = cli.run("stress", "--conns", "4", "--inputs", "2", "--out", str(cli.out), "--quiet")
    assert r.returncode == 0, r.stdout + r.stderr
    r = cli.launch_sh("stop")
    assert r.returncode == 0 and "no orphans" in r.stdout, r.stdout + r.stderr
    known = [st["supervisor_pid"], *st["pids"].values()]
    try:
        wait_until(lambda: not left_of(st, known), 5, "the sandbox to be gone")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {left_of(st, known)}") from None
    assert connector_pid in known and not Path(st["connector"]).exists()
    # the stopped sandbox's state no longer leads anywhere
    r = cli.run("kcli", "send", "!batch2")
    assert r.returncode == 2 and "no running sandbox" in r.stderr


def left_of(st: dict, pids: list[int]) -> dict:
    """What of a detached sandbox still exists: its processes (by pid, which a
    parallel test cannot reuse the way it can a freed namespace's inode), its
    /run/netns entry."""
    alive = {}
    for p in pids:
        try:
            proc = psutil.Process(p)
            if proc.status() != psutil.STATUS_ZOMBIE:
                alive[p] = " ".join(proc.cmdline())[:100]
        except psutil.Error:
            pass
    left: dict = {"alive": alive} if alive else {}
    if st["namespace"] and Path("/run/netns", st["namespace"]).exists():
        left["netns"] = st["namespace"]
    return left


def test_the_supervisor_killed_takes_the_connector_with_it(cli):
    assert cli.launch_sh("--listen", "tcp").returncode == 0
    st = cli.state()
    pids = [st["supervisor_pid"], *st["pids"].values()]
    assert st["pids"]["connector"]
    killed = boot_clock()
    os.kill(st["supervisor_pid"], signal.SIGKILL)
    try:
        wait_until(lambda: not left_of(st, pids) and namespace_gone(st["namespace"], st["net_inode"], killed), 2.0,
                   "the guardian to clean up the connector with the rest")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {left_of(st, pids)}") from None


def test_readiness_over_tcp_and_a_target_that_never_listens(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path), KSTRESS_HOME=str(tmp_path / "home"))
    t = tmp_path / "t.toml"
    t.write_text('[target]\nbin = "refkernel"\nlisten = "ws"\nws_path = "/kernel"\nready = "socket"\n')
    r = subprocess.run([sys.executable, "-m", "harness", "batch", "--launch", "--target", str(t), "--n", "2", "--kinds", "batch",
                        "--rounds", "1", "--quiet", "--out", str(tmp_path / "runs")], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--listen ws://127.0.0.1:" in r.stdout and "/kernel" in r.stdout
    silent = tmp_path / "silent"
    silent.write_text("#!/bin/sh\nexec sleep 600\n")
    silent.chmod(0o755)
    t.write_text(f'[target]\nbin = "{silent}"\nlisten = "tcp"\nargv = ["{{bin}}", "{{port}}"]\nstart_timeout_s = 1\n')
    r = subprocess.run([sys.executable, "-m", "harness", "launch", "--target", str(t)], cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 3 and "did not become ready within 1s" in r.stderr and "to listen on tcp:127.0.0.1:" in r.stderr, r.stderr


async def test_hold_10000_connections_over_tcp(tmp_path):
    from harness.sandbox.launcher import LaunchSettings
    from harness.scenarios import Access
    from harness.scenarios.hold import HoldSettings, run_hold
    from harness.sandbox.target import spec_from_flags

    access = Access(launch=LaunchSettings(target=replace(spec_from_flags(None), listen="tcp")))
    r = await run_hold(HoldSettings(conns=10_000, out=tmp_path, quiet=True), access)
    s = r.summary
    print(f"\nheld {s['connected']} TCP connections in {s['open_s']} s, {s['harness_kb_per_connection']} KiB each")
    assert r.exit_code == 0, r.report
    assert s["connected"] == s["held_at_probe"] == 10_000 and s["kernel_connections"] >= 10_000
