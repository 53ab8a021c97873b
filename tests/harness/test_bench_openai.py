"""bench/openai_client.py (issue 23 item 7, the OpenAI-compatible drivers'
cost per turn): its checks before measuring pass on its instant server and
fail on one that misbehaves, and the script runs end to end (a few turns: no
number is asserted, the machine's load decides those)."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "openai_client.py"
sys.path.insert(0, str(BENCH.parent))

import openai_client as bench  # noqa: E402


@pytest.mark.parametrize("proto", ["chat", "responses"])
def test_streams_are_ones_the_openai_sdk_accepts(proto: str) -> None:
    bench.check_shapes(proto)


def test_a_stream_the_sdk_refuses_fails_the_shape_check(monkeypatch: pytest.MonkeyPatch) -> None:
    # the bad behaviour: a delta event without the logprobs the API sends
    kind, raw = bench.RESPONSES_EVENTS[4]
    assert kind == "response.output_text.delta"
    ev = orjson.loads(raw)
    del ev["logprobs"]
    monkeypatch.setattr(bench, "RESPONSES_EVENTS", [*bench.RESPONSES_EVENTS[:4], (kind, orjson.dumps(ev)), *bench.RESPONSES_EVENTS[5:]])
    with pytest.raises(SystemExit, match="responses stream has an event the openai SDK refuses"):
        bench.check_shapes("responses")


@pytest.mark.parametrize("proto", ["chat", "responses"])
async def test_checks_pass_on_the_instant_server(proto: str) -> None:
    runner, base = await bench.instant()
    try:
        await bench.ours(proto, base, 1, 1, check=True)
        await bench.bare(proto, base, 1, 1, check=True)
    finally:
        await runner.cleanup()


def _without(proto: str, drop: bytes) -> bytes:
    """The instant stream with every event containing ``drop`` left out."""
    stream = bench.PROTOCOLS[proto][1]
    return b"".join(e + b"\n\n" for e in stream.split(b"\n\n") if e and drop not in e)


@pytest.mark.parametrize(
    ("proto", "drop", "why"),
    [
        # no end: the driver names the turn stream_cut, not a response
        ("chat", b"[DONE]", "stream_cut"),
        ("responses", b"response.completed", "stream_cut"),
        # a delta lost: the turn ends, but the answer is not the one sent
        ("chat", b'"content":' + orjson.dumps(bench.DELTAS[3]), "the driver assembled"),
        ("responses", b'"delta":' + orjson.dumps(bench.DELTAS[3]), "the driver assembled"),
    ],
)
async def test_the_driver_check_fails_on_a_broken_stream(proto: str, drop: bytes, why: str) -> None:
    broken = _without(proto, drop)
    assert broken != bench.PROTOCOLS[proto][1]
    runner, base = await bench.instant({proto: broken})
    try:
        with pytest.raises(AssertionError, match=why):
            await bench.ours(proto, base, 1, 1, check=True)
        # the bare client reads bytes: it sees a short stream as short
        with pytest.raises(AssertionError, match="the bare client read"):
            await bench.bare(proto, base, 1, 1, check=True)
    finally:
        await runner.cleanup()


async def test_the_bench_runs_end_to_end(capsys: pytest.CaptureFixture[str]) -> None:
    rc = await bench.main(argparse.Namespace(protocol="both", conns=2, turns=3, rounds=2, no_parse=True))
    out = capsys.readouterr().out
    assert rc == 0
    for driver in ("openai-chat", "openai-responses"):
        assert f"{driver} (" in out
    assert out.count("ratio bare/ours (median):") == 2


@pytest.mark.parametrize(("args", "said"), [(["--rounds", "0"], "--rounds 0: must be at least 2"), (["--turns", "0"], "--turns 0: must be at least 1")])
def test_a_bad_count_is_a_usage_error(args: list[str], said: str) -> None:
    done = subprocess.run([sys.executable, str(BENCH), "--protocol", "chat", "--conns", "1", "--turns", "1", "--no-parse", *args],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and said in done.stderr, (done.returncode, done.stderr[-500:])
