"""The example kernel on pydantic-ai (examples/pydantic_ai_kernel.py), driven
by kstress end to end as a user would: `kstress batch|stress --launch --target
examples/pydantic-ai.toml`, and `kstress launch` + `kcli send` where the test
needs the reply itself (docs/framework-example.md shows the numbers).

The kernel declares `[contract] batch = "barrier"`; the harness verifies that
(the tests at the end), and one test also reads the barrier from the echoed
KST-S/KST-E timestamps itself."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from mock.markers import build_plan, parse_timestamps, peak_overlap

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
TARGET = EXAMPLES / "pydantic-ai.toml"
SEQUENTIAL = EXAMPLES / "pydantic-ai-sequential.toml"
BRIDGE = EXAMPLES / "pydantic_ai_kernel.py"


class Kst:
    """`python -m harness ...` with its own KSTRESS_HOME and run root."""

    def __init__(self, root: Path) -> None:
        self.home = root / "home"
        self.out = root / "runs"
        self.out.mkdir(parents=True, exist_ok=True)
        # TMPDIR: the sandbox run dirs (and their logs) land under the test's tmp
        self.env = dict(os.environ, KSTRESS_HOME=str(self.home), PYTHONPATH=str(REPO), TMPDIR=str(root))

    def run(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "harness", *args], env=self.env, cwd=REPO,
            capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
        )

    def scenario(self, *args: str, timeout: float = 240) -> tuple[subprocess.CompletedProcess, Path]:
        # before any `--`: what follows it goes to the target
        cut = args.index("--") if "--" in args else len(args)
        r = self.run(*args[:cut], "--out", str(self.out), "--quiet", *args[cut:], timeout=timeout)
        last = r.stdout.rstrip().splitlines()[-1] if r.stdout.strip() else ""
        assert last.startswith("run: "), r.stdout + r.stderr
        return r, Path(last[5:])


def rows(run: Path, name: str = "turns.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines() if line.strip()]


def no_warnings_from_the_kernel(run: Path) -> None:
    """A framework's deprecation warnings land in the kernel's stderr: none may."""
    err = (run / "logs" / "target.err").read_text()
    assert "Warning" not in err and "Traceback" not in err, err


@pytest.fixture(scope="module")
def batch_runs(tmp_path_factory):
    """One `kstress batch` per mode, shared by the tests that read them."""
    kst = Kst(tmp_path_factory.mktemp("pyai-batch"))
    conc = kst.scenario("batch", "--launch", "--target", str(TARGET), "--kinds", "batch,slowbatch")
    seq = kst.scenario("batch", "--launch", "--target", str(SEQUENTIAL), "--kinds", "batch,mixed,slowbatch", "--n", "2,4")
    return {"concurrent": conc, "sequential": seq}


@pytest.mark.timeout(300)
def test_batch_and_slowbatch_pass_and_slow_batches_overlap(batch_runs):
    r, run = batch_runs["concurrent"]
    assert r.returncode == 0, r.stdout + r.stderr
    turns = rows(run)
    assert len(turns) == 18 and all(t["passed"] for t in turns), [t["failures"] for t in turns if not t["passed"]]
    slow = [t for t in turns if t["batch_kind"] == "slowbatch"]
    # every slow batch ran concurrently, not one call after another
    assert slow and all(t["overlap"] is not None and t["overlap"] > 1 for t in slow), [(t["n"], t["overlap"]) for t in slow]
    no_warnings_from_the_kernel(run)


@pytest.mark.timeout(300)
def test_sequential_mode_never_overlaps(batch_runs):
    r, run = batch_runs["sequential"]
    # whole-batch's check (mixed overlap 1) holds too: every call runs alone
    assert r.returncode == 0, r.stdout + r.stderr
    turns = rows(run)
    assert all(t["passed"] for t in turns), [t["failures"] for t in turns if not t["passed"]]
    timed = [t for t in turns if t["batch_kind"] in ("mixed", "slowbatch")]
    assert timed and all(t["overlap"] == 1 for t in timed), [(t["marker"], t["overlap"]) for t in timed]


@pytest.mark.timeout(300)
def test_tool_phase_concurrent_vs_sequential(batch_runs):
    """!slowbatch4 (sleeps 275, 250, 225, 200 ms): the mock's tool_ms, the kernel's
    tool phase as the LLM sees it, in each mode."""
    plan = build_plan("!slowbatch4 #x")
    med = {}
    for mode, (r, run) in batch_runs.items():
        ms = [t["tool_ms"] for t in rows(run) if t["marker"] == "!slowbatch4" and t["passed"]]
        assert len(ms) == 3, (mode, ms)
        med[mode] = statistics.median(ms)
    ratio = med["sequential"] / med["concurrent"]
    print(f"\n!slowbatch4 tool phase: concurrent {med['concurrent']} ms, sequential {med['sequential']} ms, "
          f"ratio {ratio:.2f} (ideal {plan.ideal_speedup:.2f})")
    # no tool phase is shorter than its sleeps allow
    assert med["concurrent"] >= plan.concurrent_ms and med["sequential"] >= plan.serial_ms
    # ideal 3.45; 2 leaves room for a loaded 2-core machine
    assert ratio > 2.0, med


def _reply_and_frames(stdout: str) -> tuple[str, list[dict]]:
    """kcli's `+ms frame` lines, in arrival order, and the terminal text."""
    frames = [json.loads(line.split("ms ", 1)[1]) for line in stdout.splitlines() if line.startswith("+")]
    done = [f for f in frames if f["type"] == "response"]
    assert len(done) == 1, stdout
    return done[0]["text"], frames


