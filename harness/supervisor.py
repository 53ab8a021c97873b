"""The detached sandbox: `kstress launch` starts a supervisor process that owns
the sandbox until `kstress stop`; later commands find it through a pointer file.

Parent/supervisor contract: the supervisor prints exactly one line on its
stdout, ``ready <state.json path>`` or ``error <exit code> <message>``, then
detaches its stdout. It runs until SIGTERM/SIGINT, then stops the target,
writes ``teardown.json`` (target exit code, orphans) into the run dir, tears
the sandbox down and removes the pointer.
"""

from __future__ import annotations

import asyncio
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

from .errors import KstressError, TargetError, UsageError
from .launcher import TEARDOWN_NAME, Launch, LaunchSettings, give_to_invoking_user, read_line
from .state import SandboxState, pointer_path, read_state



@dataclass(frozen=True)
class RunningSandbox:
    state: SandboxState

    @property
    def state_path(self) -> Path:
        return self.state.path

    @property
    def supervisor_alive(self) -> bool:
        return _alive(self.state.supervisor_pid)


def _alive(pid: Any) -> bool:
    if not isinstance(pid, int):
        return False
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def find_running(state: Path | None = None) -> RunningSandbox | None:
    """The sandbox named by --state, else by the pointer; None when none runs."""
    if state is None:
        ptr = pointer_path()
        try:
            state = Path(ptr.read_text().strip())
        except OSError:
            return None
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
    ptr = pointer_path()
    ptr.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = ptr.with_suffix(".tmp")
    tmp.write_text(str(state_path) + "\n")
    give_to_invoking_user(ptr.parent, tmp)
    os.replace(tmp, ptr)


def _clear_pointer(state_path: Path) -> None:
    ptr = pointer_path()
    try:
        if Path(ptr.read_text().strip()) == state_path:
            ptr.unlink()
    except OSError:
        pass


async def supervise(settings: LaunchSettings, out: Any) -> int:
    """Body of the supervisor process."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
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
    home = pointer_path().parent
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    # The supervisor outlives this command: its stderr goes to a log, never to
    # the terminal the user has moved on in.
    with open(home / "supervisor.log", "ab") as log:
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
    """SIGTERM the supervisor, wait for it, return its teardown record."""
    running = find_running(state)
    if running is None:
        raise UsageError("no running sandbox: nothing to stop (run scripts/launch.sh first)")
    pid = running.state.supervisor_pid
    run_dir = running.state.run_dir
    if running.supervisor_alive:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            psutil.Process(pid).wait(timeout_s)
        except psutil.NoSuchProcess:
            pass
        except psutil.TimeoutExpired:
            raise KstressError(f"supervisor {pid} did not stop within {timeout_s:.0f}s; its guardian will clean up when it is killed") from None
    else:
        _clear_pointer(running.state_path)
    try:
        return json.loads((run_dir / TEARDOWN_NAME).read_text())
    except (OSError, ValueError):
        return {"returncode": None, "orphans": [], "note": "the supervisor was gone; no teardown record"}
