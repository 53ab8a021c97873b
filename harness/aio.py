"""Small asyncio helpers every part of the harness shares."""

from __future__ import annotations

import asyncio
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
