"""How bytes reach a kernel: the forms ``--socket`` takes, and a connected
socket to one.

    unix:PATH | PATH            a unix socket file (EAGAIN retried: see open_unix)
    tcp:HOST:PORT               TCP, HOST a loopback address (127.0.0.0/8, localhost, [::1])
    ws://HOST:PORT[/PATH]       a WebSocket over such a TCP connection (also ws:HOST:PORT[/PATH])

An :class:`Address` with ``via`` set names a TCP port inside a sandbox's
private network namespace: from outside it is reached through the sandbox's
connector (harness/sandbox/connector.py), which opens the connection in there and
hands the fd over a unix socket; :class:`Dialer` is its client. Either way
the result is a connected socket, which the client wraps in an asyncio stream
(unix, tcp) or an aiohttp WebSocket (harness/wire/wsconn.py): aiohttp never dials
itself, so the connect taxonomy and deadline are the same on every transport.

Connect failures are :class:`ConnError`, by kind:
    refused       nobody listens (ECONNREFUSED, no socket file behind the path)
    no_socket     the unix socket file does not exist
    backlog_full  the listen backlog is full: EAGAIN on unix; on TCP no SYN-ACK
                  before the deadline (loopback drops the SYN of a full queue)
    capacity      our side ran out: EMFILE, ENFILE, ENOBUFS, ENOMEM, and on TCP
                  EADDRNOTAVAIL (no free local port)
    reset         ECONNRESET while connecting
    timeout, auth, closed, protocol: after the connect (harness/wire/client.py)
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Callable

from ..errors import ConnectorGone, UsageError

# Errors that mean "the machine ran out of something", counted as capacity
# errors rather than as failures of the kernel.
CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# on TCP also the local ports: 10,000 held connections use a third of the
# default ephemeral range of one address
TCP_CAPACITY_ERRNOS = CAPACITY_ERRNOS | {errno.EADDRNOTAVAIL}
SCHEMES = ("unix", "tcp", "ws")
FORMS = "unix:PATH (or a bare PATH), tcp:HOST:PORT or ws://HOST:PORT/PATH"
FDS_PER_MESSAGE = 253  # SCM_MAX_FD: the most fds one unix-socket message may carry
DIAL_INFLIGHT = 1024  # connections asked of a connector and not yet received


class ConnError(Exception):
    """A connection could not be made or was lost. ``kind`` is one of:
    refused, no_socket, backlog_full, capacity, timeout, auth, closed, protocol, reset."""

    def __init__(self, kind: str, message: str, detail: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.detail = detail  # for `capacity`: the errno name (EMFILE, ...)


# --------------------------------------------------------------------------- addresses


@dataclass(frozen=True)
class Address:
    """Where a kernel listens. ``via``: the socket of the sandbox connector
    that reaches HOST:PORT inside the sandbox's namespace (None: directly)."""

    scheme: str  # unix | tcp | ws
    path: str = ""  # unix
    host: str = ""  # tcp, ws (an IPv6 address without brackets)
    port: int = 0
    url_path: str = "/"  # ws
    via: str | None = None

    @property
    def hostport(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The form --socket takes, and {listen_url} in a target's templates."""
        if self.scheme == "unix":
            return f"unix:{self.path}"
        if self.scheme == "tcp":
            return f"tcp:{self.hostport}"
        return f"ws://{self.hostport}{self.url_path}"

    def __str__(self) -> str:
        # a unix socket is named by its path, as every message always did
        shown = self.path if self.scheme == "unix" else self.url
        return f"{shown} (in the sandbox)" if self.via else shown


_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HOSTPORT_RE = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/\[\]\s]*))(?::(?P<port>[^/]*))?(?P<path>/.*)?", re.S)