@pytest.mark.timeout(240)
def test_mixed_batches_run_as_a_barrier(tmp_path):
    kst = Kst(tmp_path)
    # 200 ms sleeps, not the default 50: the calls of one side must overlap
    # even when a loaded machine is slow to start the next shell
    r = kst.run("launch", "--target", str(TARGET), "--mixed-ms", "200")
    assert r.returncode == 0, r.stdout + r.stderr
    try:
        for n in (4, 6, 8):
            r = kst.run("kcli", "send", f"!mixed{n}")
            reply, frames = _reply_and_frames(r.stdout)
            nonce = re.search(r"KST nonce=(\S+)", reply).group(1)
            plan = build_plan(f"!mixed{n} #{nonce}", mixed_ms=200)
            w = next(c.index for c in plan.calls if not c.parallel_safe)
            stamps = parse_timestamps(reply, nonce)
            before = [stamps[i] for i in range(w)]
            after = [stamps[i] for i in range(w + 1, n)]
            # the harness's whole-batch check fails this kernel, and only that check
            assert "ids=ok args=ok order=ok errors=0" in reply, reply
            assert r.stdout.rstrip().splitlines()[-1].startswith("verdict: overlap "), r.stdout
            # the calls before the writer all ended before any call after it started
            assert max(e for _, e in before) < min(s for s, _ in after), (n, before, after)
            # and on each side of it the calls ran together
            for side in (before, after):
                if len(side) > 1:
                    assert peak_overlap(side) == len(side), (n, side)
            # the writer itself prints no timestamps; the kernel's tool frames
            # (in arrival order) place it between the two sides
            order = [(f["call_id"], f["phase"]) for f in frames if f["type"] == "tool"]
            wid = plan.calls[w].id
            i_start, i_end = order.index((wid, "start")), order.index((wid, "end"))
            assert all(order.index((plan.calls[i].id, "end")) < i_start for i in range(w))
            assert all(order.index((plan.calls[i].id, "start")) > i_end for i in range(w + 1, n))
    finally:
        r = kst.run("stop", timeout=60)
    assert r.returncode == 0 and "no orphans" in r.stdout, r.stdout + r.stderr


