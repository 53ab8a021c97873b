"""The process's edge: what SIGINT, SIGTERM and SIGHUP do, from the first
instruction of `kstress` to its last. Only the entry points use this module
(`harness/__main__.py`, the scripts); library code installs no handlers.

    before a run      a signal ends the command at once: exit 130, nothing to write
                      (no "Aborted!", no KeyboardInterrupt traceback from an import)
    during a run      the first cancels the run: it stops sending, cleans up, writes
                      its partial results and exits 130; the second (and any later
                      one) hurries the cleanup -- grace periods are skipped -- but the
                      results are still written and the exit is still 130
    after the run     the results are written and the exit code decided: a late
                      signal changes neither (run.json and the exit code agree)

SIGHUP (a closed terminal or ssh session) is treated like SIGTERM.
"""

from __future__ import annotations

# Only `signal` at import: this module is imported first, and every import
# before the handlers are in place is a window where a Ctrl-C gives a traceback
# (asyncio alone takes ~50 ms). The annotations are never evaluated.
import signal

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupt(BaseException):
    """A signal before any run started. A BaseException, so that click (which
    turns KeyboardInterrupt into "Aborted!", exit 1) lets it through."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def interrupted(exc: Interrupt) -> None:
    """How a command ends on a signal before its run started."""
    import sys

    sys.stderr.write(f"kstress: interrupted ({exc})\n")
    sys.exit(130)


class Edge:
    def __init__(self) -> None:
        self.phase = "start"  # start | run | done
        self.signals = 0
        self._task = None  # the running command's asyncio task
        self._loop = None
        self._hurry = None  # the run's hurry event (harness/aio.py), set by the second signal
        self._installed = False

    def install(self) -> None:
        """First thing an entry point does."""
        for sig in SIGNALS:
            signal.signal(sig, self._handler)
        self._installed = True

    def _handler(self, signum: int, frame: object) -> None:
        self.signals += 1
        if self.phase == "start":
            raise Interrupt(signum)
        if self.phase == "run" and self._loop is not None:
            self._loop.call_soon_threadsafe(self._in_loop)
        # done: nothing changes any more

    def _in_loop(self) -> None:
        if self.phase != "run":
            return
        if self.signals <= 1 and self._task is not None:
            self._task.cancel()
        elif self._hurry is not None:
            self._hurry.set()

    def run(self, make: Callable[[], Awaitable[Any]]) -> Any:  # noqa: F821
        """Run one async command under this edge."""
        import asyncio

        async def main() -> Any:  # noqa: F821
            from ..aio import start_hurry_scope

            self._hurry = start_hurry_scope()
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
            if not self._installed:  # used as a library: the asyncio way, for this run only
                for sig in SIGNALS:
                    self._loop.add_signal_handler(sig, self._handler, sig, None)
            self.phase = "run"
            try:
                return await make()
            finally:
                self.phase = "done"
                if not self._installed:
                    for sig in SIGNALS:
                        self._loop.remove_signal_handler(sig)

        return asyncio.run(main())


EDGE = Edge()
