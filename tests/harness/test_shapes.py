"""Load shapes: durations, stages, the ramp's level and inverse cumulative
rate, open-model arrivals (constant and Poisson), the closed-model controller
following a ramp, and the settings rules that tie --duration, --stage,
--warmup and --arrival together."""

from __future__ import annotations

import asyncio
import time

import pytest

from harness.errors import UsageError
from harness.scenarios.sessions import SessionsSettings
from harness.scenarios.stress import StressSettings, stress_checks, summarize_stress
from harness.load.shapes import Ramp, Stage, arrival_offsets, follow_level, parse_duration, parse_stage, parse_stages

pytestmark = pytest.mark.fast


@pytest.mark.parametrize("text,want", [("500ms", 0.5), ("30s", 30.0), ("5m", 300.0), ("1h", 3600.0), ("2", 2.0), ("1.5s", 1.5), (" 10 s ", 10.0)])
def test_durations(text, want):
    assert parse_duration(text) == want


@pytest.mark.parametrize("text", ["", "s", "3q", "-1s", "1.2.3s", "5 min"])
def test_bad_durations_name_the_value_and_the_forms(text):
    with pytest.raises(UsageError) as e:
        parse_duration(text, "--warmup")
    assert f"--warmup {text!r}" in str(e.value) and "500ms, 30s, 5m" in str(e.value)


def test_stages_parse_and_bad_ones_say_why():
    assert parse_stage("30s:64", integer=True) == Stage(30.0, 64.0)
    assert parse_stage("500ms:2.5") == Stage(0.5, 2.5)
    for text, words in [("64", "DURATION:TARGET"), ("30s:x", "whole number of connections"), ("30s:2.5", "whole number"),
                        ("30s:-1", "from 0 to"), ("xs:4", "not a duration")]:
        with pytest.raises(UsageError) as e:
            parse_stage(text, integer=True)
        assert repr(text) in str(e.value) and words in str(e.value), str(e.value)
    with pytest.raises(UsageError, match="take no time"):
        parse_stages(["0s:4"], integer=True)
    with pytest.raises(UsageError, match="every stage's target is 0"):
        parse_stages(["5s:0"], integer=True)


def test_the_ramp_is_piecewise_linear_and_a_zero_stage_jumps():
    r = Ramp(parse_stages(["10s:10", "0s:50", "10s:50", "10s:0"], integer=True))
    assert [r.level(t) for t in (0, 5, 9.999, 10, 15, 25, 30, 99)] == pytest.approx([0, 5, 9.999, 50, 50, 25, 0, 0])
    assert r.total_s == 30


def test_constant_arrivals_follow_the_ramp_exactly():
    # 0 -> 10/s over 10 s: 50 inputs, the i-th when the area under the ramp reaches i
    xs = list(arrival_offsets(Ramp(parse_stages(["10s:10"], integer=False)), "constant", 1, 10_000))
    assert len(xs) == 50 and xs[0] == 0 and xs[2] == pytest.approx(2.0) and xs == sorted(xs)
    # a flat rate is today's schedule: i / rate
    assert list(arrival_offsets(Ramp.constant(4, 2.0), "constant", 1, 100)) == [i / 4 for i in range(8)]
    # the bound holds whatever the ramp
    assert len(list(arrival_offsets(Ramp.constant(1000, 60), "constant", 1, 123))) == 123


def test_poisson_arrivals_have_the_rate_and_exponential_gaps():
    xs = list(arrival_offsets(Ramp.constant(200, 50), "poisson", 7, 100_000))
    assert abs(len(xs) - 10_000) < 400  # 4 sigma of a Poisson count of 10,000
    gaps = [b - a for a, b in zip(xs, xs[1:])]
    mean = sum(gaps) / len(gaps)
    assert mean == pytest.approx(1 / 200, rel=0.05)
    # exponential: the coefficient of variation is 1 (a constant stream's is 0)
    sd = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert sd / mean == pytest.approx(1.0, abs=0.06)
    # the same seed, the same stream; a ramp shapes it as it does the constant one
    assert xs[:50] == list(arrival_offsets(Ramp.constant(200, 50), "poisson", 7, 50))
    ramp = list(arrival_offsets(Ramp(parse_stages(["20s:100"], integer=False)), "poisson", 3, 100_000))
    first, second = sum(1 for t in ramp if t < 10), sum(1 for t in ramp if t >= 10)
    assert abs(first - 250) < 70 and abs(second - 750) < 120  # areas 250 and 750


