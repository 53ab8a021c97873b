"""The kernel: its connections, turns, and lifecycle.

``Kernel`` is an async context manager: ``start()`` binds the listener and is
ready to serve when it returns; ``aclose()`` is the graceful shutdown (stop
accepting, end running turns with an ``error`` frame, kill resident children
and the media worker, remove the socket file), idempotent and bounded by
``shutdown_grace``. No signal handlers here: that is ``__main__``'s business.
How frames travel (unix, tcp, ws) is ``transport``'s; a ``Connection`` is the
same protocol over any of them.
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import dataclasses
import itertools
import json
import logging
import os
import time
from typing import Any

from . import procs
from .convo import Assistant, Entry, Reply, Result, ToolCall, User
from .errors import ConfigError, LLMError, TurnError
from .llm import LLMClient
from .scheduler import Busy, Dedup, Job, Scheduler
from .sessions import Sessions
from .settings import MAX_FRAME, KernelSettings
from .tools import TOOLS, Toolbox
from .transport import Channel, Closed, FrameTooLarge, NotAFrame, listener_for

log = logging.getLogger("refkernel")

PROTOCOL_VERSION = 1
TERSE_TEXT = "done"
# the hide-llm-error fault's answer: no verdict line, nothing that says the LLM failed
HIDDEN_LLM_ERROR_TEXT = "I looked into it and everything is in order."
_encode = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def _valid_id(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, str) and 0 < len(v) <= 256


def _valid_session(v: Any) -> bool:
    return isinstance(v, str) and 0 < len(v) <= 256


def _brief(v: Any) -> str:
    """A client's bad value in an error message, without echoing a megabyte back."""
    r = repr(v)
    return r if len(r) <= 80 else f"a {type(v).__name__} of length {len(v) if hasattr(v, '__len__') else '?'}"


