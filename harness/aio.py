"""Small asyncio helpers every part of the harness shares."""

from __future__ import annotations

import asyncio
import contextvars
from typing import Any, Awaitable

from .errors import KstressError


async def finish_shielded(aw: Awaitable[Any]) -> Any:
    """Await ``aw`` to the end even when the caller is cancelled meanwhile,
    however often, then re-raise the cancellation (trio's shielded cleanup in
    asyncio terms). A plain ``asyncio.shield`` gives up waiting at the first
    cancel, and the cleanup is then abandoned when the loop shuts down."""
    task = asyncio.ensure_future(aw)
    cancelled = False
    while True:
        try:
            result = await asyncio.shield(task)
            break
        except asyncio.CancelledError:
            if task.done():
                raise
            cancelled = True
    if cancelled:
        raise asyncio.CancelledError()
    return result


def first_error(exc: BaseException) -> BaseException:
    """The exception that matters in what a TaskGroup raised: the first
    KstressError inside the (nested) group, else the first exception, so one
    connection's fatal error surfaces as itself, not as an ExceptionGroup."""
    if not isinstance(exc, BaseExceptionGroup):
        return exc
    leaves: list[BaseException] = []

    def walk(e: BaseException) -> None:
        if isinstance(e, BaseExceptionGroup):
            for sub in e.exceptions:
                walk(sub)
        else:
            leaves.append(e)

    walk(exc)
    for e in leaves:
        if isinstance(e, KstressError):
            return e
    for e in leaves:
        if not isinstance(e, asyncio.CancelledError):
            return e
    return leaves[0] if leaves else exc


# Hurry: a second interrupt asks every cleanup to skip its grace periods (stop
# signal -> grace -> SIGKILL becomes SIGKILL at once). The CLI edge opens a
# scope per command; code outside one never hurries.
_HURRY: contextvars.ContextVar[asyncio.Event | None] = contextvars.ContextVar("kstress_hurry", default=None)


def start_hurry_scope() -> asyncio.Event:
    """Open the scope in the command's task; the returned event is what a
    signal sets. A signal's callback does not run in that task's context (a
    handler installed with signal.signal runs in whatever context the loop is
    in, usually none), so it must hold the event itself: looking it up there
    found no scope, and the second interrupt hurried nothing (issue 22 item 12)."""
    ev = asyncio.Event()
    _HURRY.set(ev)
    return ev


def hurried() -> bool:
    ev = _HURRY.get()
    return ev is not None and ev.is_set()


def _retrieve(task: "asyncio.Future[Any]") -> None:
    if not task.cancelled():
        task.exception()


async def grace(aw: Awaitable[Any], seconds: float) -> bool:
    """Await ``aw`` for up to ``seconds`` -- no longer than until the run is
    hurried. True when it finished in time; else it is cancelled. Its
    exception, if any, is dropped: a close that fails because the peer died
    (BrokenPipeError) was a "Task exception was never retrieved" traceback."""
    task = asyncio.ensure_future(aw)
    task.add_done_callback(_retrieve)
    ev = _HURRY.get()
    waiter = asyncio.ensure_future(ev.wait()) if ev is not None else None
    try:
        await asyncio.wait({task, waiter} if waiter is not None else {task}, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if waiter is not None:
            waiter.cancel()
        if not task.done():
            task.cancel()
    return task.done() and not task.cancelled()
