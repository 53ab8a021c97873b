"""The kernel's settings: frozen, checked field by field at construction.

The command line (``__main__``) only parses flags into :class:`KernelSettings`;
every rule lives here so that library users get the same messages.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from .errors import ConfigError

# Each fault switches on one known bug; docs/refkernel.md says what it breaks
# and which harness check catches it.
FAULTS: dict[str, str] = {
    "ignore-stream-index": "accumulates streamed tool-call fragments into one call, ignoring `index` "
                           "(Anthropic: the block index; Responses: item_id and output_index)",
    "first-tool-only": "runs only the first tool call of a batch",
    "completion-order": "appends tool results in completion order, not declared order",
    "serial-tools": "runs every batch serially, even when all calls are parallel-safe",
    "always-parallel": "runs every batch concurrently, ignoring parallel-safety",
    "drop-last-result": "loses the last tool result of every batch",
    "swallow-tool-errors": "reports failed tools as successful (their error text as output)",
    "no-dedup": "has no replay guard: identical inputs run again",
    "leak-children": "leaves resident children running at exit (and does not tie them to its life)",
    "hide-error-frames": "ends a turn whose LLM request failed with an empty `response`, not an `error`",
    "session-crosstalk": "keys session history by connection, not by `session`: sessions on one connection bleed together",
    "drop-history": "keeps only the last completed turn of each session's history",
    "drop-answers": "keeps each turn's user message and tool exchanges in its session's history, not the model's final answer",
    "loop-drop-results": "sends only the latest step's tool exchange back: earlier steps of the turn are dropped",
    "loop-reuse-ids": "sends tool calls back under its own ids call_0, call_1, ... restarting at every step",
    # issue 24: what the resilience grades must catch (docs/refkernel.md#llm-retries)
    "ignore-retry-after": "retries an LLM request at once, whatever Retry-After / retry-after-ms said",
    "retry-storm": "retries a failed LLM request with no wait at all, and 2N+2 times for --llm-retries N (2 when N is 0)",
    "accept-truncated": "takes an LLM stream that ends (or breaks off) without its terminal event as a complete answer",
    "hide-llm-error": "answers a turn whose LLM request failed (after any retries) with a normal response of made-up text",
}

# --llm-backoff: the wait before retry k (k = 0, 1, ...) when no Retry-After is honoured.
BACKOFFS: dict[str, str] = {
    "none": "retry at once",
    "constant": "wait --llm-backoff-ms before every retry",
    "exponential": "wait --llm-backoff-ms * 2^k, at most BACKOFF_MAX_S, less a random 0-25% (the openai SDK's formula)",
}
BACKOFF_MAX_S = 8.0  # the openai SDK's MAX_RETRY_DELAY
RETRY_AFTER_MAX_S = 120.0  # the openai SDK's MAX_RETRY_AFTER_DELAY: a longer Retry-After ends the retries
MAX_LLM_RETRIES = 10

# How a tool batch is scheduled: each is the contract of some real framework
# (docs/refkernel.md, /work/shared/research/frameworks.md). Not faults.
BATCH_MODES: dict[str, str] = {
    "whole-batch": "one call, or any unsafe call: all serially in order; otherwise all at once",
    "barrier": "an unsafe call waits for the calls before it, runs alone, then the rest go on",
    "parallel": "every call of a batch at once, parallel-safe or not",
    "serial": "one call at a time, always, in declared order",
}

# The API the kernel speaks to its LLM (--llm-api): dialects/*.py.
LLM_APIS: dict[str, str] = {
    "chat": "OpenAI chat completions: POST URL/chat/completions",
    "responses": "OpenAI Responses: POST URL/responses",
    "anthropic": "Anthropic Messages: POST URL/messages",
}

MAX_FRAME = 1 << 20  # bytes of one JSON frame, newline excluded (protocol v1)
SOCKET_PATH_MAX = 107  # sun_path holds 108 bytes including the terminating NUL


_HOST_PORT = re.compile(r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^\s:/\[\]]+)):(?P<port>\d{1,5})(?P<path>/\S*)?")
_LISTEN_FORMS = "unix:PATH, tcp:HOST:PORT or ws:HOST:PORT[/PATH] (e.g. tcp:127.0.0.1:0, ws:127.0.0.1:8765/kernel)"


def _rule(ok: bool, name: str, value: Any, want: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} is invalid: {want}")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _socket_path_rule(name: str, path: Path) -> None:
    sock = os.fsencode(path)
    _rule(
        0 < len(sock) <= SOCKET_PATH_MAX,
        name,
        str(path),
        f"a unix socket path is at most {SOCKET_PATH_MAX} bytes (this one is {len(sock)}); "
        "use a shorter directory such as /tmp/rk",
    )


@dataclass(frozen=True)
class Listen:
    """Where the kernel listens. ``parse`` reads the ``--listen`` forms;
    ``str()`` gives them back; ``ready_name`` is what the ready line says."""

    scheme: str  # unix | tcp | ws
    path: Path | None = None  # unix
    host: str = ""  # tcp, ws (an IPv6 address without its brackets)
    port: int = 0  # tcp, ws; 0 = pick a free one
    url_path: str = "/"  # ws

    @classmethod
    def parse(cls, spec: str, name: str = "listen") -> "Listen":
        scheme, sep, rest = spec.partition(":") if isinstance(spec, str) else ("", "", "")
        _rule(bool(sep) and scheme in ("unix", "tcp", "ws") and bool(rest), name, spec, f"use {_LISTEN_FORMS}")
        if scheme == "unix":
            path = Path(rest)
            _socket_path_rule(name, path)
            return cls("unix", path=path)
        if scheme == "ws" and rest.startswith("//"):
            rest = rest[2:]  # ws://HOST:PORT/PATH, the form the ready line prints, is the same address
        m = _HOST_PORT.fullmatch(rest)
        _rule(m is not None, name, spec, f"use {_LISTEN_FORMS}")
        assert m is not None
        port = int(m["port"])
        _rule(port <= 65535, name, spec, "the port is 0 (pick a free one) to 65535")
        host = m["v6"] or m["host"]
        if scheme == "tcp":
            _rule(m["path"] is None, name, spec, "tcp:HOST:PORT takes no path; a path is for ws:HOST:PORT/PATH")
            return cls("tcp", host=host, port=port)
        return cls("ws", host=host, port=port, url_path=m["path"] or "/")

    def with_port(self, port: int) -> "Listen":
        return Listen(self.scheme, self.path, self.host, port, self.url_path)

    @property
    def _hostport(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def __str__(self) -> str:
        if self.scheme == "unix":
            return f"unix:{self.path}"
        return f"{self.scheme}:{self._hostport}" + (self.url_path if self.scheme == "ws" else "")

    @property
    def ready_name(self) -> str:
        """``PATH`` (as the unix ready line always was), ``tcp:HOST:PORT``, ``ws://HOST:PORT/PATH``."""
        if self.scheme == "unix":
            return str(self.path)
        if self.scheme == "tcp":
            return f"tcp:{self._hostport}"
        return f"ws://{self._hostport}{self.url_path}"


