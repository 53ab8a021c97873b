"""Several kernels at once, without starting any: the load's split by weight
(largest remainder, interleaved), the kernels' names, the flags as the
commands parse them (bad ones exit 2 naming the rule and the fix), and the
per-kernel summary, checks and report rows from hand-made turn rows."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cli import commands as kcli
from harness.errors import UsageError
from harness.load.kernels import check_split, check_weights, command_name, schedule, split, unique_names
from harness.scenarios.runner import orphan_checks
from harness.scenarios import REGISTRY
from harness.scenarios.stress import render_stress, stress_checks, summarize_stress


@pytest.mark.parametrize("n, weights, want", [
    (8, (3, 1), [6, 2]),
    (10, (1, 1, 1), [4, 3, 3]),  # the tie goes to the earlier kernel
    (7, (1, 1), [4, 3]),
    (5, (2, 2, 1), [2, 2, 1]),
    (100, (0.5, 0.25, 0.25), [50, 25, 25]),
    (3, (1, 1, 1, 1), [1, 1, 1, 0]),
])
def test_split_is_largest_remainder(n, weights, want):
    assert split(n, weights) == want
    assert sum(split(n, weights)) == n


@pytest.mark.parametrize("n", [1, 2, 7, 31, 100])
@pytest.mark.parametrize("weights", [(1, 1), (3, 1), (1, 2, 3), (0.1, 10)])
def test_every_share_is_its_quota_rounded_and_schedule_gives_exactly_the_shares(n, weights):
    shares = split(n, weights)
    for s, w in zip(shares, weights):
        q = n * w / sum(weights)
        assert q - 1 < s < q + 1
    order = schedule(n, weights)
    assert len(order) == n and [order.count(k) for k in range(len(weights))] == shares


def test_schedule_interleaves_instead_of_blocks():
    # an open-model rate reaches both kernels all along the run, not one after the other
    order = schedule(8, (3, 1))
    assert order == [0, 0, 1, 0, 0, 0, 1, 0]
    assert schedule(6, (1, 1)) == [0, 1, 0, 1, 0, 1]
    # every prefix is within one item of its share
    order = schedule(100, (1, 2, 3))
    for i in range(1, 101):
        for k, w in enumerate((1, 2, 3)):
            assert abs(order[:i].count(k) - i * w / 6) < 1 + 1e-9


def test_names_from_the_binary_and_duplicates_disambiguated():
    assert command_name("refkernel --fault first-tool-only") == "refkernel"
    assert command_name("/opt/k/bin/mykernel -v") == "mykernel"
    assert unique_names(["refkernel", "refkernel", "other", "refkernel"]) == ["refkernel", "refkernel#2", "other", "refkernel#3"]
    assert unique_names(["a", "a#2", "a"]) == ["a", "a#2", "a#3"]


def test_weights_are_checked():
    assert check_weights((), ["a", "b"]) == (1.0, 1.0)
    assert check_weights((3, 1), ["a", "b"]) == (3.0, 1.0)
    with pytest.raises(UsageError, match=r"--weight was given 1 time\(s\) for 2 kernel\(s\) \(a, b\): give one --weight per kernel"):
        check_weights((1,), ["a", "b"])
    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(UsageError, match=r"--weight .* \(kernel b\) is invalid: a weight is a positive number"):
            check_weights((1, bad), ["a", "b"])
    with pytest.raises(UsageError, match=r"--conns 4: .* b would get no connections; raise --conns to at least 6 or the weight of b"):
        check_split("connections", 4, (10, 1), ["a", "b"], "--conns")


def parsed(name: str, argv: list[str]):
    got = {}

    async def capture(settings, access=None):
        got.update(settings=settings, access=access)
        raise SystemExit(0)

    cmd = kcli.scenario_command(dataclasses.replace(REGISTRY[name], run=capture))
    with pytest.raises(SystemExit):
        cmd.main(argv, prog_name=name, standalone_mode=False)
    return got["settings"], got["access"]


@pytest.mark.parametrize("name", ["stress", "sessions"])
def test_repeated_bin_gives_several_kernels_with_their_names_and_weights(name):
    _, a = parsed(name, ["--launch", "--bin", "refkernel", "--bin", "refkernel --fault first-tool-only", "--weight", "3", "--weight", "1", "--", "--queue", "32"])
    assert a.kernels == 2 and a.names == ("refkernel", "refkernel#2") and a.weights == (3.0, 1.0)
    first, second = a.launch.target, a.more[0].target
    assert first.extra_args == ("--queue", "32")  # ARGS after -- go to every kernel
    assert second.extra_args == ("--fault", "first-tool-only", "--queue", "32")
    assert "REFKERNEL_TOKEN" in second.env  # `refkernel` is the reference kernel's own form, as cmp takes it


def test_a_single_kernel_is_parsed_as_before():
    _, a = parsed("stress", ["--launch", "--bin", "refkernel"])
    assert a.more == () and a.names == () and a.weights == ()
    assert a.launch.target.bin.endswith("refkernel") and a.launch.target.extra_args == ()
    _, a = parsed("stress", [])
    assert a.launch is None and a.more == ()


@pytest.mark.parametrize("argv, words", [
    (["--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "1"], "--weight was given 1 time(s) for 2 kernel(s) (refkernel, refkernel#2)"),
    (["--launch", "--bin", "refkernel", "--bin", "refkernel", "--weight", "1", "--weight", "0"], "--weight 0.0 (kernel refkernel#2) is invalid"),
    (["--bin", "refkernel", "--bin", "refkernel"], "need --launch"),
    (["--launch", "--bin", "refkernel", "--weight", "1", "--weight", "2"], "--weight was given 2 times for 1 kernel"),
    (["--weight", "2"], "--weight goes with several kernels launched together"),
    (["--launch", "--bin", "refkernel", "--target", "x.toml"], "exclusive"),
    (["--launch", "--bin", "refkernel", "--bin", "'unclosed"], "shell quoting"),
])
def test_bad_kernel_flags_are_usage_errors(argv, words):
    with pytest.raises(UsageError) as exc:
        parsed("stress", argv)
    assert words in str(exc.value)


def test_scenarios_without_several_kernels_keep_a_single_target_flag():
    for name in ("batch", "abtest"):
        cmd = kcli.scenario_command(REGISTRY[name])
        opts = {p.name: p for p in cmd.params}
        assert not opts["target_file"].multiple and not opts["bin_"].multiple and "weights" not in opts


def _row(kernel, passed, latency=0.01, t=0.0, failure=None):
    return {"kind": "load", "kernel": kernel, "passed": passed, "latency_s": latency, "t_rel": t, "marker": "!batch4",
            "failures": [] if passed else [failure or "count 1/4"]}


def test_summary_checks_and_report_rows_per_kernel():
    rows = [_row("a", True, 0.01, 0.0), _row("a", True, 0.03, 0.5), _row("b", False, t=0.1), _row("b", True, 0.02, 0.2)]
    extras = {"kernels": [{"name": "a", "weight": 3.0, "conns": 3}, {"name": "b", "weight": 1.0, "conns": 1}],
              "orphans": [{"pid": 7, "cmdline": "sleep 600", "kernel": "b"}]}
    s = summarize_stress(rows, extras)
    a, b = s["kernels"]
    assert (a["name"], a["attempted"], a["passed"], a["pass_rate"], a["failures"], a["weight"], a["conns"]) == ("a", 2, 2, 1.0, {}, 3.0, 3)
    assert (b["name"], b["attempted"], b["passed"], b["failures"]) == ("b", 2, 1, {"count": 1})
    assert a["latency_s"]["n"] == 2 and a["latency_s"]["max"] == 0.03 and set(a["latency_s"]) == set(s["latency_s"])
    assert a["orphans"] == [] and b["orphans"] == [extras["orphans"][0]]
    checks = {c.name: c for c in stress_checks(s)}
    assert checks["every input to a passed its verdict"].passed
    bad = checks["every input to b passed its verdict"]
    assert not bad.passed and "1/2 passed" in bad.detail and "count" in bad.detail
    orphans = {c.name: c for c in orphan_checks(extras)}
    assert orphans["no orphans after a exited"].passed
    assert not orphans["no orphans after b exited"].passed and "sleep 600" in orphans["no orphans after b exited"].detail
    report = render_stress({"settings": {"conns": 4, "inputs": 1, "mix": "!batch4"}, "checks": []}, s)
    assert "| a | 3 | 2 | 2 | 100.0% |" in report and "| b | 1 | 2 | 1 | 50.0% |" in report and "count 1" in report
    assert "| a | 2 | 10.0 ms |" in report  # a latency row per kernel


def test_a_single_kernel_summary_has_no_kernel_rows():
    s = summarize_stress([_row(None, True)], {"orphans": []})
    assert "kernels" not in s
    assert [c.name for c in orphan_checks({"orphans": []})] == ["no orphans after the target exited"]