def parse_address(text: str, flag: str = "--socket", allow: tuple[str, ...] = ()) -> Address:
    """One of the forms in the module docstring, or a UsageError naming the
    form that was meant and what is wrong with it. ``allow``: hosts off
    loopback the user named with --allow-remote."""
    if not isinstance(text, str) or not text:
        raise UsageError(f"{flag} {text!r} is empty; use {FORMS}")
    m = _SCHEME_RE.match(text)
    if m is None:
        return Address("unix", path=text)
    scheme = m.group(1).lower()
    rest = text[m.end():]
    if scheme not in SCHEMES:
        raise UsageError(
            f"{flag} {text}: unknown scheme {m.group(1)!r}; use {FORMS} "
            f"(a path whose first part holds a colon: write ./{text} or unix:{text})"
        )
    if scheme == "unix":
        if not rest:
            raise UsageError(f"{flag} {text}: unix:PATH needs a path, e.g. unix:/tmp/kernel.sock")
        return Address("unix", path=rest)
    form = "tcp:HOST:PORT" if scheme == "tcp" else "ws://HOST:PORT/PATH"
    if scheme == "ws" and rest.startswith("//"):
        rest = rest[2:]
    hp = _HOSTPORT_RE.fullmatch(rest)
    if hp is None or not (hp["v6"] or hp["host"]):
        raise UsageError(f"{flag} {text}: {form} needs a host, e.g. {_example(scheme)}")
    host = hp["v6"] if hp["v6"] is not None else hp["host"]
    if hp["port"] is None or hp["port"] == "":
        raise UsageError(f"{flag} {text}: {form} needs a port, e.g. {_example(scheme)}")
    if not hp["port"].isdigit() or not 1 <= int(hp["port"]) <= 65535:
        raise UsageError(f"{flag} {text}: port {hp['port']!r} is invalid: use 1 to 65535")
    path = hp["path"]
    if scheme == "tcp" and path is not None:
        raise UsageError(f"{flag} {text}: tcp:HOST:PORT takes no path (a path is for ws://HOST:PORT/PATH)")
    if path is not None and any(c.isspace() for c in path):
        raise UsageError(f"{flag} {text}: the WebSocket path {path!r} holds whitespace")
    return Address(scheme, host=_loopback(host, text, flag, allow), port=int(hp["port"]), url_path=path or "/")


def _example(scheme: str) -> str:
    return "tcp:127.0.0.1:8765" if scheme == "tcp" else "ws://127.0.0.1:8765/kernel"


def _loopback(host: str, text: str, flag: str, allow: tuple[str, ...] = ()) -> str:
    """The host as an address to connect to, which must be a loopback one:
    the harness's traffic never leaves the machine -- unless the user named
    this very host with --allow-remote."""
    if host in allow:
        return host
    if host.lower() == "localhost":
        return "127.0.0.1"  # not resolved: a name could say anything
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(
            f"{flag} {text}: {host!r} is not a loopback address (no name but localhost is accepted); "
            f"kstress keeps its traffic on loopback: use 127.0.0.1, localhost or [::1], or aim the load there on purpose with --allow-remote {host}"
        ) from None
    if not ip.is_loopback:
        raise UsageError(
            f"{flag} {text}: {host} is not a loopback address; kstress keeps its traffic on loopback: "
            f"use 127.0.0.1, localhost or [::1], or aim the load at that machine on purpose with --allow-remote {host}"
        )
    return str(ip)


# --------------------------------------------------------------------------- connecting


async def open_unix(
    path: str,
    deadline: float,
    retry_refused: bool = False,
    on_retry: Callable[[str], None] | None = None,
    sock_type: int = socket.SOCK_STREAM,
) -> socket.socket:
    """A connected non-blocking unix socket, retrying EAGAIN (backlog full)
    with backoff until the deadline (time.monotonic()). ``on_retry(kind)`` is
    told of each failed attempt that will be retried."""
    delay = 0.001
    while True:
        sock = socket.socket(socket.AF_UNIX, sock_type)
        sock.setblocking(False)
        try:
            sock.connect(path)
            return sock
        except BlockingIOError:
            sock.close()
            kind, msg = "backlog_full", f"{path}: listen backlog full (EAGAIN) until the deadline"
        except FileNotFoundError:
            sock.close()
            if not retry_refused:
                raise ConnError("no_socket", f"{path}: no such socket (is the kernel running?)") from None
            kind, msg = "no_socket", f"{path}: socket did not appear before the deadline"
        except ConnectionRefusedError:
            sock.close()
            if not retry_refused:
                raise ConnError("refused", f"{path}: connection refused (nobody listening)") from None
            kind, msg = "refused", f"{path}: still refused at the deadline"
        except OSError as exc:
            sock.close()
            if exc.errno in CAPACITY_ERRNOS:
                name = errno.errorcode.get(exc.errno, str(exc.errno))
                raise ConnError("capacity", f"{path}: {name}: {exc.strerror}", detail=name) from None
            raise ConnError("refused", f"{path}: {exc}") from None
        now = time.monotonic()
        if now >= deadline:
            raise ConnError(kind, msg)
        if on_retry is not None:
            on_retry(kind)
        await asyncio.sleep(min(delay, deadline - now))  # backoff between connect attempts
        delay = min(delay * 2, 0.05)


