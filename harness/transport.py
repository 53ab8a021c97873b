"""How bytes reach a kernel: the forms ``--socket`` takes, and a connected
socket to one.

    unix:PATH | PATH            a unix socket file (EAGAIN retried: see open_unix)
    tcp:HOST:PORT               TCP, HOST a loopback address (127.0.0.0/8, localhost, [::1])
    ws://HOST:PORT[/PATH]       a WebSocket over such a TCP connection (also ws:HOST:PORT[/PATH])

The result is a connected socket, which the client wraps in an asyncio stream
(unix, tcp) or an aiohttp WebSocket (harness/wsconn.py): aiohttp never dials
itself, so the connect taxonomy and deadline are the same on every transport.

Connect failures are :class:`ConnError`, by kind:
    refused       nobody listens (ECONNREFUSED, no socket file behind the path)
    no_socket     the unix socket file does not exist
    backlog_full  the listen backlog is full: EAGAIN on unix; on TCP no SYN-ACK
                  before the deadline (loopback drops the SYN of a full queue)
    capacity      our side ran out: EMFILE, ENFILE, ENOBUFS, ENOMEM, and on TCP
                  EADDRNOTAVAIL (no free local port)
    reset         ECONNRESET while connecting
    timeout, auth, closed, protocol: after the connect (harness/client.py)
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import re
import socket
import time
from dataclasses import dataclass
from typing import Callable

from .errors import UsageError

# Errors that mean "the machine ran out of something", counted as capacity
# errors rather than as failures of the kernel.
CAPACITY_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
# on TCP also the local ports: 10,000 held connections use a third of the
# default ephemeral range of one address
TCP_CAPACITY_ERRNOS = CAPACITY_ERRNOS | {errno.EADDRNOTAVAIL}
SCHEMES = ("unix", "tcp", "ws")
FORMS = "unix:PATH (or a bare PATH), tcp:HOST:PORT or ws://HOST:PORT/PATH"


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
    """Where a kernel listens."""

    scheme: str  # unix | tcp | ws
    path: str = ""  # unix
    host: str = ""  # tcp, ws (an IPv6 address without brackets)
    port: int = 0
    url_path: str = "/"  # ws

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
        return self.path if self.scheme == "unix" else self.url


_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
_HOSTPORT_RE = re.compile(r"(?:\[(?P<v6>[^\]]*)\]|(?P<host>[^:/\[\]\s]*))(?::(?P<port>[^/]*))?(?P<path>/.*)?", re.S)


def parse_address(text: str, flag: str = "--socket") -> Address:
    """One of the forms in the module docstring, or a UsageError naming the
    form that was meant and what is wrong with it."""
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
    return Address(scheme, host=_loopback(host, text, flag), port=int(hp["port"]), url_path=path or "/")


def _example(scheme: str) -> str:
    return "tcp:127.0.0.1:8765" if scheme == "tcp" else "ws://127.0.0.1:8765/kernel"


def _loopback(host: str, text: str, flag: str) -> str:
    """The host as an address to connect to, which must be a loopback one:
    the harness's traffic never leaves the machine."""
    if host.lower() == "localhost":
        return "127.0.0.1"  # not resolved: a name could say anything
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(
            f"{flag} {text}: {host!r} is not a loopback address (no name but localhost is accepted); "
            "kstress keeps its traffic on loopback: use 127.0.0.1, localhost or [::1]"
        ) from None
    if not ip.is_loopback:
        raise UsageError(
            f"{flag} {text}: {host} is not a loopback address; kstress keeps its traffic on loopback: "
            "use 127.0.0.1, localhost or [::1] (for a kernel on another machine, run kstress there)"
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
    """The ConnError of a failed TCP connect, by its errno."""
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


async def open_socket(address: Address, deadline: float, retry_refused: bool = False) -> socket.socket:
    """A connected socket to ``address``: unix or TCP."""
    if address.scheme == "unix":
        return await open_unix(address.path, deadline, retry_refused)
    return await open_tcp(address, deadline, retry_refused)
