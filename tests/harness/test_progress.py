"""The live progress line: on a TTY only, never with --quiet."""

import io

from harness.scenarios.common import Progress


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


async def test_progress_line_on_a_tty():
    out = Tty()
    p = Progress(10, stream=out)
    p.start()
    p.add(True, 0.120)
    p.add(False, None)
    p.draw()
    await p.stop()
    text = out.getvalue()
    assert "2/10 done" in text and "pass 50.0%" in text and "p50 120ms" in text


async def test_progress_is_silent_when_quiet_or_not_a_tty():
    for stream, quiet in ((Tty(), True), (io.StringIO(), False)):
        p = Progress(10, quiet=quiet, stream=stream)
        p.start()
        p.add(True, 0.1)
        p.draw()
        await p.stop()
        assert stream.getvalue() == ""