def tcp_error(err: int, where: str) -> ConnError:
    """The ConnError of a failed TCP connect, by its errno (also what a
    sandbox's connector reports for one it opened inside)."""
    name = errno.errorcode.get(err, str(err))
    if err == errno.ECONNREFUSED:
        return ConnError("refused", f"{where}: connection refused (nobody listening)")
    if err == errno.ETIMEDOUT:
        return ConnError("backlog_full", f"{where}: no answer to the connect before the deadline (the listen backlog is full: loopback drops the SYN)")
    if err == errno.ECONNRESET:
        return ConnError("reset", f"{where}: connection reset while connecting")
    if err in TCP_CAPACITY_ERRNOS:
        return ConnError("capacity", f"{where}: {name}: {os.strerror(err)}", detail=name)
    return ConnError("refused", f"{where}: {name}: {os.strerror(err)}")


async def open_tcp(
    address: Address, deadline: float, retry_refused: bool = False, on_retry: Callable[[str], None] | None = None
) -> socket.socket:
    """A connected non-blocking TCP socket to a loopback HOST:PORT, within the
    deadline (time.monotonic()); refused is retried with backoff when asked
    (``on_retry(kind)`` told of each retried attempt)."""
    loop = asyncio.get_running_loop()
    family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
    where = address.url
    delay = 0.001
    while True:
        try:
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            raise tcp_error(exc.errno or errno.EIO, where) from None
        sock.setblocking(False)
        try:
            async with asyncio.timeout_at(deadline):
                await loop.sock_connect(sock, (address.host, address.port))
            return sock
        except TimeoutError:
            sock.close()
            raise tcp_error(errno.ETIMEDOUT, where) from None
        except OSError as exc:
            sock.close()
            err = exc.errno or errno.EIO
            if err != errno.ECONNREFUSED or not retry_refused:
                raise tcp_error(err, where) from None
        except BaseException:
            sock.close()
            raise
        now = time.monotonic()
        if now >= deadline:
            raise ConnError("refused", f"{where}: still refused at the deadline")
        if on_retry is not None:
            on_retry("refused")
        await asyncio.sleep(min(delay, deadline - now))  # backoff between connect attempts
        delay = min(delay * 2, 0.05)


async def open_socket(address: Address, deadline: float, retry_refused: bool = False, dialer: "Dialer | None" = None) -> socket.socket:
    """A connected socket to ``address``: unix, TCP directly, or TCP inside a
    sandbox through its connector (``dialer`` when the caller shares one;
    else one is made for this connection and closed)."""
    if address.scheme == "unix":
        return await open_unix(address.path, deadline, retry_refused)
    if address.via is None:
        return await open_tcp(address, deadline, retry_refused)
    if dialer is not None:
        return await dialer.dial(deadline)
    own = Dialer(address)
    try:
        return await own.dial(deadline)
    finally:
        await own.aclose()


# --------------------------------------------------------------------------- the connector's client