@dataclass(frozen=True)
class KernelSettings:
    # socket=PATH is listen=unix:PATH; exactly one of the two is given. After
    # construction ``listen`` is always set and ``socket`` is the unix path or None.
    socket: Path | None = None
    llm_url: str = ""
    data_dir: Path | None = None  # required; None only so that the fields above can have defaults
    token: str | None = None
    workers: int = 4
    queue: int = 64
    dedup_window: float = 30.0
    llm_timeout: float = 60.0
    max_parallel_tools: int = 16
    faults: frozenset[str] = field(default_factory=frozenset)
    model: str = "kstress-refkernel"
    auth_timeout: float = 10.0
    tool_timeout: float = 60.0
    # A tool loop of 10+ steps plus its final answer must fit (the mock's !loopK).
    max_steps: int = 32
    max_write_buffer: int = 4 << 20
    conn_backlog: int = 256
    max_residents: int = 64
    shutdown_grace: float = 5.0
    system_prompt: str = "You are the kstress reference agent kernel. Use the tools you are asked to use."
    listen: Listen | str | None = None
    batch: str = "whole-batch"
    terse: bool = False
    delay_ms: int = 0
    session_turns: int = 64
    max_sessions: int = 10_000
    llm_api: str = "chat"
    llm_api_key: str | None = None  # None: a placeholder the mock accepts (a real API answers 401)
    stream: bool = True
    # issue 24: 0 retries is the kernel as it always was (one request per step)
    llm_retries: int = 0
    honour_retry_after: bool = False
    llm_backoff: str = "exponential"
    llm_backoff_ms: int = 500

    def __post_init__(self) -> None:
        self._settle_listen()
        _rule(self.data_dir is not None and str(self.data_dir) != "", "data_dir", self.data_dir, "give the data directory (--data-dir)")
        object.__setattr__(self, "data_dir", Path(self.data_dir))  # type: ignore[arg-type]
        object.__setattr__(self, "faults", frozenset(self.faults))
        self._check_llm()
        self._check_kernel()

    def _settle_listen(self) -> None:
        """Exactly one of socket= and listen=; afterwards ``listen`` is a
        Listen and ``socket`` its unix path (None for tcp and ws)."""
        _rule(
            (self.socket is None) != (self.listen is None),
            "listen",
            str(self.listen),
            "give either socket=PATH (--socket) or listen=unix:PATH|tcp:HOST:PORT|ws:HOST:PORT[/PATH] (--listen), "
            f"not {'both' if self.socket is not None else 'neither'}",
        )
        if self.socket is not None:
            sock = Path(self.socket)
            _socket_path_rule("socket", sock)
            listen = Listen("unix", path=sock)
        elif isinstance(self.listen, Listen):
            listen = self.listen
        else:
            listen = Listen.parse(self.listen)  # type: ignore[arg-type]
        object.__setattr__(self, "listen", listen)
        object.__setattr__(self, "socket", listen.path)

    def _check_llm(self) -> None:
        """How the kernel reaches the LLM: the URL, the API, its key, streaming."""
        url = urlsplit(self.llm_url)
        _rule(
            url.scheme in ("http", "https") and bool(url.netloc),
            "llm_url",
            self.llm_url,
            "give the LLM's base URL, e.g. http://127.0.0.1:8000/v1 (the endpoint path of --llm-api goes under it)",
        )
        _rule(self.llm_api in LLM_APIS, "llm_api", self.llm_api, f"use one of {', '.join(LLM_APIS)}")
        _rule(
            self.llm_api_key is None or (isinstance(self.llm_api_key, str) and 0 < len(self.llm_api_key) <= 4096
                                         and self.llm_api_key.isprintable()),
            "llm_api_key",
            "(hidden)",
            "use a non-empty printable string of at most 4096 characters, or leave it out",
        )
        _rule(isinstance(self.stream, bool), "stream", self.stream, "use True or False")
        _rule(_count(self.llm_retries) and 0 <= self.llm_retries <= MAX_LLM_RETRIES, "llm_retries", self.llm_retries,
              f"use 0 (no retries, the default) to {MAX_LLM_RETRIES} retries of a failed LLM request")
        _rule(isinstance(self.honour_retry_after, bool), "honour_retry_after", self.honour_retry_after, "use True or False")
        _rule(self.llm_backoff in BACKOFFS, "llm_backoff", self.llm_backoff, f"use one of {', '.join(BACKOFFS)}")
        _rule(_count(self.llm_backoff_ms) and 0 <= self.llm_backoff_ms <= 60_000, "llm_backoff_ms", self.llm_backoff_ms,
              "use 0 to 60000 milliseconds (the base wait of --llm-backoff)")

    def _check_kernel(self) -> None:
        """The kernel's own settings: its clients' token, its limits and
        timeouts, its faults and modes."""
        _rule(
            self.token is None or (isinstance(self.token, str) and 0 < len(self.token) <= 4096),
            "token",
            self.token,
            "use a non-empty string of at most 4096 characters, or leave it out to accept any token",
        )
        _rule(isinstance(self.workers, int) and 1 <= self.workers <= 1024, "workers", self.workers, "use 1 to 1024")
        _rule(isinstance(self.queue, int) and 0 <= self.queue <= 1_000_000, "queue", self.queue, "use 0 to 1000000")
        _rule(
            _number(self.dedup_window) and 0 <= self.dedup_window <= 86_400,
            "dedup_window",
            self.dedup_window,
            "use 0 (off) to 86400 seconds",
        )
        _rule(_number(self.llm_timeout) and 0 < self.llm_timeout <= 3600, "llm_timeout", self.llm_timeout, "use more than 0 and at most 3600 seconds")
        _rule(
            isinstance(self.max_parallel_tools, int) and 1 <= self.max_parallel_tools <= 256,
            "max_parallel_tools",
            self.max_parallel_tools,
            "use 1 to 256",
        )
        unknown = sorted(self.faults - FAULTS.keys())
        _rule(not unknown, "fault", ",".join(unknown), f"known faults: {', '.join(FAULTS)}")
        _rule(_number(self.auth_timeout) and 0 < self.auth_timeout <= 3600, "auth_timeout", self.auth_timeout, "use more than 0 and at most 3600 seconds")
        _rule(_number(self.tool_timeout) and 0 < self.tool_timeout <= 3600, "tool_timeout", self.tool_timeout, "use more than 0 and at most 3600 seconds")
        _rule(isinstance(self.max_steps, int) and 1 <= self.max_steps <= 100, "max_steps", self.max_steps, "use 1 to 100")
        _rule(
            isinstance(self.max_write_buffer, int) and 64 * 1024 <= self.max_write_buffer <= 1 << 30,
            "max_write_buffer",
            self.max_write_buffer,
            "use 65536 to 1073741824 bytes (it must hold a few frames of up to 1 MiB)",
        )
        _rule(isinstance(self.conn_backlog, int) and 1 <= self.conn_backlog <= 100_000, "conn_backlog", self.conn_backlog, "use 1 to 100000")
        _rule(isinstance(self.max_residents, int) and 0 <= self.max_residents <= 10_000, "max_residents", self.max_residents, "use 0 to 10000")
        _rule(_number(self.shutdown_grace) and 0 < self.shutdown_grace <= 600, "shutdown_grace", self.shutdown_grace, "use more than 0 and at most 600 seconds")
        _rule(isinstance(self.model, str) and bool(self.model), "model", self.model, "give a model name")
        _rule(self.batch in BATCH_MODES, "batch", self.batch, f"use one of {', '.join(BATCH_MODES)}")
        _rule(isinstance(self.terse, bool), "terse", self.terse, "use True or False")
        _rule(
            isinstance(self.delay_ms, int) and not isinstance(self.delay_ms, bool) and 0 <= self.delay_ms <= 600_000,
            "delay_ms",
            self.delay_ms,
            "use 0 (off) to 600000 milliseconds",
        )
        _rule(_count(self.session_turns) and 1 <= self.session_turns <= 100_000, "session_turns", self.session_turns, "use 1 to 100000")
        _rule(_count(self.max_sessions) and 1 <= self.max_sessions <= 10_000_000, "max_sessions", self.max_sessions, "use 1 to 10000000")

    def has(self, fault: str) -> bool:
        return fault in self.faults
