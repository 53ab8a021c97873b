"""The sandbox's connector: opens TCP connections inside the sandbox's network
namespace and hands them to the harness outside it as fds (SCM_RIGHTS), so the
harness reaches a kernel on 127.0.0.1:PORT in there without ever calling
setns itself (docs/sandbox.md, "The connector").

    python -m harness.sandbox.connector --unix PATH (--port P | --pick-port) [--host 127.0.0.1]

The launcher spawns it with Sandbox.spawn when the kernel listens on TCP or a
WebSocket: it is one more process in the namespace, so every cleanup that
empties the namespace (aclose, the guardian on the owner's death, the sweep)
ends it too. It prints one line on stdout,

    connector listening on PATH port P

(P: the port it was told, or with --pick-port a free one it found inside,
for the kernel to listen on), then serves any number of clients on PATH, a
SOCK_SEQPACKET unix socket (0600, in the sandbox's 0700 run dir: who may use
it is who may use the run dir). It only ever connects to HOST:P. A client
sends requests, one message each,

    b"N MS"          open N connections, each within MS milliseconds

and receives, in as many messages as it takes, one outcome per connection
asked for, in the order the connects finish (they are interchangeable):

    b"0 0 111 0"     0: connected, its fd attached (in order); else the errno
                     of the failed connect (ETIMEDOUT: no answer within MS)

at most FDS_PER_MESSAGE outcomes a message. Bounded: at most MAX_HELD
connections per client are being opened or waiting to be sent; past that it
reads no more of that client's requests, so a client asking faster than it
reads is slowed down, not buffered for.

Stdlib only and single-threaded: it starts in ~40 ms and imports nothing the
harness process would have to trust inside the namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import os
import random
import resource
import signal
import socket
import stat
import sys

FDS_PER_MESSAGE = 253  # SCM_MAX_FD
MAX_HELD = 1024
# Ports below the default ephemeral range (32768-60999): no connection a
# process inside opens (the kernel's to the mock, ours to the kernel) can be
# holding the port when the kernel comes to bind it.
PICK_RANGE = (20000, 32000)
READY = "connector listening on "


def pick_port(host: str) -> int:
    """A port nobody in this namespace listens on: bound, then released (an
    unconnected socket leaves no TIME_WAIT behind)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    rng = random.SystemRandom()
    for _ in range(500):
        port = rng.randrange(*PICK_RANGE)
        s = socket.socket(family, socket.SOCK_STREAM)
        try:
            s.bind((host, port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise SystemExit(f"connector: no free port in {PICK_RANGE[0]}-{PICK_RANGE[1]} on {host}")


def _raise_fd_limit() -> None:
    """As many fds as allowed: a hold of 10,000 passes through here MAX_HELD at a time per client."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


class Client:
    """One harness process's control connection."""

    def __init__(self, sock: socket.socket, target: tuple[str, int]) -> None:
        self.sock = sock
        self.target = target
        self.family = socket.AF_INET6 if ":" in target[0] else socket.AF_INET
        self.loop = asyncio.get_running_loop()
        self.room = asyncio.Semaphore(MAX_HELD)
        self.outbox: list[tuple[int, socket.socket | None]] = []
        self.flushing = False
        self.writing = False
        self.tasks: set[asyncio.Task] = set()
        self.gone = False

    async def serve(self) -> None:
        try:
            while not self.gone:
                try:
                    request = await self.loop.sock_recv(self.sock, 64)
                except OSError:
                    break
                if not request:
                    break  # the harness closed it
                try:
                    n_text, ms_text = request.split()
                    n, timeout = int(n_text), int(ms_text) / 1000
                except ValueError:
                    break  # not our client: nothing it says can be trusted
                for _ in range(max(0, n)):
                    await self.room.acquire()  # full: this client's requests wait in its socket
                    if self.gone:
                        break
                    task = self.loop.create_task(self.connect(timeout))
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
        finally:
            self.close()

    async def connect(self, timeout: float) -> None:
        try:
            conn = socket.socket(self.family, socket.SOCK_STREAM)
        except OSError as exc:
            self.push(exc.errno or errno.EIO, None)
            return
        conn.setblocking(False)
        try:
            async with asyncio.timeout(timeout):
                await self.loop.sock_connect(conn, self.target)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except TimeoutError:
            conn.close()
            self.push(errno.ETIMEDOUT, None)
            return
        except OSError as exc:
            conn.close()
            self.push(exc.errno or errno.EIO, None)
            return
        except BaseException:
            conn.close()
            raise
        self.push(0, conn)

    def push(self, code: int, conn: socket.socket | None) -> None:
        if self.gone:
            if conn is not None:
                conn.close()
            return
        self.outbox.append((code, conn))
        if not self.flushing and not self.writing:
            self.flushing = True
            self.loop.call_soon(self.flush)  # what finishes in this turn goes in one message

    def flush(self) -> None:
        self.flushing = False
        if self.writing:
            self.loop.remove_writer(self.sock.fileno())
            self.writing = False
        while self.outbox and not self.gone:
            batch = self.outbox[:FDS_PER_MESSAGE]
            data = b" ".join(b"%d" % code for code, _ in batch)
            fds = [c.fileno() for _, c in batch if c is not None]
            try:
                socket.send_fds(self.sock, [data], fds)
            except BlockingIOError:
                self.writing = True
                self.loop.add_writer(self.sock.fileno(), self.flush)
                return
            except OSError:
                self.close()
                return
            del self.outbox[: len(batch)]
            for _, c in batch:
                if c is not None:
                    c.close()  # the harness holds its own copy now
                self.room.release()

    def close(self) -> None:
        if self.gone:
            return
        self.gone = True
        for task in list(self.tasks):
            task.cancel()
        for _, c in self.outbox:
            if c is not None:
                c.close()
        self.outbox.clear()
        if self.writing:
            self.loop.remove_writer(self.sock.fileno())
            self.writing = False
        self.sock.close()
        # wake the reader if it waits for room: it sees `gone` and ends
        for _ in range(MAX_HELD):
            self.room.release()


async def serve(path: str, target: tuple[str, int]) -> None:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    old = os.umask(0o177)  # 0600: sockets are created 0777 & ~umask
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    ino = os.stat(path).st_ino
    listener.listen(128)
    listener.setblocking(False)
    clients: set[Client] = set()
    tasks: set[asyncio.Task] = set()

    async def accept() -> None:
        while True:
            try:
                conn, _ = await loop.sock_accept(listener)
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    await asyncio.sleep(0.05)  # out of fds: the next accept may find some
                    continue
                raise
            conn.setblocking(False)
            client = Client(conn, target)
            clients.add(client)
            task = loop.create_task(client.serve())
            tasks.add(task)
            task.add_done_callback(lambda t, c=client: (tasks.discard(t), clients.discard(c)))

    print(f"{READY}{path} port {target[1]}", flush=True)
    acceptor = loop.create_task(accept())
    try:
        await stop.wait()
    finally:
        acceptor.cancel()
        for c in list(clients):
            c.close()
        listener.close()
        try:
            if os.stat(path).st_ino == ino and stat.S_ISSOCK(os.stat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.sandbox.connector", description=__doc__.splitlines()[0])
    ap.add_argument("--unix", required=True, help="the unix socket to serve (SOCK_SEQPACKET, created 0600)")
    ap.add_argument("--host", default="127.0.0.1", help="the loopback address the kernel listens on inside")
    where = ap.add_mutually_exclusive_group(required=True)
    where.add_argument("--port", type=int, help="the kernel's port inside the namespace")
    where.add_argument("--pick-port", action="store_true", help="find a free port inside for the kernel, and say which")
    a = ap.parse_args(argv)
    _raise_fd_limit()
    port = pick_port(a.host) if a.pick_port else a.port
    try:
        asyncio.run(serve(a.unix, (a.host, port)))
    except OSError as exc:
        print(f"connector: {a.unix}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