def test_follow_level_keeps_the_ramps_connections_and_sends_the_extra_away():
    seen: list[tuple[float, int]] = []
    running = 0

    async def worker(wid: int, keep_going) -> None:
        nonlocal running
        running += 1
        try:
            while keep_going():
                seen.append((time.monotonic(), running))
                await asyncio.sleep(0.01)  # one "turn"
        finally:
            running -= 1

    ramp = Ramp(parse_stages(["0s:6", "0.4s:6", "0.4s:2"], integer=True))
    t0 = time.monotonic()
    started = asyncio.run(follow_level(ramp, t0, worker, tick_s=0.02))
    assert started == 6 and running == 0
    early = [n for t, n in seen if t - t0 < 0.35]
    late = [n for t, n in seen if t - t0 > 0.75]
    assert max(early) == 6 and late and max(late) <= 3
    assert all(t - t0 < 0.8 + 0.05 for t, _ in seen)  # nothing sent once the ramp ended


def test_settings_tie_the_shape_flags_together():
    assert StressSettings(duration_s=2.0).per_conn is None and StressSettings().per_conn == 10
    assert StressSettings(duration_s=2.0, inputs=3).per_conn == 3
    assert StressSettings(stages=("1s:4",)).total_cap == 1_000_000
    bad = [
        (dict(warmup_s=1.0), "needs a timed run"),
        (dict(duration_s=2.0, warmup_s=2.0), "shorter than the run"),
        (dict(stages=("5s:4",), duration_s=2.0), "the stages set the run's length"),
        (dict(arrival="poisson"), "add --rate"),
        (dict(stages=("5s:2.5",)), "whole number of connections"),
        (dict(duration_s=0.0), "--duration 0 s is invalid"),
    ]
    for kw, words in bad:
        with pytest.raises(UsageError, match=words):
            StressSettings(**kw)
    StressSettings(rate=5.0, stages=("5s:2.5",), arrival="poisson", warmup_s=1.0)
    with pytest.raises(UsageError, match="needs a timed run"):
        SessionsSettings(warmup_s=1.0)
    assert SessionsSettings(stages=("1s:40", "1s:8")).connections == 10


def _row(i, passed=True, warmup=False):
    r = {"kind": "load", "marker": "", "passed": passed, "latency_s": 0.01 * (i + 1), "t_rel": i * 0.1,
         "failures": [] if passed else ["count 1/4"]}
    if warmup:
        r["warmup"] = True
    return r


def test_warmup_turns_are_out_of_the_statistics_but_a_failed_one_fails_the_run():
    rows = [_row(i, warmup=True) for i in range(5)] + [_row(i) for i in range(5, 10)]
    s = summarize_stress(rows, {}, {"warmup_s": 0.5})
    assert s["attempted"] == 5 and s["latency_s"]["n"] == 5 and s["latency_s"]["max"] == pytest.approx(0.1)
    assert s["warmup"]["attempted"] == 5 and stress_checks(s)[0].passed
    rows[0] = _row(0, passed=False, warmup=True)
    s = summarize_stress(rows, {}, {"warmup_s": 0.5})
    check = stress_checks(s)[0]
    assert s["passed"] == s["attempted"] == 5 and not check.passed and "warm-up 4/5 passed" in check.detail and "count" in check.detail


def test_the_stage_table_splits_turns_by_send_time():
    rows = [_row(i) for i in range(30)]  # sent at 0.0 .. 2.9 s
    s = summarize_stress(rows, {"load_t0_rel": 0.0}, {"stages": ("1s:4", "2s:8")})
    st = s["stages"]
    assert [r["attempted"] for r in st] == [10, 20] and [r["target"] for r in st] == [4, 8]
    assert st[0]["latency_s"]["p50"] == pytest.approx(0.05) and st[1]["errors"] == {}


def test_the_readme_ramp_example_measures_part_of_its_ramp():
    # it was --stage 30s:64 --stage 2m:64 --warmup 30s: the whole ramp inside the warm-up, so "a ramp
    # with a service level" judged only the hold (issue 22 item 16); warm-up has no default (load-shapes.md)
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    [line] = [ln for ln in readme.splitlines() if "scripts/stress.py" in ln and "--stage" in ln]
    words = shlex.split(line.partition("#")[0])
    stages = parse_stages([words[i + 1] for i, w in enumerate(words) if w == "--stage"], integer=True)
    warmup = parse_duration(words[words.index("--warmup") + 1], "--warmup")
    assert "--threshold" in words and "ramp" in line.partition("#")[2]
    assert stages[0].target > 0 and 0 < warmup < stages[0].duration_s, (warmup, stages[0])
    StressSettings(stages=tuple(words[i + 1] for i, w in enumerate(words) if w == "--stage"), warmup_s=warmup)  # a run the CLI accepts