class Dialer:
    """TCP connections to a kernel inside a sandbox's namespace, opened there
    by the sandbox's connector (harness/sandbox/connector.py) and received as fds, so
    the harness process never enters the namespace.

    One control connection (a SOCK_SEQPACKET unix socket) for every client of
    a run: the dials of one event-loop turn go out as one request, the
    connector answers up to FDS_PER_MESSAGE a message, and at most
    DIAL_INFLIGHT connections are asked for and not yet received -- the rest
    wait their turn here, so neither side ever holds more fds than that beyond
    the connections in use. Outcomes are handed to the waiting dials in order;
    one that arrives for a dial that gave up is closed."""

    def __init__(self, address: Address) -> None:
        if address.via is None:
            raise ValueError(f"{address.url} is not inside a sandbox: it needs no connector")
        self.address = address
        self.path = address.via
        self._where = f"{address.url} (inside the sandbox, through its connector {address.via})"
        self._sock: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = asyncio.Lock()
        self._waiters: collections.deque[asyncio.Future[socket.socket]] = collections.deque()
        self._unasked = 0
        self._asked = 0
        self._latest = 0.0  # the latest deadline of the dials not yet asked for
        self._flush_scheduled = False
        self._writing = False
        self._broken: str | None = None
        self._closed = False

    async def __aenter__(self) -> "Dialer":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def dial(self, deadline: float) -> socket.socket:
        """One connected socket, or ConnError (as open_tcp's), by the deadline
        (time.monotonic()); ConnectorGone when the connector is not there."""
        if self._closed:
            raise ConnError("closed", f"{self._where}: the dialer is closed")
        await self._open(deadline)
        assert self._loop is not None
        fut: asyncio.Future[socket.socket] = self._loop.create_future()
        self._waiters.append(fut)
        self._unasked += 1
        self._latest = max(self._latest, deadline)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)  # the other dials of this turn go in the same request
        try:
            async with asyncio.timeout_at(deadline):
                return await fut
        except BaseException as exc:
            if not fut.done():
                fut.cancel()
            elif not fut.cancelled() and fut.exception() is None:
                fut.result().close()  # it arrived as we gave up: nobody else will close it
            if isinstance(exc, TimeoutError):
                raise tcp_error(errno.ETIMEDOUT, self._where) from None
            raise

    async def _open(self, deadline: float) -> None:
        if self._broken is not None:
            raise ConnectorGone(self._broken)
        if self._sock is not None:
            return
        async with self._lock:
            if self._broken is not None:
                raise ConnectorGone(self._broken)
            if self._sock is not None:
                return  # opened by another dial meanwhile
            try:
                sock = await open_unix(self.path, deadline, sock_type=socket.SOCK_SEQPACKET)
            except ConnError as exc:
                if exc.kind in ("no_socket", "refused"):
                    raise ConnectorGone(f"the sandbox's connector is gone ({exc}): the sandbox is stopping, or its connector died") from None
                raise
            if self._closed:
                sock.close()
                raise ConnError("closed", f"{self._where}: the dialer is closed")
            self._loop = asyncio.get_running_loop()
            self._sock = sock
            self._loop.add_reader(sock.fileno(), self._readable)

    def _flush(self) -> None:
        self._flush_scheduled = False
        sock = self._sock
        if sock is None or self._writing:
            return
        n = min(self._unasked, DIAL_INFLIGHT - self._asked)
        if n <= 0:
            return
        ms = max(1, int((self._latest - time.monotonic()) * 1000))
        try:
            sock.send(b"%d %d" % (n, ms))
        except BlockingIOError:
            # the connector reads no more requests until it sent what it owes
            self._writing = True
            assert self._loop is not None
            self._loop.add_writer(sock.fileno(), self._writable)
            return
        except OSError as exc:
            self._break(f"the sandbox's connector {self.path} went away ({exc})")
            return
        self._unasked -= n
        self._asked += n
        if not self._unasked:
            self._latest = 0.0

    def _writable(self) -> None:
        self._writing = False
        if self._sock is not None and self._loop is not None:
            self._loop.remove_writer(self._sock.fileno())
        self._flush()

    def _readable(self) -> None:
        sock = self._sock
        while sock is not None:
            try:
                data, fds, _flags, _ = socket.recv_fds(sock, 8192, FDS_PER_MESSAGE, socket.MSG_CMSG_CLOEXEC)
            except (BlockingIOError, InterruptedError):
                break
            except OSError as exc:
                self._break(f"the sandbox's connector {self.path} went away ({exc})")
                return
            if not data and not fds:
                self._break(f"the sandbox's connector {self.path} closed its connection: the sandbox is stopping, or its connector died")
                return
            given = iter(fds)
            for code in data.split():
                self._asked -= 1
                err = int(code)
                if err:
                    self._deliver(tcp_error(err, self._where))
                    continue
                fd = next(given, None)
                if fd is None:
                    # MSG_CTRUNC: the kernel could not install the fd here (RLIMIT_NOFILE)
                    self._deliver(ConnError("capacity", f"{self._where}: EMFILE: the connection's fd could not be received", detail="EMFILE"))
                    continue
                conn = socket.socket(fileno=fd)
                conn.setblocking(False)
                self._deliver(conn)
            for fd in given:  # more fds than outcomes: never from our connector
                os.close(fd)
            sock = self._sock
        if self._unasked and not self._flush_scheduled:
            self._flush()

    def _deliver(self, outcome: socket.socket | ConnError) -> None:
        while self._waiters:
            fut = self._waiters.popleft()
            if fut.done():
                continue  # gave up (deadline, cancelled)
            if isinstance(outcome, ConnError):
                fut.set_exception(outcome)
            else:
                fut.set_result(outcome)
            return
        if isinstance(outcome, socket.socket):
            outcome.close()

    def _break(self, reason: str) -> None:
        self._broken = reason
        self._drop(lambda: ConnectorGone(reason))

    def _drop(self, error: Callable[[], BaseException]) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            if self._loop is not None and not self._loop.is_closed():
                self._loop.remove_reader(sock.fileno())
                if self._writing:
                    self._loop.remove_writer(sock.fileno())
            sock.close()
        self._writing = False
        while self._waiters:
            fut = self._waiters.popleft()
            if not fut.done():
                fut.set_exception(error())
        self._unasked = self._asked = 0

    async def aclose(self) -> None:
        """Idempotent: the control connection goes; dials still waiting fail (closed)."""
        if self._closed:
            return
        self._closed = True
        self._drop(lambda: ConnError("closed", f"{self._where}: the dialer was closed"))
