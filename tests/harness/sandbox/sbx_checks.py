"""Acceptance checks of one sandbox, shared by the root tests (awaited in-process)
and the unprivileged ones (this file run as a script by an unprivileged user):

    python sbx_checks.py CHECK --mechanism M --workdir DIR --lock-dir DIR

prints one JSON line (the check's result) and exits 0, or prints the
traceback and exits 1. Each check raises AssertionError with the evidence."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import socket
import sys
import time
import traceback
from pathlib import Path

from harness.sandbox.connector import READY
from harness.sandbox.namespace import Sandbox, SandboxError, ns_inode
from harness.wire.transport import Address, ConnError, Dialer
from sbx_helpers import alive, await_until, leftovers

PY = sys.executable

# Runs inside: the interfaces this network namespace has, and whether lo is up
# (SIOCGIFFLAGS). /sys/class/net would show the host's: sysfs shows the netns
# of whoever mounted it (docs/sandbox.md).
LINKS_PROG = r"""
import fcntl, json, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
flags = struct.unpack("16sH", fcntl.ioctl(s.fileno(), 0x8913, struct.pack("16sH", b"lo", 0)))[1]
s.close()
print(json.dumps({"links": sorted(n for _, n in socket.if_nameindex()), "lo_up": bool(flags & 1)}))
"""

# Binds 127.0.0.1:PORT, says so, answers one connection with TOKEN.
SERVER_PROG = r"""
import socket, sys
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(1)
print("listening", flush=True)
c, _ = s.accept()
c.sendall(sys.argv[2].encode() + b"\n")
c.close()
"""

CLIENT_PROG = r"""
import socket, sys
c = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
print(c.makefile().readline().strip())
"""

# A unix socket server: replies with the inode of its own network namespace.
UNIX_PROG = r"""
import os, socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(1)
c, _ = s.accept()
line = c.makefile().readline().strip()
c.sendall(f"{line} from {os.readlink('/proc/self/ns/net')}\n".encode())
c.close()
"""


# A TCP server on 127.0.0.1:PORT: every connection gets the server's network
# namespace, then is held until the client closes it.
TCP_PROG = r"""
import asyncio, os, sys
async def main():
    ns = os.readlink("/proc/self/ns/net").encode() + b"\n"
    async def serve(r, w):
        w.write(ns)
        await r.read()
        w.close()
    srv = await asyncio.start_server(serve, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    print("listening", flush=True)
    async with srv:
        await asyncio.Event().wait()
asyncio.run(main())
"""


async def start_connector(sb: Sandbox, path: Path) -> tuple[asyncio.subprocess.Process, int]:
    """The sandbox's connector on `path`, with the free port it picked inside."""
    proc = await sb.spawn([PY, "-m", "harness.sandbox.connector", "--unix", str(path), "--pick-port"],
                          stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
    line = (await asyncio.wait_for(proc.stdout.readline(), 20)).decode()
    assert line.startswith(READY), f"connector said {line!r}"
    return proc, int(line.rsplit(" port ", 1)[1])


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


async def connector_dial(mechanism: str, workdir: Path, lock_dir: Path, n: int = 600) -> dict:
    """A TCP server inside is reached through the connector, more connections
    at once than one fd message holds; the host's 127.0.0.1:PORT is not it;
    nothing of it is left after aclose, no fd in this process either."""
    path = workdir / "c.sock"
    fds0 = open_fds()
    loop = asyncio.get_running_loop()
    async with Sandbox(mechanism=mechanism, lock_dir=lock_dir, grace_s=0.5) as sb:
        connector, port = await start_connector(sb, path)
        assert oct(os.stat(path).st_mode & 0o777) == "0o600", oct(os.stat(path).st_mode)
        server = await sb.spawn([PY, "-c", TCP_PROG, str(port)], stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE)
        assert (await asyncio.wait_for(server.stdout.readline(), 20)).strip() == b"listening"
        # control: from here the port is not the server inside
        probe = socket.socket()
        host_answer = probe.connect_ex(("127.0.0.1", port))
        probe.close()
        addr = Address("tcp", host="127.0.0.1", port=port, via=str(path))
        async with Dialer(addr) as dialer:
            t0 = time.monotonic()
            socks = await asyncio.gather(*(dialer.dial(time.monotonic() + 30) for _ in range(n)))
            dial_s = time.monotonic() - t0
            try:
                replies = {(await asyncio.wait_for(loop.sock_recv(s, 64), 10)).strip().decode() for s in socks}
            finally:
                for s in socks:
                    s.close()
            server.kill()
            await server.wait()
            try:
                await dialer.dial(time.monotonic() + 10)
            except ConnError as exc:
                refused = exc.kind
            else:
                raise AssertionError("a dial with nobody listening inside succeeded")
        assert replies == {f"net:[{sb.net_inode}]"}, replies
        info = dict(name=sb.name, net_inode=sb.net_inode, lock_path=str(sb.lock_path), pids=sb.pids() + [sb.guardian_pid])
        assert connector.pid in info["pids"]
    left = leftovers(info["name"], info["net_inode"], info["lock_path"], info["pids"])
    assert not left, f"aclose left {left}"
    assert not path.exists(), "the connector's socket outlived the sandbox"
    extra = open_fds() - fds0
    # an fd number listed then may be one the listing itself opened and closed
    assert not {fd for fd in extra if os.path.exists(f"/proc/self/fd/{fd}")}, f"fds left open: {extra}"
    return {"host_answer": host_answer, "refused": refused, "dial_s": dial_s, "n": n}


def links_of_this_namespace() -> dict:
    """The same probe run here (for the control: on the host it must fail)."""
    scope: dict = {}
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(LINKS_PROG, scope)
    return json.loads(buf.getvalue())


async def only_lo(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    async with Sandbox(mechanism=mechanism, lock_dir=lock_dir) as sb:
        rc, out, err = await sb.run([PY, "-c", LINKS_PROG], 20)
        assert rc == 0, f"links probe failed: rc={rc} {err}"
        inside = json.loads(out)
        host = links_of_this_namespace()
        assert inside["links"] == ["lo"], f"inside sees {inside['links']}, expected only lo"
        assert inside["lo_up"], "lo is down inside the sandbox"
        return {"inside": inside, "host": host, "mechanism": sb.mechanism, "euid": os.geteuid()}


async def port_8080(mechanism: str, workdir: Path, lock_dir: Path, port: int = 8080) -> dict:
    host = socket.socket()
    host_bound = True
    try:
        host.bind(("127.0.0.1", port))
        host.listen(4)
    except OSError as e:
        if e.errno != errno.EADDRINUSE:
            raise
        host_bound = False  # someone on the host already holds it: the clash still exists
    try:
        # Control: the same server started on the host must clash.
        ctl = await asyncio.create_subprocess_exec(
            PY, "-c", SERVER_PROG, str(port), "host-clash",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        _, ctl_err = await asyncio.wait_for(ctl.communicate(), 20)
        assert ctl.returncode != 0 and b"Address already in use" in ctl_err, (
            f"control: a second server on the host's 127.0.0.1:{port} did not clash: rc={ctl.returncode}"
        )
        async with Sandbox(mechanism=mechanism, lock_dir=lock_dir) as sb:
            server = await sb.spawn(
                [PY, "-c", SERVER_PROG, str(port), "inside"],
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
            first = await asyncio.wait_for(server.stdout.readline(), 20)
            if first.strip() != b"listening":
                err = await server.stderr.read()
                raise AssertionError(f"server inside could not bind 127.0.0.1:{port}: {first!r} {err.decode()}")
            rc, out, err = await sb.run([PY, "-c", CLIENT_PROG, str(port)], 20)
            assert (rc, out.strip()) == (0, "inside"), f"client inside got rc={rc} {out!r} {err!r}"
            await asyncio.wait_for(server.wait(), 10)
            host_reply = None
            if host_bound:
                # The host's listener is still the one the host reaches.
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                conn, _ = host.accept()
                conn.sendall(b"host\n")
                conn.close()
                host_reply = (await asyncio.wait_for(reader.readline(), 5)).decode().strip()
                writer.close()
                await writer.wait_closed()
                assert host_reply == "host", f"host 127.0.0.1:{port} answered {host_reply!r}"
            return {"host_bound": host_bound, "host_reply": host_reply, "mechanism": sb.mechanism}
    finally:
        host.close()


async def unix_socket(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    path = workdir / "inside.sock"
    async with Sandbox(mechanism=mechanism, lock_dir=lock_dir) as sb:
        server = await sb.spawn([PY, "-c", UNIX_PROG, str(path)])
        await await_until(path.exists, 20, f"{path} to be created inside")
        reader, writer = await asyncio.open_unix_connection(str(path))
        writer.write(b"ping\n")
        reply = (await asyncio.wait_for(reader.readline(), 10)).decode().strip()
        writer.close()
        await writer.wait_closed()
        await asyncio.wait_for(server.wait(), 10)
        assert reply == f"ping from net:[{sb.net_inode}]", f"reply {reply!r}, sandbox net:[{sb.net_inode}]"
        assert sb.net_inode != ns_inode("self"), "the sandbox is the host's namespace"
        return {"reply": reply}


async def pids_all(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    outside = await asyncio.create_subprocess_exec("sleep", "60")
    try:
        async with Sandbox(mechanism=mechanism, lock_dir=lock_dir) as sb:
            p1 = await sb.spawn(["sleep", "60"])
            p2 = await sb.spawn(["sleep", "60"], start_new_session=False)
            p3 = await sb.spawn(
                ["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & echo $!; exec sleep 60"],
                stdout=asyncio.subprocess.PIPE,
            )
            grandchild = int(await asyncio.wait_for(p3.stdout.readline(), 10))
            expected = {p1.pid, p2.pid, p3.pid, grandchild}
            # setsid(1) runs after `$!` is printed: wait for its own session too.
            await await_until(lambda: os.getsid(grandchild) == grandchild, 10, "the grandchild's setsid")
            await await_until(lambda: set(sb.pids()) == expected, 10, f"pids() == {sorted(expected)}")
            got = set(sb.pids())
            assert os.getsid(grandchild) != os.getsid(p3.pid), "the grandchild is not in another session"
            assert sb.guardian_pid not in got and outside.pid not in got and os.getpid() not in got
            for pid in got:
                assert ns_inode(pid) == sb.net_inode
        gone = [p for p in expected if alive(p)]
        assert not gone, f"still alive after aclose: {gone}"
        return {"pids": sorted(got), "grandchild": grandchild}
    finally:
        outside.kill()
        await outside.wait()


async def aclose_clean(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    sb = Sandbox(mechanism=mechanism, lock_dir=lock_dir, grace_s=0.3)
    await sb.start()
    procs = [
        await sb.spawn(["sleep", "60"]),
        await sb.spawn(["sh", "-c", "trap '' TERM; sleep 60 & wait"]),  # ignores SIGTERM: needs the SIGKILL
        await sb.spawn(["sh", "-c", "setsid sleep 60 >/dev/null 2>&1 & exec sleep 60"]),
    ]
    await await_until(lambda: len(sb.pids()) >= 5, 10, "5 processes inside")
    info = dict(name=sb.name, net_inode=sb.net_inode, lock_path=str(sb.lock_path),
                pids=sb.pids() + [sb.guardian_pid])
    assert leftovers(info["name"], info["net_inode"], info["lock_path"], info["pids"]), "control: nothing to find"
    await sb.aclose()
    left = leftovers(info["name"], info["net_inode"], info["lock_path"], info["pids"])
    assert not left, f"aclose() left {left}"
    assert all(p.returncode is not None for p in procs), "spawned processes were not reaped"
    await sb.aclose()  # idempotent
    return {"timings": sb.timings, "mechanism": sb.mechanism}


async def cancelled(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    info: dict = {}
    ready = asyncio.Event()

    async def body() -> None:
        async with Sandbox(mechanism=mechanism, lock_dir=lock_dir, grace_s=0.5) as sb:
            await sb.spawn(["sleep", "60"])
            await sb.spawn(["sh", "-c", "trap '' TERM; sleep 60 & wait"])  # makes aclose take grace_s
            await await_until(lambda: len(sb.pids()) >= 3, 10, "3 processes inside")
            info.update(sb=sb, name=sb.name, net_inode=sb.net_inode, lock_path=str(sb.lock_path),
                        pids=sb.pids() + [sb.guardian_pid])
            ready.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(body())
    await asyncio.wait_for(ready.wait(), 20)
    task.cancel()
    # Cancel again while aclose() is running: the cleanup must still finish.
    await await_until(lambda: info["sb"]._close_task is not None, 10, "aclose to start")
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the task was not cancelled")
    left = leftovers(info["name"], info["net_inode"], info["lock_path"], info["pids"])
    assert not left, f"cancellation left {left}"
    return {"timings": info["sb"].timings}


async def start_and_sweep(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    async with Sandbox(mechanism=mechanism, lock_dir=lock_dir) as sb:
        return {"swept": sb.swept, "name": sb.name}


async def expect_error(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    sb = Sandbox(mechanism=mechanism, lock_dir=lock_dir)
    try:
        await sb.start()
    except SandboxError as e:
        return {"mechanism": e.mechanism, "errno": e.errno, "reason": e.reason, "message": str(e),
                "locks": sorted(os.listdir(lock_dir))}
    await sb.aclose()
    raise AssertionError(f"Sandbox(mechanism={mechanism!r}) started ({sb.mechanism}) where it should fail")


async def auto_works(mechanism: str, workdir: Path, lock_dir: Path) -> dict:
    async with Sandbox(mechanism="auto", lock_dir=lock_dir) as sb:
        rc, out, err = await sb.run([PY, "-c", LINKS_PROG], 20)
        return {"mechanism": sb.mechanism, "rc": rc, "inside": json.loads(out) if rc == 0 else err}


CHECKS = {f.__name__: f for f in (only_lo, port_8080, unix_socket, pids_all, aclose_clean, cancelled,
                                  start_and_sweep, expect_error, auto_works, connector_dial)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("check", choices=sorted(CHECKS))
    parser.add_argument("--mechanism", default="auto")
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--lock-dir", type=Path, required=True)
    args = parser.parse_args()
    try:
        result = asyncio.run(CHECKS[args.check](args.mechanism, args.workdir, args.lock_dir))
    except BaseException:
        traceback.print_exc()
        return 1
    print(json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