class Connection:
    """One client, over any transport. Frames go out through the channel's
    buffer; when that holds more than ``max_write_buffer`` bytes the client is
    not reading and is dropped, so a stalled reader costs bounded memory."""

    def __init__(self, kernel: "Kernel", channel: Channel, n: int) -> None:
        self.k = kernel
        self.n = n
        self.ch = channel
        self.authed = False
        self.closed = False
        self.current: Job | None = None  # the normal input this connection has in the scheduler
        self.backlog: collections.deque[Job] = collections.deque()
        self.active: set[Job] = set()

    # --- output -----------------------------------------------------------------

    def send(self, frame: dict[str, Any]) -> bool:
        if self.closed or self.ch.is_closing():
            return False
        # backslashreplace: a lone surrogate a client sent (legal in JSON text,
        # not in UTF-8) goes back as the JSON escape it came in as.
        self.ch.write(_encode(frame).encode("utf-8", "backslashreplace"))
        if self.ch.unsent() > self.k.s.max_write_buffer:
            self.k.counters["slow_readers"] += 1
            log.warning("connection %d is not reading (> %d bytes unsent): dropped", self.n, self.k.s.max_write_buffer)
            self.close(abort=True)
            return False
        return True

    def error(self, id_: Any, code: str, message: str) -> None:
        frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
        if id_ is not None:
            frame["id"] = id_
        self.send(frame)

    def close(self, abort: bool = False) -> None:
        if not self.closed:
            self.closed = True
            for job in list(self.backlog):
                job.state = "done"
            self.backlog.clear()
            for job in list(self.active):
                if job.state == "queued":
                    self.k.sched.remove(job)
                    self.active.discard(job)
                elif job.task is not None and not job.task.done():
                    job.cancel_reason = job.cancel_reason or "disconnect"
                    job.task.cancel()
        if abort:
            self.ch.abort()
        else:
            self.ch.close()  # sends what is buffered first

    # --- input ------------------------------------------------------------------

    def _parse(self, data: bytes) -> dict[str, Any] | None:
        try:
            frame = json.loads(data)
        except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nested too deep
            self.k.counters["bad_frames"] += 1
            self.error(None, "bad_json", f"the frame is not valid UTF-8 JSON ({exc}); send one JSON object per line (per text message on a WebSocket)")
            return None
        if not isinstance(frame, dict) or not isinstance(frame.get("type"), str):
            self.k.counters["bad_frames"] += 1
            self.error(None, "bad_frame", 'a frame must be a JSON object with a string "type" field')
            return None
        return frame

    async def _read(self) -> dict[str, Any] | None:
        """The next frame; None when it was bad (and has been answered)."""
        try:
            data = await self.ch.read()
        except NotAFrame as exc:
            self.k.counters["bad_frames"] += 1
            self.error(None, "bad_frame", str(exc))
            return None
        return self._parse(data)

    async def serve(self) -> None:
        try:
            try:
                async with asyncio.timeout(self.k.s.auth_timeout):
                    first = await self._read()
            except TimeoutError:
                self.k.counters["auth_timeouts"] += 1
                self.error(None, "auth_timeout", f"no auth frame within {self.k.s.auth_timeout:g} s (--auth-timeout); "
                           'send {"type":"auth","token":T} first')
                return
            if first is None or not self._auth(first):
                return
            while True:
                frame = await self._read()
                if frame is not None:
                    self._dispatch(frame)
        except FrameTooLarge:
            self.k.counters["bad_frames"] += 1
            self.error(None, "too_large", f"a frame is longer than {MAX_FRAME} bytes (the protocol limit); connection closed")
        except Closed:
            pass  # the client went away
        finally:
            self.close()

    def _auth(self, frame: dict[str, Any]) -> bool:
        if frame["type"] != "auth":
            self.k.counters["auth_failures"] += 1
            self.error(frame.get("id"), "auth_required", f'the first frame must be {{"type":"auth","token":T}}, got type {frame["type"]!r}; connection closed')
            return False
        token = frame.get("token")
        want = self.k.s.token
        if not isinstance(token, str) or (want is not None and not hmac.compare_digest(token.encode(), want.encode())):
            self.k.counters["auth_failures"] += 1
            self.error(None, "auth_failed", "wrong token; connection closed")
            return False
        self.authed = True
        self.send({"type": "response", "kind": "auth", "ok": True, "protocol": PROTOCOL_VERSION})
        return True

    def _dispatch(self, frame: dict[str, Any]) -> None:
        kind = frame["type"]
        if kind == "input":
            self._input(frame)
        elif kind == "stats":
            self.send(self.k.stats())
        elif kind == "auth":
            self.k.counters["bad_frames"] += 1
            self.error(None, "bad_frame", "this connection is already authenticated")
        else:
            self.k.counters["bad_frames"] += 1
            self.error(frame.get("id") if _valid_id(frame.get("id")) else None, "unknown_type",
                       f"unknown frame type {kind[:64]!r}; a client sends auth, input or stats")

    def _input(self, frame: dict[str, Any]) -> None:
        id_, text, prio = frame.get("id"), frame.get("text"), frame.get("priority", "normal")
        if not _valid_id(id_):
            self.k.counters["bad_frames"] += 1
            self.error(None, "bad_frame", f"input id {id_!r} is invalid: use an integer or a string of 1-256 characters")
            return
        if not isinstance(text, str) or not text:
            self.k.counters["bad_frames"] += 1
            self.error(id_, "bad_frame", "input text must be a non-empty string")
            return
        if prio not in ("normal", "interrupt"):
            self.k.counters["bad_frames"] += 1
            self.error(id_, "bad_frame", f"priority {prio!r} is invalid: use \"interrupt\" or leave it out")
            return
        session = frame.get("session")
        if "session" in frame and not _valid_session(session):
            self.k.counters["bad_frames"] += 1
            self.error(id_, "bad_frame", f"input session {_brief(session)} is invalid: use a string of 1-256 characters, or leave it out")
            return
        if self.k.stopping:
            self.error(id_, "shutdown", "the kernel is shutting down")
            return
        job = Job(conn=self, id=id_, text=text, interrupt=prio == "interrupt", session=session)
        if job.interrupt:
            self.k.admit(job)  # interrupts do not wait for this connection's turn either
        elif self.current is None:
            self._advance(job)
        elif len(self.backlog) >= self.k.s.conn_backlog:
            self.k.counters["rejected"] += 1
            self.error(id_, "busy", f"this connection already has {len(self.backlog)} inputs waiting (limit {self.k.s.conn_backlog})")
        else:
            job.state = "waiting"
            self.backlog.append(job)

    def _advance(self, job: Job | None = None) -> None:
        # One connection is served in order: its next input enters the
        # scheduler only when the previous one has finished.
        if job is not None and self.k.admit(job):
            self.current = job
            return
        while self.current is None and self.backlog and not self.closed:
            nxt = self.backlog.popleft()
            if self.k.admit(nxt):
                self.current = nxt

    def job_done(self, job: Job) -> None:
        self.active.discard(job)
        if job is self.current:
            self.current = None
            if not self.closed and not self.k.stopping:
                self._advance()


