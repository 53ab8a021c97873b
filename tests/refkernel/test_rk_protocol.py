"""Protocol v1 on the real socket: auth, frames, bad input, the socket file."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import sys
import tempfile
from pathlib import Path

import pytest

from mock import markers
from rkclient import KernelConn, text_for
from rkhelpers import run_kernel_cli

MIB = 1 << 20
STATS_KEYS = {
    "executed", "rejected", "queued", "running", "peak_queued", "suspended", "resumed",
    "preempted", "duplicates", "children", "llm_state",
}


async def test_auth_ack_then_stats(rk):
    k = await rk()
    conn = await k.connect()  # asserts the exact ack frame
    s = await conn.stats()
    assert STATS_KEYS <= s.keys()
    assert all(isinstance(s[key], int) for key in STATS_KEYS - {"llm_state"})
    assert s["llm_state"] == "ok"
    assert s["pid"] == k.pid and s["connections"] >= 1


@pytest.mark.parametrize(
    "first, code",
    [
        ({"type": "auth", "token": "wrong"}, "auth_failed"),
        ({"type": "auth"}, "auth_failed"),
        ({"type": "input", "id": 1, "text": "hello #x"}, "auth_required"),
        ({"type": "stats"}, "auth_required"),
        (b"this is not json\n", "bad_json"),
        (b"[1,2,3]\n", "bad_frame"),
    ],
)
async def test_bad_first_frame_gets_error_and_close(rk, first, code):
    k = await rk()
    conn = await k.connect(auth=False)
    if isinstance(first, bytes):
        await conn.send_raw(first)
    else:
        await conn.send(first)
    err = await conn.take(lambda f: True, 10, "an error frame")
    assert err["type"] == "error" and err["code"] == code, err
    assert err["message"]
    await conn.closed()
    # and the kernel goes on serving others
    good = await k.connect()
    assert (await good.turn(text_for(None)[0])).kind == "response"


async def test_silent_client_is_closed_after_auth_timeout(rk):
    k = await rk("--auth-timeout", "0.5")
    conn = await k.connect(auth=False)
    err = await conn.take(lambda f: True, 10, "the auth_timeout error")
    assert err["code"] == "auth_timeout", err
    await conn.closed()
    assert (await k.stats())["auth_timeouts"] == 1


async def test_bad_frames_after_auth_keep_the_connection(rk):
    k = await rk()
    conn = await k.connect()
    await conn.send_raw(b"{not json\n")
    assert (await conn.take(lambda f: True, 10, "bad_json"))["code"] == "bad_json"
    await conn.send_raw(b"\xff\xfe\n")
    assert (await conn.take(lambda f: True, 10, "bad_json (not utf-8)"))["code"] == "bad_json"
    await conn.send({"type": "launch-missiles", "id": 7})
    err = await conn.take(lambda f: True, 10, "unknown_type")
    assert (err["code"], err.get("id")) == ("unknown_type", 7)
    assert "launch-missiles" in err["message"]
    await conn.send({"type": "input", "id": 8})
    err = await conn.take(lambda f: True, 10, "bad_frame (no text)")
    assert (err["code"], err.get("id")) == ("bad_frame", 8)
    await conn.send({"type": "input", "text": "no id #q"})
    assert (await conn.take(lambda f: True, 10, "bad_frame (no id)"))["code"] == "bad_frame"
    await conn.send({"type": "input", "id": 9, "text": "x #q", "priority": "urgent"})
    err = await conn.take(lambda f: True, 10, "bad_frame (priority)")
    assert (err["code"], err.get("id")) == ("bad_frame", 9)
    await conn.send({"type": "auth", "token": "tok"})
    assert (await conn.take(lambda f: True, 10, "bad_frame (auth twice)"))["code"] == "bad_frame"
    # still served
    turn = await conn.turn(text_for("!batch2")[0])
    assert turn.verdict is not None and turn.verdict.all_ok
    assert (await conn.stats())["bad_frames"] == 7


async def test_lone_surrogates_in_client_strings_are_echoed_safely(rk):
    k = await rk()
    conn = await k.connect()
    await conn.send_raw(b'{"type":"input","id":"x\\ud800","text":"hi \\udfff #s1"}\n')
    turn = await conn.collect("x\ud800", 10)
    assert turn.kind == "response", turn.frames
    assert markers.parse_text_verdict(turn.text) == "s1"


async def test_frame_size_limit(rk):
    k = await rk()
    conn = await k.connect()
    # exactly 1 MiB (newline excluded) is allowed ...
    body = b'{"type":"stats"' + b" " * (MIB - len(b'{"type":"stats"}')) + b"}"
    assert len(body) == MIB
    await conn.send_raw(body + b"\n")
    assert (await conn.take(lambda f: True, 10, "stats for a 1 MiB frame"))["type"] == "stats"
    # ... one byte more is not: error, then close
    await conn.send_raw(b'{"type":"stats"' + b" " * (MIB - len(b'{"type":"stats"}') + 1) + b"}\n")
    err = await conn.take(lambda f: True, 10, "too_large")
    assert err["code"] == "too_large", err
    await conn.closed()
    assert (await k.connect()).eof is False


async def test_socket_file_is_0600_and_its_directory_is_not_widened(rk):
    k = await rk()
    st = os.stat(k.socket)
    assert stat.S_ISSOCK(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o600
    assert stat.S_IMODE(os.stat(k.socket.parent).st_mode) == 0o700  # mkdtemp's, untouched


async def test_live_socket_is_refused_and_left_alone(rk, tmp_path):
    k = await rk()
    rc, out = await run_kernel_cli(["--socket", str(k.socket), "--llm-url", k.mock.url + "/v1", "--data-dir", str(tmp_path / "d2")])
    assert rc == 2, out
    assert "in use by a live kernel" in out and str(k.socket) in out
    conn = await k.connect()
    assert (await conn.turn(text_for(None)[0])).kind == "response"


async def test_stale_socket_is_replaced(rk, tmp_path):
    k0 = await rk()  # only for its mock
    sock_dir = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    try:
        path = sock_dir / "k.sock"
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(path))  # a socket file nobody listens on: a dead kernel's
        s.close()
        assert path.exists()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "refkernel", "--socket", str(path), "--llm-url", k0.mock.url + "/v1",
            "--data-dir", str(tmp_path / "d"), "--token", "tok",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line.startswith(b"refkernel listening on"), line
            async with await KernelConn.open(path) as conn:
                assert (await conn.turn(text_for(None)[0])).kind == "response"
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
        assert proc.returncode == 0
        assert not path.exists()  # and removed at exit
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


async def test_not_a_socket_is_refused(tmp_path):
    path = tmp_path / "f.sock"
    path.write_text("precious")
    rc, out = await run_kernel_cli(["--socket", str(path), "--llm-url", "http://127.0.0.1:9/v1", "--data-dir", str(tmp_path / "d")])
    assert rc == 2 and "is not a socket" in out, out
    assert path.read_text() == "precious"


async def test_missing_socket_directory_is_created_private(rk, tmp_path):
    k0 = await rk()
    sock_dir = Path(tempfile.mkdtemp(prefix="rk-", dir="/tmp"))
    try:
        os.chmod(sock_dir, 0o755)
        path = sock_dir / "new" / "k.sock"
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "refkernel", "--socket", str(path), "--llm-url", k0.mock.url + "/v1",
            "--data-dir", str(tmp_path / "d"), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        try:
            line = await asyncio.wait_for(proc.stdout.readline(), 20)
            assert line.startswith(b"refkernel listening on"), line
            assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(sock_dir).st_mode) == 0o755  # the existing one: not touched
        finally:
            proc.terminate()
            await asyncio.wait_for(proc.wait(), 15)
    finally:
        shutil.rmtree(sock_dir, ignore_errors=True)


@pytest.mark.parametrize(
    "flags, named",
    [
        (["--workers", "0"], "workers=0"),
        (["--queue", "-1"], "queue=-1"),
        (["--fault", "bogus"], "fault='bogus'"),
        (["--llm-timeout", "0"], "llm_timeout=0"),
        (["--llm-url", "ftp://x"], "llm_url='ftp://x'"),
        (["--socket", "/tmp/" + "s" * 120], "at most 107 bytes"),
    ],
)
async def test_bad_flags_exit_2_naming_the_value(tmp_path, flags, named):
    base = ["--socket", str(tmp_path / "k.sock"), "--llm-url", "http://127.0.0.1:9/v1", "--data-dir", str(tmp_path / "d")]
    rc, out = await run_kernel_cli(base + flags)  # a repeated flag: the last one wins
    assert rc == 2, out
    assert named in out, out
    assert not (tmp_path / "k.sock").exists()


def test_unit_frames_are_one_json_object_per_line():
    # the encoder the kernel uses must never put a raw newline inside a frame
    from refkernel.kernel import _encode

    line = _encode({"type": "delta", "id": 1, "text": "a\nb\u2028c"})
    assert "\n" not in line and json.loads(line)["text"] == "a\nb\u2028c"
