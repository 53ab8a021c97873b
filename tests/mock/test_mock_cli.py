"""`python -m mock`, its aliases `kstress mock` and `scripts/mockllm.py`, as a user runs them: real
subprocesses, the ready line, signals, exit codes, messages."""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest
from waiting import wait_until

from harness.sandbox.launcher import read_line

REPO = Path(__file__).resolve().parents[2]
READY_RE = re.compile(r"mock listening on http://127\.0\.0\.1:(\d+)\n")
HARNESS = [sys.executable, "-m", "harness", "mock"]
MOCK = [sys.executable, "-m", "mock"]
SCRIPT = [sys.executable, str(REPO / "scripts" / "mockllm.py")]


class MockProcess:
    """A mock subprocess; killed in escalating steps on every exit path."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.ready_line = ""
        self.port = 0
        self.stderr = b""

    def wait_ready(self, timeout: float = 15.0) -> int:
        """Read the ready line within ``timeout``; show stderr on failure."""
        line = read_line(self.proc, timeout)
        if not line or not line.endswith("\n"):
            self.stop()
            raise AssertionError(
                f"{self.argv}: no ready line within {timeout} s (rc={self.proc.returncode}); "
                f"stdout={line!r} stderr={self.stderr.decode()[-2000:]!r}"
            )
        self.ready_line = line
        m = READY_RE.fullmatch(self.ready_line)
        assert m, f"ready line is {self.ready_line!r}, want 'mock listening on http://127.0.0.1:PORT'"
        self.port = int(m.group(1))
        return self.port

    def signal(self, sig: int, timeout: float = 5.0) -> int:
        """Send ``sig``; the exit code, which must come within ``timeout``."""
        self.proc.send_signal(sig)
        try:
            _, self.stderr = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.stop()
            raise AssertionError(f"{self.argv} did not exit within {timeout} s of signal {sig}") from None
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        _, err = self.proc.communicate()
        self.stderr += err or b""


@contextlib.contextmanager
def mock_process(argv: list[str]) -> Iterator[MockProcess]:
    p = MockProcess(argv)
    try:
        yield p
    finally:
        p.stop()


def _get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def _chat(port: int, text: str) -> bytes:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": text}]})
        conn.request("POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        assert resp.status == 200
        return resp.read()
    finally:
        conn.close()


@pytest.mark.parametrize("argv", [MOCK, HARNESS, SCRIPT], ids=["python-m-mock", "python-m-harness", "scripts-mockllm"])
def test_serves_and_exits_0_on_sigterm(argv: list[str]) -> None:
    with mock_process([*argv, "--port", "0"]) as p:
        port = p.wait_ready()
        assert _get(port, "/health")[0] == 200
        assert b'"id":"call_cli_3"' in _chat(port, "!batch4 #cli")
        t0 = time.monotonic()
        assert p.signal(signal.SIGTERM) == 0
        assert time.monotonic() - t0 < 5
        assert p.stderr == b"", p.stderr.decode()


def test_sigint_also_exits_0() -> None:
    with mock_process([*HARNESS, "--port", "0"]) as p:
        p.wait_ready()
        assert p.signal(signal.SIGINT) == 0


def test_help_lists_every_flag() -> None:
    out = subprocess.run([*HARNESS, "--help"], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0
    for flag in ("--host", "--port", "--ttft-ms", "--chunk-delay-ms", "--text-chunks", "--tool-ms", "--tools", "--script", "--log"):
        assert flag in out.stdout


def _run_bad(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([*HARNESS, "--port", "0", *args], cwd=REPO, capture_output=True, text=True, timeout=30)


def test_bad_files_and_flags_exit_2_with_a_message(tmp_path: Path) -> None:
    bad_toml = tmp_path / "tools.toml"
    bad_toml.write_text("[roles.fast\nname = 1\n")
    unknown_role = tmp_path / "roles.json"
    unknown_role.write_text(json.dumps({"roles": {"telepathy": {"name": "x"}}}))
    bad_script = tmp_path / "script.jsonl"
    bad_script.write_text('{"text": "ok"}\n{"tool_calls": []}\n')
    cases = [
        (["--tools", str(tmp_path / "missing.toml")], [str(tmp_path / "missing.toml"), "cannot read it"]),
        (["--tools", str(bad_toml)], [str(bad_toml), "not valid TOML"]),
        (["--tools", str(unknown_role)], [str(unknown_role), "unknown role 'telepathy'"]),
        (["--script", str(bad_script)], [str(bad_script), "line 2", "tool_calls must be a non-empty list"]),
        (["--text-chunks", "0"], ["text_chunks=0 is invalid"]),
        (["--ttft-ms", "-5"], ["ttft_ms=-5 is invalid"]),
    ]
    for args, words in cases:
        done = _run_bad(args)
        assert done.returncode == 2, (args, done.returncode, done.stderr)
        assert done.stdout == ""
        assert done.stderr.startswith("kstress: "), done.stderr
        for w in words:
            assert w in done.stderr, (args, w, done.stderr)
        assert "Traceback" not in done.stderr


def test_port_in_use_exits_2() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([*HARNESS, "--port", str(port)], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


def test_client_disconnects_leave_no_traceback_and_the_log_is_complete(tmp_path: Path) -> None:
    log = tmp_path / "mock.jsonl"
    with mock_process([*HARNESS, "--port", "0", "--chunk-delay-ms", "50", "--log", str(log)]) as p:
        port = p.wait_ready()
        body = json.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "!batch8 #cut"}]}).encode()
        for k in range(3):
            with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
                sock.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                    + f"Content-Length: {len(body)}\r\n\r\n".encode()
                    + body
                )
                got = b""
                deadline = time.monotonic() + 5
                while b"call_cut_0" not in got:
                    assert time.monotonic() < deadline, got
                    got += sock.recv(65536)
        wait_until(
            lambda: (s := json.loads(_get(port, "/_mock/stats")[1])).get("disconnects", 0) == 3 and s["inflight"] == 0,
            5,
            "the mock to count 3 client disconnects and have nothing in flight",
        )
        assert p.signal(signal.SIGTERM) == 0
    err = p.stderr.decode()
    assert "Traceback" not in err and "Error handling request" not in err, err
    assert err == ""
    recs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(recs) == 3 and all(r["nonce"] == "cut" for r in recs)


def test_the_grammar_modules_do_not_load_the_server() -> None:
    """The harness may import mock.markers, mock.catalog and mock.errors; none
    of them (nor `import mock`) may pull in aiohttp or the server."""
    code = (
        "import sys, mock, mock.markers, mock.catalog, mock.errors\n"
        "bad = sorted(m for m in sys.modules if m == 'aiohttp' or m.startswith('aiohttp.') or m in ('mock.server', 'mock.wire'))\n"
        "print(','.join(bad))\n"
        "from mock import MockServer\n"
        "print('aiohttp' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["", "True"], out.stdout


def test_store_times_are_on_the_callers_monotonic_clock() -> None:
    """CLOCK_MONOTONIC is one clock for every process of the host: the times a
    mock in another process records fall between the caller's own readings."""
    with mock_process([*MOCK, "--port", "0"]) as p:
        port = p.wait_ready()
        t0 = time.monotonic()
        _chat(port, "!batch1 #clock")
        t1 = time.monotonic()
        status, body = _get(port, "/_mock/verdicts?nonce=clock")
        assert status == 200
        (rec,) = json.loads(body)["verdicts"]["clock"]["records"]
        assert t0 <= rec["arrival"] <= rec["first_byte"] <= rec["last_byte"] <= t1, (t0, rec, t1)
        assert p.signal(signal.SIGTERM) == 0
