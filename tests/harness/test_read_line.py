"""read_line: the ready-line reader the supervisor launch, the bench and the mock CLI tests share."""

import subprocess

from harness.sandbox.launcher import read_line


def _run(argv: list[str], timeout_s: float, **kw) -> str | None:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, **kw)
    try:
        return read_line(p, timeout_s)
    finally:
        p.kill()
        p.wait()
        p.stdout.close()


def test_a_line_an_exit_and_a_timeout_are_told_apart():
    assert _run(["echo", "ready x"], 10, text=True) == "ready x\n"
    assert _run(["true"], 10) == ""
    assert _run(["sleep", "30"], 0.2) is None
    # half a line never blocks past the deadline
    assert _run(["sh", "-c", "printf part; exec sleep 30"], 0.3) is None
