"""The detached sandbox: `kstress launch` starts a supervisor process that owns
the sandbox until `kstress stop`; later commands find it through a pointer file.

Parent/supervisor contract: the supervisor prints exactly one line on its
stdout, ``ready <state.json path>`` or ``error <exit code> <message>``, then
detaches its stdout. It runs until SIGTERM/SIGINT (a second one skips the
grace periods), then stops the target, writes ``teardown.json`` (target exit
code, orphans) into the run dir, tears the sandbox down and removes the pointer.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from ..aio import start_hurry_scope
from ..errors import KstressError, TargetError, UsageError
from .launcher import TEARDOWN_NAME, Launch, LaunchSettings, give_to_invoking_user, read_line
from .state import SandboxState, open_nofollow, pointer_path, read_nofollow, read_state, secure_home



@dataclass(frozen=True)
class RunningSandbox:
    state: SandboxState

    @property
    def state_path(self) -> Path:
        return self.state.path

    @property
    def supervisor_alive(self) -> bool:
        return self.supervisor() is not None

    def supervisor(self) -> psutil.Process | None:
        """The supervisor process that launched this sandbox -- the recorded
        pid, only while its start time (and command line) still match: after
        pid reuse, or in a planted state file, that pid is someone else."""
        return identify(self.state.supervisor_pid, self.state.supervisor_started, self.state.supervisor_cmdline)


def identify(pid: Any, started: float | None, cmdline: tuple[str, ...] = ()) -> psutil.Process | None:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return None
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return None
        if started is None or abs(p.create_time() - started) > 0.5:
            return None  # no identity recorded, or not the process that wrote it
        if cmdline and tuple(p.cmdline()) != cmdline:
            return None
        return p
    except psutil.Error:
        return None


def find_running(state: Path | None = None) -> RunningSandbox | None:
    """The sandbox named by --state, else by the pointer; None when none runs."""
    if state is None:
        ptr = secure_home(create=False) / "current"
        try:
            state = Path(read_nofollow(ptr).strip())
        except FileNotFoundError:
            return None
        except OSError as exc:
            why = "a symlink, which kstress does not follow" if exc.errno == errno.ELOOP else exc.strerror
            raise UsageError(f"pointer {ptr}: cannot read it ({why}); remove it (rm {ptr})") from None
        if not state.exists():
            return None
    return RunningSandbox(read_state(state))


def require_running(state: Path | None = None) -> RunningSandbox:
    running = find_running(state)
    if running is None or not running.supervisor_alive:
        where = f"state file {state}" if state is not None else f"pointer {pointer_path()}"
        raise UsageError(
            f"no running sandbox ({where} names none that is alive): run scripts/launch.sh first, "
            "or pass --launch to start one for this run only (or --socket PATH / --state FILE)"
        )
    return running


def _write_pointer(state_path: Path) -> None:
    ptr = secure_home() / "current"
    tmp = ptr.with_suffix(".tmp")
    try:
        os.unlink(tmp)  # never write through whatever was planted there
    except FileNotFoundError:
        pass
    fd = open_nofollow(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "w") as f:
        f.write(str(state_path) + "\n")
    give_to_invoking_user(tmp)
    os.replace(tmp, ptr)


def _clear_pointer(state_path: Path) -> None:
    ptr = pointer_path()
    try:
        if Path(read_nofollow(ptr).strip()) == state_path:
            ptr.unlink()
    except OSError:
        pass


async def supervise(settings: LaunchSettings, out: Any) -> int:
    """Body of the supervisor process."""
    stop = asyncio.Event()
    hurry = start_hurry_scope()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        # the first stops; a second (`stop` again, a second Ctrl-C) skips the
        # grace periods, as kstress's own second signal does (issue 22 item 12)
        (hurry if stop.is_set() else stop).set()

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, on_signal)
    launch = Launch(settings)
    ready = False
    try:
        async with launch as run:
            ready = True
            _write_pointer(run.state_path)
            out.write(f"ready {run.state_path}\n")
            out.flush()
            _detach_stdout()
            try:
                assert run.target_proc is not None and run.mock_proc is not None
                died = asyncio.ensure_future(run.target_proc.wait())
                mock_died = asyncio.ensure_future(run.mock_proc.wait())
                stopping = asyncio.ensure_future(stop.wait())
                done, _ = await asyncio.wait({died, mock_died, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not stop.is_set():
                    # the harness's side failing is not the kernel's: say which died
                    if mock_died in done:
                        run.write_state(status="mock_died", mock_returncode=run.mock_proc.returncode, died_at=time.time())
                    else:
                        run.write_state(status="target_died", returncode=run.target_proc.returncode, died_at=time.time())
                    await stopping
                for f in (died, mock_died, stopping):
                    f.cancel()
                exit_ = await run.stop_target()
                teardown = {
                    "returncode": exit_.returncode,
                    "signalled": exit_.signalled,
                    "orphans": exit_.orphans,
                    "ended": time.time(),
                }
                (run.run_dir / TEARDOWN_NAME).write_text(json.dumps(teardown, indent=2))
                run.write_state(status="stopped", **{k: v for k, v in teardown.items() if k != "ended"})
            finally:
                _clear_pointer(run.state_path)
        return 0
    except KstressError as exc:
        if not ready:
            launch.remove_run_dir()  # a sandbox that never came up keeps nothing worth its directory
        out.write(f"error {exc.exit_code} {' | '.join(str(exc).splitlines())}\n")
        out.flush()
        return exc.exit_code


def _detach_stdout() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)


def start_detached(argv: list[str], timeout_s: float) -> tuple[Path, dict[str, Any]]:
    """Start the supervisor in its own session and wait for its one line."""
    running = find_running()
    if running is not None and running.supervisor_alive:
        raise UsageError(
            f"a sandbox is already running (state {running.state_path}, supervisor pid "
            f"{running.state.supervisor_pid}); stop it first with scripts/launch.sh stop"
        )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[1]), env.get("PYTHONPATH", "")]))
    home = secure_home()
    # The supervisor outlives this command: its stderr goes to a log, never to
    # the terminal the user has moved on in. Not through a planted symlink.
    try:
        fd = open_nofollow(home / "supervisor.log", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    except OSError as exc:
        raise UsageError(f"{home / 'supervisor.log'}: cannot open it ({'a symlink' if exc.errno == errno.ELOOP else exc.strerror}); remove it") from None
    with os.fdopen(fd, "ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness", "supervise", *argv],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            env=env,
            text=True,
        )
    assert proc.stdout is not None
    line = read_line(proc, timeout_s)
    proc.stdout.close()
    if line == "":
        line = f"error 4 supervisor exited with code {proc.wait()} before it was ready"
    if line is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise TargetError(f"the sandbox did not become ready within {timeout_s:.0f}s (supervisor pid {proc.pid}); it was stopped")
    if line.startswith("ready "):
        state_path = Path(line.split(" ", 1)[1].strip())
        return state_path, read_state(state_path).raw
    proc.wait(30)
    if line.startswith("error "):
        _, code, message = (line.rstrip("\n").split(" ", 2) + ["", ""])[:3]
        exc: KstressError = TargetError(message) if code == "3" else UsageError(message) if code == "2" else KstressError(message)
        raise exc
    raise KstressError(f"the supervisor exited without a ready line (exit {proc.returncode}): {line!r}")


def stop_running(state: Path | None, timeout_s: float = 60.0) -> dict[str, Any]:
    """SIGTERM the supervisor -- only the process that launched the sandbox,
    checked by pid, start time and command line -- wait for it, and return its
    teardown record. When the supervisor is gone the record says so, with
    ``checked: False``: its guardian cleaned the namespace, but nobody could
    look for orphans."""
    running = find_running(state)
    if running is None:
        raise UsageError("no running sandbox: nothing to stop (run scripts/launch.sh first)")
    s = running.state
    sup = running.supervisor()
    if sup is None:
        _clear_pointer(running.state_path)
        try:
            record = json.loads((s.run_dir / TEARDOWN_NAME).read_text())
            return {**record, "checked": True, "note": "already stopped"}
        except (OSError, ValueError):
            pass
        who = f"pid {s.supervisor_pid}" if s.supervisor_pid else "no pid"
        why = "is not running" if not _pid_exists(s.supervisor_pid) else "is another process now (its start time or command line differ): it was not signalled"
        return {
            "returncode": None, "orphans": [], "checked": False,
            "note": f"the supervisor ({who}) {why}; its guardian cleaned the namespace, but no orphan check could run",
        }
    try:
        sup.send_signal(signal.SIGTERM)
        sup.wait(timeout_s)
    except psutil.NoSuchProcess:
        pass
    except psutil.TimeoutExpired:
        raise KstressError(f"supervisor {sup.pid} did not stop within {timeout_s:.0f}s; its guardian will clean up when it is killed") from None
    try:
        return {**json.loads((s.run_dir / TEARDOWN_NAME).read_text()), "checked": True}
    except (OSError, ValueError):
        return {"returncode": None, "orphans": [], "checked": False, "note": "the supervisor stopped without writing its teardown record; no orphan check could run"}


def _pid_exists(pid: Any) -> bool:
    return isinstance(pid, int) and pid > 0 and psutil.pid_exists(pid)
