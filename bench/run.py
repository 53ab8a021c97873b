#!/usr/bin/env python3
"""`make bench`: streamed requests per second of the mock LLM against a floor,
then the driver benchmark (bench/driver.py: kstress's cost per turn), then the same for the
AG-UI, A2A and OpenAI-compatible drivers (bench/agui_client.py, bench/a2a_client.py,
bench/openai_client.py: issue 23 item 7), then the memory benchmark (bench/memory.py:
kstress's peak RSS at 50,000 and 1,000,000 turns, issue 25 item 6).

Seven measurements, interleaved round by round (floor, text, batch, ...,
floor, ...) so that drift on a shared machine hits all alike:

  floor            bench/floor.py: a bare aiohttp handler that parses the body
                   and writes the mock's 20-chunk text reply, prebuilt, in one write
  text, batch      the real mock (`python -m mock --port 0`), chat completions:
                   a streamed 20-chunk text reply, a streamed 4-call batch (!batch4)
  anthropic-text, anthropic-batch    the same on POST /v1/messages
  responses-text, responses-batch    the same on POST /v1/responses

When node is here, `make bench` also runs the anchor the issue measured —
aimock (npm @copilotkit/aimock, pinned; installed into bench/out/aimock),
fixtures for a 20-chunk text and a 4-call batch on chat completions — in the
same interleaved rounds, and prints each dialect's rate against it.

Before measuring, one request of each is checked: chat by parsing the stream,
the other two dialects by the official SDK's streaming helper (anthropic's
messages.stream().get_final_message(), openai's responses.stream()), so a
fast reply no client accepts cannot count.

Each server runs pinned to one CPU (taskset -c 1) and wrk to the other (-c 0),
32 connections, POSTing the JSON body from a Lua script that gives every
request its own nonce (as the harness does). Before measuring, one
request to each is checked for a correct reply; a wrk run with non-2xx
responses or socket errors invalidates the result. Medians and the ratio to
the floor go to the terminal and to bench/out/ (json and md). wrk is installed
with apt-get when missing.

    bench/run.py [--rounds 3] [--duration 3] [--connections 32]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from harness.sandbox.launcher import read_line  # noqa: E402
from mock.markers import build_plan, compose, parse_text_verdict  # noqa: E402

OUT = ROOT / "bench" / "out"
# issue 11: each dialect at >= 2x the best existing mock (aimock), measured side by
# side; aimock ran at 0.445 of the bare aiohttp floor there, so 2x is ~0.89 of it
TARGET_RATIO = 0.89
TARGET_VS_AIMOCK = 2.0
READY_RE = re.compile(r"(?:mock|floor) listening on (http://[\d.]+:\d+)\n")
AIMOCK = "@copilotkit/aimock@1.43.0"  # the anchor the issue measured; pinned so ratios compare across runs
AIMOCK_DIR = OUT / "aimock"
NONCE = "bench"
def _chat(marker: str | None) -> dict:
    return {"model": "bench", "stream": True, "messages": [{"role": "user", "content": compose(marker, NONCE)}]}


def _anthropic(marker: str | None) -> dict:
    return {"model": "bench", "max_tokens": 1024, "stream": True, "messages": [{"role": "user", "content": compose(marker, NONCE)}]}


def _responses(marker: str | None) -> dict:
    return {"model": "bench", "stream": True, "input": [{"role": "user", "content": compose(marker, NONCE)}]}


# name -> (path, body): the floor, then each dialect's streamed text and 4-call batch
BODIES = {
    "floor": ("/v1/chat/completions", _chat(None)),
    "text": ("/v1/chat/completions", _chat(None)),
    "batch": ("/v1/chat/completions", _chat("!batch4")),
    "anthropic-text": ("/v1/messages", _anthropic(None)),
    "anthropic-batch": ("/v1/messages", _anthropic("!batch4")),
    "responses-text": ("/v1/responses", _responses(None)),
    "responses-batch": ("/v1/responses", _responses("!batch4")),
}
MEASURED = [n for n in BODIES if n != "floor"]
# the best existing mock, on the same machine in the same run, when node is here:
# a 20-chunk text reply and a 4-call batch from fixtures, on chat completions
AIMOCK_TEXT = "aimock-text " + "This is the aimock anchor answering a benchmark request with a fixed reply of twenty pieces. " * 4
AIMOCK_BODIES = {
    "aimock-text": ("/v1/chat/completions", {"model": "bench", "stream": True, "messages": [{"role": "user", "content": f"aimock-text #{NONCE}"}]}),
    "aimock-batch": ("/v1/chat/completions", {"model": "bench", "stream": True, "messages": [{"role": "user", "content": f"aimock-batch #{NONCE}"}]}),
}
AIMOCK_FIXTURES = {"fixtures": [
    {"match": {"userMessage": "aimock-text"}, "response": {"content": AIMOCK_TEXT[len("aimock-text "):][:400]}},
    {"match": {"userMessage": "aimock-batch"}, "response": {"toolCalls": [{"name": "fs_read", "arguments": {"path": f"/tmp/{c}"}} for c in "abcd"]}},
]}


def ensure_aimock() -> list[str] | None:
    """aimock's command line, installed with npm into bench/out/aimock when
    node is here; None (and why, printed) when it cannot be."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        print("bench: aimock anchor skipped: node/npm not found", flush=True)
        return None
    cli_js = AIMOCK_DIR / "node_modules" / "@copilotkit" / "aimock" / "dist" / "cli.js"
    if not cli_js.exists():
        print(f"bench: installing the aimock anchor: npm install {AIMOCK}", flush=True)
        AIMOCK_DIR.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([npm, "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(AIMOCK_DIR), AIMOCK], capture_output=True, text=True, timeout=300)
        if done.returncode != 0 or not cli_js.exists():
            print(f"bench: aimock anchor skipped: npm install failed: {(done.stderr or done.stdout).strip()[-300:]}", flush=True)
            return None
    fixtures = AIMOCK_DIR / "bench-fixtures.json"
    fixtures.write_text(json.dumps(AIMOCK_FIXTURES))
    return [node, str(cli_js), "-p", "{port}", "-f", str(fixtures), "--log-level", "warn"]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BenchError(Exception):
    """A measurement that cannot be trusted; the message says why."""


@dataclass(frozen=True)
class Settings:
    rounds: int = 3
    duration_s: int = 3
    warmup_s: int = 1
    connections: int = 32
    server_cpu: str = "1"
    wrk_cpu: str = "0"

    def __post_init__(self) -> None:
        if self.rounds < 2:
            raise BenchError(f"--rounds {self.rounds}: use at least 2 (medians of interleaved rounds)")
        if not 1 <= self.duration_s <= 60:
            raise BenchError(f"--duration {self.duration_s}: use 1 to 60 seconds per measurement")
        if not 1 <= self.connections <= 1000:
            raise BenchError(f"--connections {self.connections}: use 1 to 1000")


@dataclass
class Sample:
    name: str
    round: int
    rps: float
    requests: int
    non_2xx: int
    socket_errors: dict[str, int] = field(default_factory=dict)


# --- wrk ---------------------------------------------------------------------------


def ensure_wrk() -> str:
    """wrk's path; installs the Debian package when it is missing."""
    path = shutil.which("wrk")
    if path:
        return path
    print("bench: wrk is missing; installing it: apt-get install -y wrk", flush=True)
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    install = [*sudo, "apt-get", "install", "-y", "-qq", "wrk"]
    if subprocess.run(install, stdout=subprocess.DEVNULL).returncode != 0:
        # a fresh machine may have no package lists yet
        subprocess.run([*sudo, "apt-get", "update", "-qq"], stdout=subprocess.DEVNULL)
        subprocess.run(install, stdout=subprocess.DEVNULL)
    path = shutil.which("wrk")
    if not path:
        raise BenchError("wrk is not installed and `apt-get install -y wrk` failed; install wrk (Debian package wrk) and run again")
    return path


def lua_script(name: str, body: dict, path_: str = "/v1/chat/completions") -> Path:
    """A wrk script POSTing ``body`` with a fresh nonce per request, as the
    harness does (identical inputs would let a server cache its replies)."""
    OUT.mkdir(parents=True, exist_ok=True)
    data = json.dumps(body, separators=(",", ":"))
    head, sep, tail = data.partition(f"#{NONCE}")
    assert sep and "]==]" not in data
    path = OUT / f"post-{name}.lua"
    path.write_text(
        'wrk.method = "POST"\n'
        f'wrk.path = "{path_}"\n'
        'wrk.headers["Content-Type"] = "application/json"\n'
        'wrk.headers["x-api-key"] = "bench"\n'
        f"local head = [==[{head}#{NONCE}]==]\n"
        f"local tail = [==[{tail}]==]\n"
        "local n = 0\n"
        "request = function()\n"
        "  n = n + 1\n"
        "  return wrk.format(nil, wrk.path, nil, head .. n .. tail)\n"
        "end\n"
    )
    return path


def run_wrk(wrk: str, url: str, lua: Path, seconds: int, settings: Settings) -> tuple[float, int, int, dict[str, int], str]:
    cmd = [
        "taskset", "-c", settings.wrk_cpu, wrk, "-t1", f"-c{settings.connections}", f"-d{seconds}s",
        "--timeout", "5s", "-s", str(lua), url,
    ]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30)
    out = done.stdout
    if done.returncode != 0:
        raise BenchError(f"wrk exited {done.returncode}: {done.stderr.strip() or out.strip()}")
    m = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    if not m or not n:
        raise BenchError(f"cannot read wrk's output:\n{out}")
    non2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = dict(zip(("connect", "read", "write", "timeout"), map(int, sock.groups()))) if sock else {}
    return float(m.group(1)), int(n.group(1)), int(non2xx.group(1)) if non2xx else 0, errors, out


# --- servers -------------------------------------------------------------------------


class Server:
    """A server subprocess pinned to one CPU; stopped SIGTERM -> SIGKILL on every path."""

    def __init__(self, name: str, argv: list[str], cpu: str, port: int | None = None) -> None:
        self.name = name
        self.argv = ["taskset", "-c", cpu, *argv]
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.port = port  # a server without a ready line (aimock, silenced): ready when the port accepts

    def __enter__(self) -> "Server":
        out = subprocess.DEVNULL if self.port is not None else subprocess.PIPE
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=out, stderr=subprocess.PIPE)
        try:
            self.url = self._ready(15.0) if self.port is None else self._accepting(15.0)
        except BaseException:
            self.close()
            raise
        return self

    def _accepting(self, timeout: float) -> str:
        import socket
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise BenchError(f"{self.name} exited {self.proc.returncode} before it listened: {self.argv}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return f"http://127.0.0.1:{self.port}"
            except OSError:
                time.sleep(0.05)  # polling a port that is not open yet, bounded by the deadline
        raise BenchError(f"{self.name} did not listen on 127.0.0.1:{self.port} within {timeout} s: {self.argv}")

    def _ready(self, timeout: float) -> str:
        assert self.proc is not None
        line = read_line(self.proc, timeout)
        if not line or not line.endswith("\n"):
            raise BenchError(f"{self.name} did not start within {timeout} s: {self.argv} said {line!r}")
        m = READY_RE.fullmatch(line)
        if not m:
            raise BenchError(f"{self.name}: unexpected ready line {line!r}")
        return m.group(1)

    def close(self) -> str:
        """Stop it; its stderr, for the report."""
        proc, self.proc = self.proc, None
        if proc is None:
            return ""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        _, err = proc.communicate()
        return err.decode(errors="replace")

    def __exit__(self, *exc: object) -> None:
        err = self.close()
        if err.strip():
            print(f"bench: {self.name} wrote to stderr:\n{err}", file=sys.stderr)


# --- correctness before speed ----------------------------------------------------------


def fetch(url: str, body: dict, path: str = "/v1/chat/completions") -> bytes:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        conn.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        data = resp.read()
        if resp.status != 200 or not resp.getheader("Content-Type", "").startswith("text/event-stream"):
            raise BenchError(f"{url}: HTTP {resp.status} {resp.getheader('Content-Type')}: {data[:200]!r}")
        return data
    finally:
        conn.close()


def sse_chunks(raw: bytes) -> list[dict]:
    text = raw.decode()
    if not text.endswith("data: [DONE]\n\n"):
        raise BenchError(f"stream does not end with [DONE]: {text[-100:]!r}")
    events = text.split("\n\n")[:-2]
    return [json.loads(e.removeprefix("data: ")) for e in events]


def _want_calls() -> list[tuple[str, dict]]:
    plan = build_plan(BODIES["batch"][1]["messages"][0]["content"])
    return [(c.name, json.loads(c.arguments)) for c in plan.calls]


def check_reply(name: str, raw: bytes) -> str:
    chunks = sse_chunks(raw)
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    if name in ("floor", "text"):
        content = [d["content"] for d in deltas if d.get("content")]
        if len(content) != 20:
            raise BenchError(f"{name}: {len(content)} content chunks, want 20")
        if name == "text" and parse_text_verdict("".join(content)) != NONCE:
            raise BenchError(f"text: no `KST nonce={NONCE} plan=text ok` line in the reply")
        return f"{len(chunks)} events, 20 content pieces"
    calls: dict[int, dict] = {}
    for d in deltas:
        for f in d.get("tool_calls", []):
            slot = calls.setdefault(f["index"], {"id": "", "name": "", "arguments": ""})
            slot["id"] += f.get("id", "")
            slot["name"] += f.get("function", {}).get("name", "")
            slot["arguments"] += f.get("function", {}).get("arguments", "")
    plan = build_plan(BODIES["batch"][1]["messages"][0]["content"])
    want = {c.index: {"id": c.id, "name": c.name, "arguments": c.arguments} for c in plan.calls}
    if calls != want:
        raise BenchError(f"batch: the streamed calls differ from the plan:\n got {calls}\nwant {want}")
    return f"{len(chunks)} events, {len(calls)} calls as planned"


def check_sdk(name: str, url: str) -> str:
    """The Anthropic and Responses dialects, read by the official SDK's
    streaming helper: what wrk measures is a reply a real client accepts."""
    dialect, kind = name.split("-")
    marker = "!batch4" if kind == "batch" else None
    prompt = compose(marker, NONCE)
    if dialect == "anthropic":
        import anthropic

        client = anthropic.Anthropic(base_url=url, api_key="bench", max_retries=0)
        with client.messages.stream(model="bench", max_tokens=1024, messages=[{"role": "user", "content": prompt}]) as stream:
            msg = stream.get_final_message()
        text = "".join(b.text for b in msg.content if b.type == "text")
        calls = [(b.name, b.input) for b in msg.content if b.type == "tool_use"]
    else:
        import openai

        oclient = openai.OpenAI(base_url=url + "/v1", api_key="bench", max_retries=0)
        with oclient.responses.stream(model="bench", input=[{"role": "user", "content": prompt}]) as rstream:
            resp = rstream.get_final_response()
        text = resp.output_text or ""
        calls = [(i.name, json.loads(i.arguments)) for i in resp.output if i.type == "function_call"]
    if kind == "text":
        if parse_text_verdict(text) != NONCE:
            raise BenchError(f"{name}: no `KST nonce={NONCE} plan=text ok` line in the reply the SDK read: {text[:200]!r}")
        return "the SDK read the text and its verdict line"
    if calls != _want_calls():
        raise BenchError(f"{name}: the SDK read other calls than the plan's:\n got {calls}\nwant {_want_calls()}")
    return f"the SDK read {len(calls)} calls as planned"


def check_aimock(name: str, raw: bytes) -> str:
    chunks = sse_chunks(raw)
    deltas = [c["choices"][0]["delta"] for c in chunks if c.get("choices")]
    if name == "aimock-text":
        pieces = [d["content"] for d in deltas if d.get("content")]
        if not 18 <= len(pieces) <= 22:
            raise BenchError(f"aimock-text: {len(pieces)} content chunks, want about 20 (the fixture and --chunk-size 20)")
        return f"{len(chunks)} events, {len(pieces)} content pieces"
    ids = {f.get("id") for d in deltas for f in d.get("tool_calls", []) if f.get("id")}
    if len(ids) != 4:
        raise BenchError(f"aimock-batch: {len(ids)} tool calls, want 4")
    return f"{len(chunks)} events, 4 calls"


def check(name: str, url: str) -> str:
    if name.startswith("aimock-"):
        path, body = AIMOCK_BODIES[name]
        return check_aimock(name, fetch(url, body, path))
    if name in ("floor", "text", "batch"):
        path, body = BODIES[name]
        return check_reply(name, fetch(url, body, path))
    return check_sdk(name, url)


# --- the run ----------------------------------------------------------------------------


def run(settings: Settings) -> dict:
    wrk = ensure_wrk()
    cpus = os.cpu_count() or 1
    if cpus < 2:
        raise BenchError(f"this machine has {cpus} CPU; the bench pins wrk and the server to two different CPUs")
    aimock_argv = ensure_aimock()
    bodies = {**BODIES, **(AIMOCK_BODIES if aimock_argv else {})}
    luas = {name: lua_script(name, body, path) for name, (path, body) in bodies.items()}
    py = sys.executable
    samples: list[Sample] = []
    with contextlib.ExitStack() as stack:
        floor = stack.enter_context(Server("floor", [py, str(ROOT / "bench" / "floor.py"), "--port", "0"], settings.server_cpu))
        mock = stack.enter_context(Server("mock", [py, "-m", "mock", "--port", "0"], settings.server_cpu))
        port = free_port()
        aimock = stack.enter_context(Server("aimock", [a.replace("{port}", str(port)) for a in aimock_argv], settings.server_cpu, port=port)) if aimock_argv else None
        urls = {name: (floor.url if name == "floor" else aimock.url if name.startswith("aimock-") and aimock else mock.url) for name in bodies}
        for name, url in urls.items():
            print(f"bench: check {name:15s} {url}: {check(name, url)}", flush=True)
        for name, url in urls.items():  # warm-up, discarded
            run_wrk(wrk, url, luas[name], settings.warmup_s, settings)
        for rnd in range(settings.rounds):
            for name, url in urls.items():
                rps, n, non2xx, errors, out = run_wrk(wrk, url, luas[name], settings.duration_s, settings)
                s = Sample(name, rnd, rps, n, non2xx, errors)
                samples.append(s)
                print(f"bench: round {rnd + 1}/{settings.rounds} {name:15s} {rps:9.0f} req/s", flush=True)
                if non2xx or any(errors.values()):
                    raise BenchError(f"{name} round {rnd + 1}: wrk saw {non2xx} non-2xx responses and socket errors {errors}:\n{out}")
        # the mock still answers correctly after the load
        for name in ("batch", "anthropic-batch", "responses-batch"):
            check(name, mock.url)
    names = [n for n in bodies]
    medians = {name: statistics.median(s.rps for s in samples if s.name == name) for name in names}
    measured = [n for n in names if n != "floor"]
    vs_aimock = {}
    if aimock_argv:
        for name in MEASURED:
            anchor = "aimock-text" if name.endswith("text") else "aimock-batch"
            vs_aimock[name] = statistics.median(a / b for a, b in zip(
                [s.rps for s in samples if s.name == name], [s.rps for s in samples if s.name == anchor]))
    return {
        "version": 1,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": os.uname().nodename,
        "python": sys.version.split()[0],
        "settings": asdict(settings),
        "samples": [asdict(s) for s in samples],
        "median_rps": medians,
        "ratio_to_floor": {name: medians[name] / medians["floor"] for name in measured},
        # each round's ratio to the floor measured just before it, then the median:
        # steadier than the ratio of medians when the machine's load drifts
        "paired_ratio": {name: statistics.median(paired(samples, name)) for name in measured},
        # each round's kstress rate / that round's aimock rate (same reply shape), then the median
        "vs_aimock": vs_aimock,
        "target_ratio": TARGET_RATIO,
        "target_vs_aimock": TARGET_VS_AIMOCK,
    }


def paired(samples: list[Sample], name: str) -> list[float]:
    floor = {s.round: s.rps for s in samples if s.name == "floor"}
    return [s.rps / floor[s.round] for s in samples if s.name == name]


def table(result: dict) -> str:
    med, ratio = result["median_rps"], result["ratio_to_floor"]
    paired_ratio = result["paired_ratio"]
    rows = [
        "| measurement | median req/s | samples | ratio to floor | paired ratio |",
        "|---|---:|---|---:|---:|",
    ]
    label = {"floor": "floor (bare aiohttp, prebuilt chat reply)", "text": "mock chat: 20-chunk text stream", "batch": "mock chat: !batch4 tool stream",
             "anthropic-text": "mock anthropic: 20-chunk text stream", "anthropic-batch": "mock anthropic: !batch4 tool stream",
             "responses-text": "mock responses: 20-chunk text stream", "responses-batch": "mock responses: !batch4 tool stream",
             "aimock-text": f"anchor {AIMOCK}: 20-chunk text (chat)", "aimock-batch": f"anchor {AIMOCK}: 4-call batch (chat)"}
    for name in result["median_rps"]:
        samples = ", ".join(f"{s['rps']:.0f}" for s in result["samples"] if s["name"] == name)
        r = "1.00" if name == "floor" else f"{ratio[name]:.2f}"
        p = "1.00" if name == "floor" else f"{paired_ratio[name]:.2f}"
        rows.append(f"| {label[name]} | {med[name]:.0f} | {samples} | {r} | {p} |")
    s = result["settings"]
    rows.append("")
    rows.append(
        f"wrk -t1 -c{s['connections']} -d{s['duration_s']}s pinned to CPU {s['wrk_cpu']}, servers to CPU "
        f"{s['server_cpu']}; {s['rounds']} interleaved rounds; target ratio >= {result['target_ratio']}. "
        "Paired ratio: the median over rounds of each round's rate / that round's floor."
    )
    va = result.get("vs_aimock") or {}
    if va:
        rows += ["", f"| kstress mock | × aimock (same reply shape, paired per round; target >= {result.get('target_vs_aimock', TARGET_VS_AIMOCK)}x) |", "|---|---:|"]
        rows += [f"| {label[n]} | {v:.2f}x |" for n, v in va.items()]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Mock LLM requests/s against a bare aiohttp floor (wrk).")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    ap.add_argument("--duration", type=int, default=3, help="seconds per measurement (default 3)")
    ap.add_argument("--connections", type=int, default=32, help="wrk connections (default 32)")
    args = ap.parse_args(argv)
    try:
        result = run(Settings(rounds=args.rounds, duration_s=args.duration, connections=args.connections))
    except BenchError as exc:
        print(f"bench: FAILED: {exc}", file=sys.stderr)
        return 1
    OUT.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    (OUT / f"bench-{stamp}.json").write_text(json.dumps(result, indent=2) + "\n")
    text = table(result)
    (OUT / f"bench-{stamp}.md").write_text(text + "\n")
    print()
    print(text)
    short = [n for n, r in result["paired_ratio"].items() if r < TARGET_RATIO and not n.startswith("aimock-")]
    print(f"\nbench: results in {OUT}/bench-{stamp}.json")
    if short:
        print(f"bench: below the target ratio {TARGET_RATIO}: {', '.join(short)}")
    slow = [n for n, r in result["vs_aimock"].items() if r < TARGET_VS_AIMOCK]
    if slow:
        print(f"bench: below {TARGET_VS_AIMOCK}x aimock: {', '.join(slow)}")
    elif result["vs_aimock"]:
        print(f"bench: every dialect at >= {TARGET_VS_AIMOCK}x aimock (lowest {min(result['vs_aimock'].values()):.2f}x)")
    # the harness's own cost per turn, against a bare asyncio client (bench/driver.py)
    print("\nbench: the driver (kstress's cost per turn)", flush=True)
    from driver import main as driver_main

    rc = driver_main([])
    # the agent-protocol drivers' cost per turn against a bare aiohttp client
    # through an instant server of that protocol (issue 23 item 7; target >= 0.5)
    for name, script in (("AG-UI", "agui_client.py"), ("A2A", "a2a_client.py"), ("OpenAI-compatible", "openai_client.py")):
        print(f"\nbench: the {name} driver (kstress's cost per turn over {name})", flush=True)
        rc = rc or subprocess.run([sys.executable, str(ROOT / "bench" / script)], cwd=ROOT).returncode
    # memory flat in turns (issue 25 item 6): peak RSS at 1,000,000 turns within 1.3x of 50,000
    print("\nbench: memory (kstress's peak RSS at 50,000 and 1,000,000 turns)", flush=True)
    from memory import main as memory_main

    return memory_main([]) or rc


if __name__ == "__main__":
    sys.exit(main())