@pytest.mark.timeout(300)
def test_stress_mix_passes(tmp_path):
    r, run = Kst(tmp_path).scenario(
        "stress", "--launch", "--target", str(TARGET), "--no-dedup-probe",
        "--conns", "8", "--inputs", "5", "--mix", "!batch4:2,!slowbatch2:1,text:1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads((run / "run.json").read_text())
    s = doc["summary"]
    assert s["attempted"] == s["passed"] == 40, s
    # the bridge's stats frame agrees with what the harness sent
    assert s["kernel"]["executed"] == 40 and s["kernel"]["rejected"] == 0, s["kernel"]
    no_warnings_from_the_kernel(run)


@pytest.mark.timeout(240)
def test_llm_faults_end_the_turn_once_without_retries(tmp_path):
    r, run = Kst(tmp_path).scenario(
        "stress", "--launch", "--target", str(TARGET), "--no-dedup-probe",
        "--conns", "2", "--inputs", "6", "--mix", "!err:1,!err:429:1,!err:disconnect:1,!err:malformed:1",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    turns = rows(run)
    assert len(turns) == 12 and all(t["passed"] for t in turns)
    # a cut response is an LLM error, not "unreachable": the bridge reads the cause
    assert {t["error_code"] for t in turns} == {"llm_error"}, [(t["marker"], t["error_code"]) for t in turns]
    # one request per input: neither the SDK nor pydantic-ai retried the fault
    per_nonce: dict[str, int] = {}
    for req in rows(run, "mock.jsonl"):
        per_nonce[req["nonce"]] = per_nonce.get(req["nonce"], 0) + 1
    assert {t["nonce"]: per_nonce.get(t["nonce"]) for t in turns} == {t["nonce"]: 1 for t in turns}


@pytest.mark.timeout(300)
def test_max_retries_flag_reaches_the_sdk_and_the_default_stays_zero(tmp_path):
    """--max-retries N is the openai client's max_retries (issue 24 item 5); without
    it the bridge still makes one attempt. `!flaky:500x1` fails only attempt 1."""
    kst = Kst(tmp_path)
    mix = ("--no-dedup-probe", "--conns", "1", "--inputs", "2", "--mix", "!flaky:500x1 !batch2:1")

    def attempts(run: Path) -> dict[str, list]:
        per_nonce: dict[str, list] = {}
        for req in rows(run, "mock.jsonl"):
            if not req.get("followup"):
                per_nonce.setdefault(req["nonce"], []).append(req.get("fault"))
        return per_nonce

    r, run = kst.scenario("stress", "--launch", "--target", str(TARGET), *mix, "--", "--max-retries", "2")
    assert r.returncode == 0, r.stdout + r.stderr
    turns = rows(run)
    assert len(turns) == 2 and all(t["passed"] and t["outcome"] == "response" for t in turns), turns
    # the SDK retried the 500 once, and the retry got the batch
    assert {t["nonce"]: attempts(run)[t["nonce"]] for t in turns} == {t["nonce"]: ["500", None] for t in turns}

    r, run = kst.scenario("stress", "--launch", "--target", str(TARGET), *mix)
    turns = rows(run)
    assert len(turns) == 2 and {t["error_code"] for t in turns} == {"llm_error"}, r.stdout + r.stderr
    assert {t["nonce"]: attempts(run)[t["nonce"]] for t in turns} == {t["nonce"]: ["500"] for t in turns}


@pytest.mark.timeout(90)
def test_a_bad_max_retries_is_refused_by_name():
    env = dict(os.environ, KERNEL_TOKEN="t", OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY="k")
    r = subprocess.run([str(BRIDGE), "--socket", "/nonexistent/s", "--max-retries", "-1"], env=env,
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 2 and "--max-retries -1 is out of range" in r.stderr, r.stderr


@pytest.mark.timeout(240)
def test_responses_api(tmp_path):
    r, run = Kst(tmp_path).scenario(
        "batch", "--launch", "--target", str(TARGET), "--kinds", "batch,slowbatch", "--n", "4", "--rounds", "2",
        # declared to kstress (checked against mock.jsonl: declared_llm_api), and told to the bridge
        "--llm-api", "responses", "--", "--llm-api", "responses",
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert all(t["passed"] and (t["overlap"] is None or t["overlap"] > 1) for t in rows(run))
    assert {req["dialect"] for req in rows(run, "mock.jsonl")} == {"responses"}


# --- the socket front, without a sandbox ------------------------------------


def _frames(sock: socket.socket, buf: bytearray, n: int) -> list[dict]:
    out = []
    while len(out) < n:
        if b"\n" in buf:
            line, _, rest = bytes(buf).partition(b"\n")
            buf[:] = rest
            out.append(json.loads(line))
            continue
        chunk = sock.recv(65536)
        if not chunk:
            break
        buf += chunk
    return out


def _talk(path: Path, *frames: bytes, n: int) -> list[dict]:
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(30)
        s.connect(str(path))
        for f in frames:
            s.sendall(f)
        return _frames(s, bytearray(), n)


@pytest.mark.timeout(120)
def test_protocol_front(tmp_path):
    mock = subprocess.Popen([sys.executable, "-m", "mock", "--port", "0"], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env=dict(os.environ, PYTHONPATH=str(REPO)))
    kernel = None
    try:
        url = mock.stdout.readline().split(" on ", 1)[1].strip() + "/v1"
        sock = tmp_path / "k.sock"
        env = dict(os.environ, KERNEL_TOKEN="s3cret", OPENAI_BASE_URL=url, OPENAI_API_KEY="x")
        # the token travels only through the environment
        r = subprocess.run([str(BRIDGE), "--socket", str(sock)], env={k: v for k, v in env.items() if k != "KERNEL_TOKEN"},
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "KERNEL_TOKEN" in r.stderr
        kernel = subprocess.Popen([str(BRIDGE), "--socket", str(sock), "--data-dir", str(tmp_path)], env=env,
                                  stdout=subprocess.PIPE, text=True)
        assert kernel.stdout.readline().startswith("pydantic-ai bridge listening on ")
        assert sock.stat().st_mode & 0o777 == 0o600
        assert _talk(sock, b'{"type":"input","id":1,"text":"hi"}\n', n=1)[0]["code"] == "auth_required"
        assert _talk(sock, b'{"type":"auth","token":"nope"}\n', n=1)[0]["code"] == "auth_failed"
        got = _talk(
            sock,
            b'{"type":"auth","token":"s3cret"}\n', b"not json\n", b'{"type":"hello"}\n',
            b'{"type":"input","id":"a","text":"x","session":"s1"}\n',
            b'{"type":"input","id":"b","text":"kstress !img #pf1"}\n', b'{"type":"stats"}\n',
            n=8,
        )
        assert got[0] == {"type": "response", "kind": "auth", "ok": True, "protocol": 1}
        assert [g.get("code") for g in got[1:4]] == ["bad_json", "unknown_type", "bad_frame"] and got[3]["id"] == "a"
        stats = next(g for g in got if g["type"] == "stats")
        assert stats["batch"] == "barrier" and stats["llm_api"] == "chat" and stats["framework"].startswith("pydantic-ai 2.")
        tools = [g for g in got if g["type"] == "tool"]
        assert [(t["name"], t["phase"], t.get("ok")) for t in tools] == [("img_describe", "start", None), ("img_describe", "end", False)]
        answer = next(g for g in got if g["type"] == "response" and g.get("id") == "b")
        assert "plan=img expected=1 got=1 ids=ok args=ok order=ok errors=1" in answer["text"]
        assert "ERROR: img_describe kst-pf1.png: this bridge has no image model" in answer["text"]
        kernel.send_signal(signal.SIGTERM)
        assert kernel.wait(30) == 0
        assert not sock.exists()
    finally:
        for p in (kernel, mock):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(10)
        for p in (kernel, mock):
            if p is not None and p.stdout is not None:
                p.stdout.close()


# --- rootless ------------------------------------------------------------------


def _give_nobody_pydantic_ai(unpriv) -> None:
    """The framework's distributions into nobody's site dir, as sbx_unpriv does
    for the harness's own (same interpreter minor version, so pydantic-core's
    extension loads)."""
    import shutil

    from sbx_unpriv import _closure

    stamp = unpriv.site / ".pydantic-ai-copied"
    if stamp.exists():
        return
    for dist in _closure(("pydantic-ai-slim", "openai", "tiktoken")):
        for f in dist.files or ():
            rel = Path(str(f))
            src = Path(f.locate())
            if rel.parts[0] != ".." and src.is_file():
                (unpriv.site / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, unpriv.site / rel)
    subprocess.run(["chmod", "-R", "a+rX", str(unpriv.site)], check=True)
    stamp.touch()


@pytest.mark.timeout(300)
def test_rootless_as_nobody(unpriv):
    """An unprivileged user, no sudo: the bridge in a user namespace, started
    with the interpreter KSTRESS_EXAMPLE_PYTHON names (nobody cannot run root's venv)."""
    import shutil

    if unpriv.how != "copy":
        pytest.skip(f"nobody's interpreter is a {unpriv.how}, not this one's minor version: the framework cannot be copied to it")
    _give_nobody_pydantic_ai(unpriv)
    work = unpriv.workdir()
    examples = work / "examples"
    examples.mkdir()
    for f in (BRIDGE, TARGET):
        shutil.copy2(f, examples / f.name)
    subprocess.run(["chown", "-R", f"{unpriv.uid}:{unpriv.gid}", str(examples)], check=True)
    env = unpriv.env(work)
    env.update(KSTRESS_HOME=str(work / "home"), TMPDIR=str(work), KSTRESS_EXAMPLE_PYTHON=unpriv.python)
    args = ["-m", "harness", "batch", "--launch", "--target", str(examples / TARGET.name),
            "--kinds", "batch,slowbatch", "--n", "4", "--rounds", "2", "--out", str(work / "runs"), "--quiet"]
    r = subprocess.run(unpriv.argv(args), env=env, cwd=work, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(userns)" in r.stdout and "4/4 turns passed" in r.stdout, r.stdout


# --- under its declared contract (examples/pydantic-ai.toml: [contract] batch = "barrier") ---------------


def test_batch_passes_under_its_true_contract_with_mixed_batches(tmp_path):
    """The harness verifies the declared barrier itself, from the tools'
    timestamps: every kind passes, `!mixedN` included."""
    r, run = Kst(tmp_path).scenario("batch", "--launch", "--target", str(TARGET), "--n", "4", "--rounds", "2", "--mixed-ms", "200")
    assert r.returncode == 0, r.stdout[-3000:]
    assert "PASS mixed batches ran as barriers" in r.stdout
    doc = json.loads((run / "run.json").read_text())
    assert doc["meta"]["targets"][0]["contract"]["batch"] == "barrier"


def test_a_whole_batch_expectation_is_flagged_on_mixed_by_name(tmp_path):
    r, run = Kst(tmp_path).scenario("batch", "--launch", "--target", str(TARGET), "--contract", "batch=whole-batch",
                                    "--kinds", "mixed", "--n", "4", "--rounds", "1", "--mixed-ms", "200")
    assert r.returncode == 1, r.stdout[-3000:]
    [row] = rows(run)
    assert row["failures"][0].startswith("overlap 2>1 (calls 0 and 1 ran at once"), row["failures"]
    assert "contract batch=whole-batch runs this batch serially" in row["failures"][0]


@pytest.mark.parametrize("baseline, extra", [("sum", ()), ("control", ("--control-args", "--sequential"))])
def test_abtest_speedup_is_near_n(tmp_path, baseline, extra):
    """`--baseline auto` would refuse `kernel` here (a barrier makes
    !serialbatchN concurrent); `sum` and `control` need no serial rule."""
    r, run = Kst(tmp_path).scenario("abtest", "--launch", "--target", str(TARGET), "--n", "2,4", "--rounds", "3", "--baseline", baseline, *extra)
    assert r.returncode == 0, r.stdout[-3000:]
    summary = json.loads((run / "run.json").read_text())["summary"]
    assert summary["baseline"] == baseline
    for row in summary["rows"]:
        # near N (the 15% of the docs is measured on a quiet machine, not asserted on a shared one)
        assert row["valid"] and 0.7 * row["n"] < row["speedup"] <= 1.05 * row["n"], row


def test_abtest_of_the_sequential_launch_is_about_1x(tmp_path):
    r, run = Kst(tmp_path).scenario("abtest", "--launch", "--target", str(SEQUENTIAL), "--n", "4", "--rounds", "3")
    assert r.returncode == 0, r.stdout[-3000:]
    [row] = json.loads((run / "run.json").read_text())["summary"]["rows"]
    assert row["valid"] and 0.8 < row["speedup"] < 1.25 and row["overlap_concurrent"] == 1, row


@pytest.mark.timeout(300)
def test_kstress_resilience_grades_the_openai_sdk_right(tmp_path):
    """Issue 24 acceptance: a kernel on the openai SDK with max_retries=2 keeps
    a retries=2 contract and honours Retry-After (its attempt timeline shows the
    waits); the same kernel with max_retries=0 under that contract fails by name."""
    kst = Kst(tmp_path)
    r, run = kst.scenario("resilience", "--launch", "--target", str(EXAMPLES / "pydantic-ai-resilience.toml"), "--classes", "429,exhausted", "--load", "0")
    assert r.returncode == 0, r.stdout + r.stderr
    s = json.loads((run / "run.json").read_text())["summary"]
    assert {t["class"]: set(t["outcomes"]) for t in s["classes"]} == {"429": {"recovered"}, "exhausted": {"gave_up"}}, s["classes"]
    a = next(e for e in s["timeline"] if e["class"] == "429")["attempts"]
    assert [x["fault"] for x in a[:3]] == ["429", "429", None], a
    assert all(a[i + 1]["t_s"] - a[i]["end_s"] >= a[i]["retry_after_s"] for i in range(2)), a  # waited what Retry-After said

    r, run = kst.scenario("resilience", "--launch", "--target", str(EXAMPLES / "pydantic-ai-retries0.toml"), "--classes", "429", "--load", "0")
    assert r.returncode == 1, r.stdout + r.stderr
    s = json.loads((run / "run.json").read_text())["summary"]
    assert s["classes"][0]["broken"] == {"gave_up_early": 2}, s["classes"]
    assert "gave_up_early (an error to the client after 1 attempt(s); the contract promises 2 retries" in r.stdout