class Kernel:
    def __init__(self, settings: KernelSettings) -> None:
        self.s = settings
        self.counters: collections.Counter[str] = collections.Counter()
        self.sched = Scheduler(settings.workers, settings.queue, self._run_turn)
        self.dedup = Dedup(settings.dedup_window)
        self.sessions = Sessions(settings.session_turns, settings.max_sessions)
        self.llm = LLMClient(settings.llm_url, settings.model, settings.llm_timeout, ignore_index=settings.has("ignore-stream-index"),
                             api=settings.llm_api, api_key=settings.llm_api_key or "kstress", stream=settings.stream,
                             retries=settings.llm_retries, honour_retry_after=settings.honour_retry_after,
                             backoff=settings.llm_backoff, backoff_ms=settings.llm_backoff_ms, faults=settings.faults)
        self.residents = procs.Residents(settings.data_dir, settings.max_residents, leak=settings.has("leak-children"))
        self.media = procs.MediaWorker(settings.data_dir)
        self.tools = Toolbox(settings, self.residents, self.media, self.broadcast)
        self.conns: set[Connection] = set()
        self._handlers: set[asyncio.Task] = set()
        self.listener = listener_for(settings.listen, min(1.0, settings.shutdown_grace / 4))  # type: ignore[arg-type]
        self._conn_seq = 0
        self.stopping = False
        self._closing: asyncio.Task | None = None
        self.started = time.monotonic()

    # --- lifecycle --------------------------------------------------------------

    async def __aenter__(self) -> "Kernel":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    @property
    def address(self) -> str:
        """Where it listens, as the ready line names it (the real port, once bound)."""
        return self.listener.bound.ready_name

    async def start(self) -> "Kernel":
        try:
            self._prepare_data_dir()
            self.listener.prepare()
            await self.llm.start()
            self.sched.start()
            await self.listener.start(self._handle)
        except BaseException:
            await self.aclose()
            raise
        log.info("listening on %s (pid %d, workers %d, queue %d, batch %s, llm api %s, faults: %s)", self.address, os.getpid(),
                 self.s.workers, self.s.queue, self.s.batch, self.s.llm_api, ",".join(sorted(self.s.faults)) or "none")
        return self

    def _prepare_data_dir(self) -> None:
        assert self.s.data_dir is not None
        try:
            self.s.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"data_dir={str(self.s.data_dir)!r} cannot be created ({exc.strerror}); pass a writable directory") from None
        if not os.access(self.s.data_dir, os.W_OK | os.X_OK):
            raise ConfigError(f"data_dir={str(self.s.data_dir)!r} is not writable; pass a writable directory")

    async def aclose(self) -> None:
        if self._closing is None:
            self._closing = asyncio.ensure_future(self._shutdown())
        await asyncio.shield(self._closing)

    async def _shutdown(self) -> None:
        self.stopping = True
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(self.s.shutdown_grace):
                await self._graceful()
        except TimeoutError:
            log.warning("shutdown took longer than %g s: killing what is left", self.s.shutdown_grace)
        finally:
            self.residents.kill_now()
            self.media.kill_now()
            for conn in list(self.conns):
                conn.close(abort=True)
            await self.listener.aclose()
            await self.llm.aclose()
        log.info("stopped in %.2f s", time.monotonic() - t0)

    async def _graceful(self) -> None:
        grace = self.s.shutdown_grace
        await self.listener.stop_accepting()  # and the unix socket file is gone
        for job in self.sched.drain():
            job.conn.error(job.id, "shutdown", "the kernel is shutting down; the input was not run")
            job.conn.active.discard(job)
        for conn in list(self.conns):
            for job in conn.backlog:
                conn.error(job.id, "shutdown", "the kernel is shutting down; the input was not run")
            conn.backlog.clear()
        await self.sched.stop()
        running = [j.task for j in self.sched.running if j.task is not None]
        for job in list(self.sched.running):
            job.cancel_reason = "shutdown"
            if job.task is not None:
                job.task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        await asyncio.gather(self.residents.aclose(grace / 4), self.media.aclose(grace / 4))
        await self.llm.aclose()
        for conn in list(self.conns):
            conn.close()  # flushes the frames above, then closes
        if self._handlers:
            await asyncio.wait(list(self._handlers), timeout=min(1.0, grace / 4))

    # --- connections ------------------------------------------------------------

    async def _handle(self, channel: Channel) -> None:
        self._conn_seq += 1
        if self.stopping:
            channel.abort()
            return
        conn = Connection(self, channel, self._conn_seq)
        self.conns.add(conn)
        self.counters["connections_total"] += 1
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            await conn.serve()
            await channel.drained()
        finally:
            self.conns.discard(conn)
            if task is not None:
                self._handlers.discard(task)

    def broadcast(self, frame: dict[str, Any]) -> int:
        n = 0
        for conn in list(self.conns):
            if conn.authed and conn.send(frame):
                n += 1
        self.counters["notifies"] += 1
        return n

    def stats(self) -> dict[str, Any]:
        c, sc = self.counters, self.sched.counters
        return {
            "type": "stats",
            "executed": c["executed"],
            "rejected": c["rejected"],
            "queued": self.sched.queued,
            "running": len(self.sched.running),
            "peak_queued": self.sched.peak_queued,
            "suspended": sc["suspended"],
            "resumed": sc["resumed"],
            "preempted": sc["preempted"],
            "duplicates": c["duplicates"],
            "children": len(self.residents),
            "llm_state": self.llm.state,
            "failed": c["failed"],
            "abandoned": c["abandoned"],
            "tool_calls": c["tool_calls"],
            "connections": len(self.conns),
            "connections_total": c["connections_total"],
            "bad_frames": c["bad_frames"],
            "auth_failures": c["auth_failures"],
            "auth_timeouts": c["auth_timeouts"],
            "slow_readers": c["slow_readers"],
            "sessions": len(self.sessions),
            "session_evictions": self.sessions.evictions,
            "residents": self.residents.listing(),
            "workers": self.s.workers,
            "queue_capacity": self.s.queue,
            "faults": sorted(self.s.faults),
            "batch": self.s.batch,
            "terse": self.s.terse,
            "llm_api": self.s.llm_api,
            "pid": os.getpid(),
            "uptime_s": round(time.monotonic() - self.started, 3),
        }

    # --- turns ------------------------------------------------------------------

    def admit(self, job: Job) -> bool:
        """Dedup, then queue. True when the job will finish later (and then
        call ``conn.job_done``); False when it was answered here."""
        conn = job.conn
        if not self.s.has("no-dedup") and self.dedup.seen(job.text, job.session):
            self.counters["duplicates"] += 1
            job.state = "done"
            conn.send({"type": "response", "id": job.id, "text": "", "duplicate": True})
            return False
        try:
            self.sched.submit(job)
        except Busy:
            self.counters["rejected"] += 1
            job.state = "done"
            lane = "interrupt queue" if job.interrupt else "queue"
            conn.error(job.id, "busy", f"the {lane} is full ({self.s.queue} waiting, --queue); retry later")
            return False
        self.dedup.remember(job.text, job.session)
        conn.active.add(job)
        return True

    async def _run_turn(self, job: Job) -> None:
        conn = job.conn
        try:
            text = await self._turn(job)
        except TurnError as exc:
            self.counters["executed"] += 1
            self.counters["failed"] += 1
            log.info("turn %r failed: %s: %s", job.id, exc.code, exc)
            if isinstance(exc, LLMError) and self.s.has("hide-error-frames"):
                conn.send({"type": "response", "id": job.id, "text": ""})
            elif isinstance(exc, LLMError) and self.s.has("hide-llm-error"):
                # the fault: a plausible answer in place of the error, as a kernel with a "fallback reply" gives
                conn.send({"type": "response", "id": job.id, "text": HIDDEN_LLM_ERROR_TEXT})
            else:
                conn.error(job.id, exc.code, str(exc))
        except asyncio.CancelledError:
            if job.cancel_reason == "shutdown":
                conn.error(job.id, "shutdown", "the kernel is shutting down; the turn was stopped")
            self.counters["abandoned"] += 1
            raise
        except Exception as exc:
            self.counters["executed"] += 1
            self.counters["failed"] += 1
            log.exception("turn %r crashed", job.id)
            conn.error(job.id, "internal", f"the kernel failed on this input: {exc!r}")
        else:
            self.counters["executed"] += 1
            conn.send({"type": "response", "id": job.id, "text": TERSE_TEXT if self.s.terse else text})
        finally:
            conn.job_done(job)

    def _history_key(self, job: Job) -> Any:
        """Where the turn's session keeps its history; None: the input is on its own."""
        if job.session is None:
            return None
        if self.s.has("session-crosstalk"):
            return ("connection", job.conn.n)  # the fault: whatever session the input named
        return job.session

    def _request(self, prefix: list[Entry], steps: list[list[Entry]]) -> list[Entry]:
        """The conversation of the next LLM request: the prefix (session
        history, this turn's user input), then every earlier step's assistant
        reply with its tool calls and its results, in order."""
        if self.s.has("loop-drop-results") and len(steps) >= 2:
            steps = steps[-1:]  # the fault: only the latest step's exchange survives
        return [*prefix, *itertools.chain.from_iterable(steps)]

    def _step(self, reply: Reply, results: list[Result]) -> list[Entry]:
        """One step's exchange as the LLM gets it back: the model's reply with
        every call it made, then one result per call that has one."""
        calls = list(reply.tool_calls)
        if self.s.has("loop-reuse-ids"):
            # the fault: the kernel's own per-step numbering replaces the model's
            # ids (the one that pairs a call with its result, in every dialect)
            ours = {id(c): dataclasses.replace(c, id=f"call_{i}") for i, c in enumerate(calls)}
            calls = [ours[id(c)] for c in calls]
            results = [Result(ours.get(id(r.call), r.call), r.ok, r.content) for r in results]
        return [Assistant(reply.content, tuple(calls), reply.text_id), *results]

    async def _turn(self, job: Job) -> str:
        conn = job.conn
        key = self._history_key(job)
        user = User(job.text)
        prefix: list[Entry] | None = None  # built at the first request: the history completed by then
        steps: list[list[Entry]] = []  # each step's exchange apart: a request is the prefix, then every step

        def on_delta(text: str) -> None:
            if not self.s.terse:  # a terse kernel words its answer itself: the model's text stays inside
                conn.send({"type": "delta", "id": job.id, "text": text})

        def on_start(call: ToolCall) -> None:
            conn.send({"type": "tool", "id": job.id, "call_id": call.id, "name": call.name, "phase": "start"})

        def on_end(res: Result) -> None:
            conn.send({"type": "tool", "id": job.id, "call_id": res.call.id, "name": res.call.name, "phase": "end", "ok": res.ok})

        if self.s.delay_ms:
            # The kernel's own overhead, made known (--delay-ms): in the turn,
            # before any LLM request, not in the LLM client or a tool.
            await asyncio.sleep(self.s.delay_ms / 1000)
        for _ in range(self.s.max_steps):
            await self.sched.checkpoint(job)
            if prefix is None:
                # Read after the first checkpoint: an interrupt of the same
                # session that ran in this turn's place is part of its past.
                prefix = self.sessions.history(key) if key is not None else []
                prefix.append(user)
            reply = await self.llm.ask(self.s.system_prompt, self._request(prefix, steps), TOOLS, on_delta)
            if not reply.tool_calls:
                if key is not None:
                    # Before the response frame goes out: a client that has the
                    # answer finds the turn in the history, on any connection.
                    answer = Assistant(reply.content, (), reply.text_id)
                    kept = [] if self.s.has("drop-answers") else [answer]  # the fault: a history of questions and tool calls
                    self.sessions.record(key, [user, *itertools.chain.from_iterable(steps), *kept],
                                         last_only=self.s.has("drop-history"))
                return reply.content
            results = await self.tools.run_batch(reply.tool_calls, on_start, on_end)
            self.counters["tool_calls"] += len(results)
            steps.append(self._step(reply, results))
        raise TurnError("max_steps", f"the turn took more than {self.s.max_steps} LLM steps (--max-steps) without a final answer")
