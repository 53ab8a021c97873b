"""Bad input, table-driven: every row is something an ordinary user can type
or hand kstress (flags, target files, catalogs, state files, run dirs, mock
requests). Each must end with its documented exit code before anything
starts, a message naming the value and the rule (the words listed), no
traceback, and no run directory. Rows marked `# was:` failed on main before
issue 9 the way the comment says."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import wait_until

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]
REFKERNEL = str(Path(sys.executable).with_name("refkernel"))

# (id, argv with {w} for the prepared world, exit code, words the message must hold)
CASES = [
    # --- scenario flags -------------------------------------------------------------
    ("conns-0", ["stress", "--socket", "{sock}", "--conns", "0"], 2, ["--conns 0", "1 to 20000"]),
    ("conns-huge", ["stress", "--socket", "{sock}", "--conns", "30000"], 2, ["--conns 30000"]),
    ("conns-text", ["stress", "--socket", "{sock}", "--conns", "abc"], 2, ["'abc' is not a valid integer"]),
    ("inputs-0", ["stress", "--socket", "{sock}", "--inputs", "0"], 2, ["--inputs 0"]),
    ("over-the-run-bound", ["stress", "--socket", "{sock}", "--conns", "20000", "--inputs", "100"], 2, ["over the"]),
    ("mix-empty", ["stress", "--socket", "{sock}", "--mix", ""], 2, ["--mix ''", "empty"]),
    ("mix-unknown-marker", ["stress", "--socket", "{sock}", "--mix", "!nope:1"], 2, ["unknown marker", "!nope"]),
    ("mix-no-bang", ["stress", "--socket", "{sock}", "--mix", "batch4"], 2, ["expected a marker like !batch4"]),
    ("mix-weight-0", ["stress", "--socket", "{sock}", "--mix", "!batch4:0"], 2, ["weight 0", "1 to 1000"]),
    ("mix-weight-negative", ["stress", "--socket", "{sock}", "--mix", "!batch4:-1"], 2, ["weight -1", "1 to 1000"]),  # was: "takes no ':' arguments"
    ("mix-text-weight-nan", ["stress", "--socket", "{sock}", "--mix", "text:nan"], 2, ["weight 'nan' must be a whole number from 1 to 1000"]),  # was: "expected a marker"
    ("out-empty", ["stress", "--socket", "{sock}", "--out", ""], 2, ["--out", "'' is empty: give a path"]),  # was: the run went into the current directory
    ("launch-and-socket", ["stress", "--launch", "--socket", "{sock}"], 2, ["--socket", "--launch starts its own", "drop --socket"]),  # was: --socket ignored
    ("launch-and-token", ["stress", "--launch", "--token", "abc"], 2, ["--token abc", "--launch starts its own", "drop --token"]),  # was: --token ignored
    ("mix-empty-item", ["stress", "--socket", "{sock}", "--mix", "!batch4,,text"], 2, ["empty item"]),
    ("mix-count-out-of-range", ["stress", "--socket", "{sock}", "--mix", "!batch99"], 2, ["out of range"]),
    ("rate-0", ["stress", "--socket", "{sock}", "--rate", "0"], 2, ["--rate 0"]),
    ("duration-0", ["stress", "--socket", "{sock}", "--duration", "0"], 2, ["--duration 0"]),
    ("timeout-0", ["stress", "--socket", "{sock}", "--timeout", "0"], 2, ["--timeout 0", "0.1 to 3600"]),
    ("connect-timeout-0", ["stress", "--socket", "{sock}", "--connect-timeout", "0"], 2, ["--connect-timeout 0"]),
    ("interrupts-negative", ["stress", "--socket", "{sock}", "--interrupts", "-1"], 2, ["--interrupts -1"]),
    ("interrupts-nan", ["stress", "--socket", "{sock}", "--interrupts", "nan"], 2, ["--interrupts", "'nan' is not a finite number"]),  # was: accepted, NaN in run.json
    ("rate-inf", ["stress", "--socket", "{sock}", "--rate", "inf"], 2, ["--rate", "'inf' is not a finite number"]),
    ("weight-nan", ["stress", "--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "nan", "--weight", "1"], 2, ["--weight", "'nan' is not a finite number"]),
    ("unknown-flag", ["stress", "--socket", "{sock}", "--connz", "3"], 2, ["No such option", "--connz"]),
    ("batch-n-empty", ["batch", "--socket", "{sock}", "--n", ""], 2, ["--n is empty"]),
    ("batch-n-empty-item", ["batch", "--socket", "{sock}", "--n", "2,,4"], 2, ["empty item"]),  # was: the empty item dropped silently
    ("batch-n-99", ["batch", "--socket", "{sock}", "--n", "99"], 2, ["--n 99 is out of range"]),
    ("batch-n-text", ["batch", "--socket", "{sock}", "--n", "two"], 2, ["comma-separated integers"]),
    ("batch-kinds-comma", ["batch", "--socket", "{sock}", "--kinds", ","], 2, ["--kinds", "empty item"]),  # was: 0 turns, exit 1
    ("batch-kinds-unknown", ["batch", "--socket", "{sock}", "--kinds", "fast"], 2, ["--kinds 'fast' is unknown"]),
    ("batch-mixed-n1", ["batch", "--socket", "{sock}", "--n", "1"], 2, ["mixed batch needs N >= 2"]),
    ("batch-rounds-0", ["batch", "--socket", "{sock}", "--rounds", "0"], 2, ["--rounds 0"]),
    ("abtest-rounds-2", ["abtest", "--socket", "{sock}", "--rounds", "2"], 2, ["--rounds 2 is invalid"]),
    ("abtest-ab-tool-ms-0", ["abtest", "--socket", "{sock}", "--ab-tool-ms", "0"], 2, ["--ab-tool-ms 0"]),  # was: named --tool-ms
    ("abtest-n-0", ["abtest", "--socket", "{sock}", "--n", "0"], 2, ["--n 0 is out of range"]),
    ("cmp-n-1", ["cmp", "refkernel", "refkernel", "--n", "1"], 2, ["--n 1 is invalid"]),
    ("cmp-unclosed-quote", ["cmp", 'refkernel --fault "x', "refkernel"], 2, ["No closing quotation", "close the quote"]),  # was: a traceback, exit 4
    ("cmp-missing-binary", ["cmp", "/nonexistent/kernel", "refkernel"], 2, ["/nonexistent/kernel", "does not exist"]),
    ("cmp-alpha", ["cmp", "refkernel", "refkernel", "--alpha", "0.9"], 2, ["--alpha 0.9"]),
    ("cmp-min-effect", ["cmp", "refkernel", "refkernel", "--min-effect", "2"], 2, ["--min-effect 2"]),
    ("cmp-bombard-0", ["cmp", "refkernel", "refkernel", "--bombard-conns", "0"], 2, ["--bombard-conns 0"]),
    ("cmp-mechanism", ["cmp", "refkernel", "refkernel", "--mechanism", "chroot"], 2, ["'chroot' is not one of"]),
    ("socket-without-mock", ["stress", "--socket", "{sock}", "--inputs", "1"], 2, ["without --mock", "--mock", "KSTRESS_VERDICT_KEY"]),  # was: verdict lines the kernel wrote itself passed
    ("findmax-conns-without-rate", ["findmax", "--socket", "{sock}", "--slo", "p95<1s", "--conns", "8"], 2, ["--conns 8: without --rate", "add --rate, or drop --conns"]),  # was: ignored
    ("threshold-marker-not-in-mix", ["stress", "--socket", "{sock}", "--mix", "!batch4", "--threshold", "[!batch8]errors<1"], 2, ["--threshold '[!batch8]errors<1': marker !batch8 is not in the mix (!batch4)", "add !batch8 to --mix"]),  # was: PASS over 0 turns
    ("sessions-threshold-marker-not-in-mix", ["sessions", "--socket", "{sock}", "--mix", "!batch4,text", "--threshold", "[!img]p95<1s"], 2, ["marker !img is not in the mix (!batch4,text)"]),  # was: FAIL late, exit 99
    ("findmax-slo-marker-not-in-mix", ["findmax", "--socket", "{sock}", "--mix", "text", "--slo", "[!batch4]p95<1s"], 2, ["--slo '[!batch4]p95<1s': marker !batch4 is not in the mix (text)"]),  # was: every stage broke it
    ("hold-conns-0", ["hold", "--socket", "{sock}", "--conns", "0"], 2, ["--conns 0"]),
    ("hold-probe-over", ["hold", "--socket", "{sock}", "--conns", "5", "--probe", "9"], 2, ["--probe 9"]),
    # --- where the kernel is -----------------------------------------------------------
    ("launch-tool-ms-0", ["stress", "--launch", "--tool-ms", "0"], 2, ["--tool-ms 0", "1 to"]),  # was: "the mock LLM exited with code 2", exit 3
    ("launch-mixed-ms-negative", ["stress", "--launch", "--mixed-ms", "-1"], 2, ["--mixed-ms -1"]),  # was: exit 3
    ("launch-bin-missing", ["stress", "--launch", "--bin", "/nonexistent/kernel"], 2, ["does not exist", "--bin"]),
    ("launch-bin-directory", ["stress", "--launch", "--bin", "{w}"], 2, ["is a directory"]),
    ("launch-bin-not-executable", ["stress", "--launch", "--bin", "{w}/plain.txt"], 2, ["not executable", "chmod +x"]),
    ("launch-target-and-bin", ["stress", "--launch", "--target", "{w}/good.toml", "--bin", "x"], 2, ["exclusive"]),
    ("bin-without-launch", ["stress", "--bin", "x"], 2, ["need --launch"]),
    ("tools-without-launch-or-socket", ["stress", "--tools", "{w}/good-catalog.toml"], 2, ["--tools needs --launch"]),
    ("launch-tools-bad", ["stress", "--launch", "--tools", "{w}/bad-catalog.toml"], 2, ["bad-catalog.toml", "not a valid tool name"]),  # was: ignored, and passed
    ("socket-missing", ["stress", "--socket", "{w}/nope.sock"], 2, ["nope.sock", "no such file"]),  # was: exit 1, conn_error:refused
    ("socket-regular-file", ["stress", "--socket", "{w}/plain.txt"], 2, ["a regular file, not a unix socket"]),  # was: exit 1
    ("socket-directory", ["stress", "--socket", "{w}"], 2, ["a directory, not a unix socket"]),  # was: exit 1
    ("socket-too-long", ["stress", "--socket", "/tmp/" + "x" * 120 + ".sock"], 2, ["over the 107-byte limit"]),  # was: exit 1
    ("socket-dead", ["stress", "--socket", "{w}/dead.sock", "--mock", "http://127.0.0.1:9"], 2, ["nobody is listening"]),
    ("socket-bad-catalog", ["stress", "--socket", "{sock}", "--tools", "{w}/bad-catalog.toml"], 2, ["bad-catalog.toml", "--tools"]),  # was: exit 4, empty run dir
    ("socket-wants-token", ["stress", "--socket", "{sock}", "--mock", "http://127.0.0.1:9"], 2, ["wants a token", "--token"]),  # was: resets and auth_required, no hint
    ("socket-wrong-token", ["stress", "--socket", "{sock}", "--token", "wrong", "--mock", "http://127.0.0.1:9"], 2, ["refused the token"]),
    ("out-unwritable", ["stress", "--socket", "{sock}", "--token", "secret", "--mock", "http://127.0.0.1:9", "--out", "/proc/x"], 2, ["--out /proc/x", "cannot create"]),  # was: traceback
    ("state-is-a-list", ["stress", "--state", "{w}/list.json"], 2, ["a JSON list"]),  # was: traceback + half-written run dir
    ("state-no-socket", ["stress", "--state", "{w}/nosocket.json"], 2, ["no 'socket'"]),  # was: traceback
    ("state-missing", ["stress", "--state", "{w}/nope.json"], 2, ["cannot read it"]),
    ("state-not-json", ["stress", "--state", "{w}/plain.txt"], 2, ["not valid JSON"]),
    ("protocol-unimportable", ["stress", "--socket", "{sock}", "--protocol", "nosuchmod:P"], 2, ["cannot import 'nosuchmod'"]),
    ("protocol-no-colon", ["stress", "--socket", "{sock}", "--protocol", "nosuchmod"], 2, ["--protocol 'nosuchmod' is unknown", "module:Class"]),  # was: 'expected module:Class' (names came with issue 23)
    # --- target files ----------------------------------------------------------------
    ("target-malformed", ["stress", "--launch", "--target", "{w}/malformed.toml"], 2, ["malformed TOML"]),
    ("target-unknown-placeholder", ["stress", "--launch", "--target", "{w}/placeholder.toml"], 2, ["unknown placeholder {sockett}"]),
    ("target-lone-brace", ["stress", "--launch", "--target", "{w}/brace.toml"], 2, ["a lone brace"]),  # was: passed through
    ("target-argv-no-program", ["stress", "--launch", "--target", "{w}/argvstring.toml"], 2, ["argv starts with 'a', which is not an executable", "start argv with {bin}"]),  # was: exit 4 at spawn
    ("target-bin-name-missing", ["stress", "--launch", "--target", "{w}/nobin.toml"], 2, ["'nokernel' does not exist (neither beside the target file, as", "/nokernel, nor on PATH)", "set bin in"]),  # was: "does not exist", looked up on PATH alone
    ("target-signal", ["stress", "--launch", "--target", "{w}/signal.toml"], 2, ["not a signal name"]),
    ("target-unknown-key", ["stress", "--launch", "--target", "{w}/unknownkey.toml"], 2, ["unknown keys"]),
    ("target-no-table", ["stress", "--launch", "--target", "{w}/notable.toml"], 2, ["needs a [target] table"]),
    ("target-bad-tools", ["stress", "--launch", "--target", "{w}/badtools.toml"], 2, ["tools", "not a valid tool name"]),  # was: exit 3
    ("target-env-not-string", ["stress", "--launch", "--target", "{w}/envint.toml"], 2, ["env must be a table of strings"]),
    ("target-start-timeout", ["stress", "--launch", "--target", "{w}/timeout.toml"], 2, ["start_timeout_s=0.0"]),
    ("target-missing-file", ["stress", "--launch", "--target", "{w}/nope.toml"], 2, ["cannot read it"]),
    # --- catalogs --------------------------------------------------------------------
    ("catalog-unknown-role", ["stress", "--socket", "{sock}", "--token", "secret", "--tools", "{w}/role-catalog.json"], 2, ["unknown role 'telepathy'"]),
    ("catalog-malformed", ["stress", "--socket", "{sock}", "--token", "secret", "--tools", "{w}/malformed.toml"], 2, ["not valid TOML"]),
    # --- run dirs: kstress report --------------------------------------------------------
    ("report-no-run-json", ["report", "{w}"], 2, ["run.json", "cannot read it"]),
    ("report-run-json-list", ["report", "{w}/run-list"], 2, ["a JSON list, not the object"]),  # was: traceback
    ("report-unknown-schema", ["report", "{w}/run-schema"], 2, ["schema 'kstress.run/99'"]),
    ("report-garbage-line", ["report", "{w}/run-garbage"], 2, ["turns.jsonl line 2", "not valid JSON"]),  # was: skipped silently
    ("report-wrong-type", ["report", "{w}/run-wrongtype"], 2, ["turns.jsonl line 1", "'passed' is 'yes'"]),  # was: traceback
    ("report-nan-latency", ["report", "{w}/run-nan"], 2, ["turns.jsonl line 2", "'latency_s' is nan, not a finite number"]),  # was: traceback, exit 4
    ("report-unknown-scenario", ["report", "{w}/run-scenario"], 2, ["scenario 'nope' is unknown"]),
    # --- state files: stop, status, kcli --------------------------------------------------
    ("stop-state-empty-object", ["stop", "--state", "{w}/empty.json"], 2, ["no 'run_dir'"]),  # was: traceback
    ("stop-state-list", ["stop", "--state", "{w}/list.json"], 2, ["a JSON list"]),
    ("status-state-missing", ["status", "--state", "{w}/nope.json"], 2, ["cannot read it"]),
    ("launch-timeout-0", ["launch", "--timeout", "0"], 2, ["--timeout 0", "more than 0"]),  # was: exit 3
    ("kcli-socket-missing", ["kcli", "send", "--socket", "{w}/nope.sock", "!batch4"], 2, ["nope.sock"]),
    ("kcli-bad-marker", ["kcli", "send", "--socket", "{sock}", "--token", "secret", "!nope"], 2, ["unknown marker"]),
    ("kcli-connect-timeout-0", ["kcli", "send", "--socket", "{sock}", "--connect-timeout", "0", "!batch4"], 2, ["--connect-timeout 0"]),
]


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """The files the rows point at, and a reference kernel that wants the token `secret`."""
    w = tmp_path_factory.mktemp("bad")
    _write(w / "plain.txt", "not json\n")
    _write(w / "list.json", "[1, 2]")
    _write(w / "empty.json", "{}")
    _write(w / "nosocket.json", json.dumps({"status": "ready", "run_dir": str(w)}))
    _write(w / "malformed.toml", "[target\nbin = 1\n")
    _write(w / "placeholder.toml", '[target]\nbin = "/bin/true"\nargv = ["{bin}", "{sockett}"]\n')
    _write(w / "brace.toml", '[target]\nbin = "/bin/true"\nargv = ["{bin}", "--json={"]\n')
    _write(w / "argvstring.toml", '[target]\nbin = "/bin/true"\nargv = "a string"\n')
    _write(w / "nobin.toml", '[target]\nbin = "nokernel"\n')
    _write(w / "signal.toml", '[target]\nbin = "/bin/true"\nstop_signal = "SIGNOPE"\n')
    _write(w / "unknownkey.toml", '[target]\nbin = "/bin/true"\nfoo = 1\n')
    _write(w / "notable.toml", 'bin = "/bin/true"\n')
    _write(w / "bad-catalog.toml", "[roles.fast]\nname = 5\n")
    _write(w / "good-catalog.toml", '[roles.fast]\nname = "lookup"\n')
    _write(w / "role-catalog.json", json.dumps({"roles": {"telepathy": {"name": "x"}}}))
    _write(w / "badtools.toml", '[target]\nbin = "/bin/true"\ntools = "bad-catalog.toml"\n')
    _write(w / "envint.toml", '[target]\nbin = "/bin/true"\nenv = { A = 1 }\n')
    _write(w / "timeout.toml", '[target]\nbin = "/bin/true"\nstart_timeout_s = 0\n')
    _write(w / "good.toml", '[target]\nbin = "refkernel"\n')
    run = {"schema": "kstress.run/1", "scenario": "stress", "settings": {}, "summary": {}, "checks": [], "extras": {}}
    _write(w / "run-list" / "run.json", "[]")
    _write(w / "run-schema" / "run.json", json.dumps({**run, "schema": "kstress.run/99"}))
    _write(w / "run-garbage" / "run.json", json.dumps(run))
    _write(w / "run-garbage" / "turns.jsonl", '{"kind": "load", "passed": true}\n{not json\n{"kind": "load", "passed": true}\n')
    _write(w / "run-wrongtype" / "run.json", json.dumps(run))
    _write(w / "run-wrongtype" / "turns.jsonl", '{"kind": "load", "passed": "yes"}\n')
    _write(w / "run-scenario" / "run.json", json.dumps({**run, "scenario": "nope"}))
    _write(w / "run-nan" / "run.json", json.dumps(run))
    _write(w / "run-nan" / "turns.jsonl", '{"kind": "load", "passed": true, "latency_s": 0.1}\n{"kind": "load", "passed": true, "latency_s": NaN}\n')
    import socket

    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(w / "dead.sock"))
    dead.close()  # a socket file nobody listens on
    (w / "data").mkdir()
    kernel = subprocess.Popen([REFKERNEL, "--socket", str(w / "k.sock"), "--llm-url", "http://127.0.0.1:9/v1", "--data-dir", str(w / "data"), "--token", "secret"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(lambda: (w / "k.sock").exists(), 20, "the reference kernel's socket")
        yield w
    finally:
        kernel.terminate()
        kernel.wait(10)


def _run(argv: list[str], world: Path, out: Path) -> subprocess.CompletedProcess:
    argv = [a.replace("{sock}", str(world / "k.sock")).replace("{w}", str(world)) for a in argv]
    if argv[0] not in ("report", "stop", "status", "launch", "kcli") and "--out" not in argv:
        argv += ["--out", str(out)]
    env = dict(os.environ, KSTRESS_HOME=str(out.parent / "home"), TMPDIR=str(out.parent))
    return subprocess.run([sys.executable, "-m", "harness", *argv], cwd=REPO, capture_output=True, text=True, timeout=60, env=env, stdin=subprocess.DEVNULL)


def test_there_are_at_least_60_rows():
    assert len(CASES) >= 60 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize("name, argv, code, words", CASES, ids=[c[0] for c in CASES])
def test_bad_input(world, tmp_path, name, argv, code, words):
    out = tmp_path / "runs"
    done = _run(argv, world, out)
    assert done.returncode == code, (name, done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    for w in words:
        assert w in done.stderr, (name, w, done.stderr[-2000:])
    assert not out.exists() or not any(out.iterdir()), f"a run dir was left: {list(out.iterdir())}"
    assert not list(tmp_path.glob("kst-*")), "a sandbox dir was left"


# --- the mock, bad requests: a JSON 400 naming the problem, never a 500 ------------------

MOCK_CASES = [
    ("chat-not-json", "/v1/chat/completions", b"{nope", ["not valid JSON"]),
    ("chat-not-object", "/v1/chat/completions", b"[1]", ["JSON object"]),
    ("chat-no-messages", "/v1/chat/completions", b'{"model":"m"}', ["'messages'"]),
    ("chat-no-user", "/v1/chat/completions", b'{"messages":[{"role":"system","content":"x"}]}', ["no user message"]),
    ("chat-bad-marker", "/v1/chat/completions", b'{"messages":[{"role":"user","content":"!nope #n1"}]}', ["unknown marker"]),
    ("messages-not-json", "/v1/messages", b"{nope", ["not valid JSON"]),
    ("responses-not-json", "/v1/responses", b"{nope", ["not valid JSON"]),
    ("verdicts-not-json", "/_mock/verdicts", b"{nope", ["JSON"]),
]


@pytest.mark.parametrize("name, path, body, words", MOCK_CASES, ids=[c[0] for c in MOCK_CASES])
async def test_bad_mock_request(name, path, body, words):
    import aiohttp

    from mock import MockServer, MockSettings

    async with MockServer(MockSettings(port=0)) as m:
        async with aiohttp.ClientSession() as http:
            async with http.post(m.url + path, data=body, headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400, (name, r.status, await r.text())
                assert r.content_type == "application/json"
                text = await r.text()
    for w in words:
        assert w in text, (name, w, text)
