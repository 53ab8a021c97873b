"""The live progress line: on a TTY only, never with --quiet."""

import io

from harness.scenarios.runner import Progress


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


def test_progress_p50_covers_the_whole_run_in_bounded_memory():
    import random

    from harness.results.stats import percentile

    rng = random.Random(3)
    xs = [rng.lognormvariate(-2, 0.5) for _ in range(20000)]
    p = Progress(len(xs), stream=Tty())
    for x in xs:
        p.add(True, x)
    # the first half of the run counts as much as the last: not a recent window
    assert p.latencies.n == len(xs)
    assert len(p.latencies.counts) < 1000
    shown = float(p.line().split("p50 ")[1].split("ms")[0]) / 1000
    assert abs(shown - percentile(xs, 50)) <= 0.011 * percentile(xs, 50) + 0.0005
