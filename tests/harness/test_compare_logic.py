"""kstress compare's row logic on synthetic turn rows and run directories:
each verdict can come out both ways (swap OLD and NEW and the direction
flips), cmp's rule and minimum effect decide, and runs that cannot be
compared are refused naming the difference."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.results.comparison import final_line, latency_rows, pass_rate_row, sample_row, throughput_row, verdict_row
from harness.scenarios import compare_runs, refusals
from harness.scenarios.abtest import round_speedups, speedup_rows
from harness.errors import UsageError

S = {"alpha": 0.05, "min_effect": 0.05}


def turns(marker: str | None, latencies: list[float], passed: bool = True, t0: float = 0.0, failure: str = "no_overlap (x)") -> list[dict]:
    return [{"kind": "load", "marker": marker, "passed": passed, "failures": [] if passed else [failure], "latency_s": lat, "t_rel": t0 + i * 0.1}
            for i, lat in enumerate(latencies)]


def by_name(rows: list[dict]) -> dict[str, dict]:
    return {r["name"]: r for r in rows}


SLOW = [0.30 + 0.001 * i for i in range(20)]
SLOWER = [0.90 + 0.001 * i for i in range(20)]
TEXT = [0.004 + 0.0001 * i for i in range(20)]


def test_slower_new_is_worse_and_swapped_it_is_better():
    old, new = turns("!slowbatch4", SLOW), turns("!slowbatch4", SLOWER)
    worse = by_name(latency_rows(old, new, S))["latency !slowbatch4"]
    assert worse["verdict"] == "worse" and worse["change"] == pytest.approx(2.0, rel=0.05) and worse["p"] < 0.05
    better = by_name(latency_rows(new, old, S))["latency !slowbatch4"]
    assert better["verdict"] == "better"


def test_a_change_below_the_minimum_effect_is_same_even_when_significant():
    old = turns("!slowbatch4", SLOW)
    new = turns("!slowbatch4", [x * 1.03 for x in SLOW])
    r = by_name(latency_rows(old, new, S))["latency !slowbatch4"]
    assert r["verdict"] == "same" and "minimum effect" in r["reason"]
    # the drift rule off: SLOW's own band (x1.06) is wider than a 3% change, which two stored runs drift by
    r = by_name(latency_rows(old, new, {"alpha": 0.05, "min_effect": 0.01, "drift_bands": 0}))["latency !slowbatch4"]
    assert r["verdict"] == "worse"
    r = by_name(latency_rows(old, new, {"alpha": 0.05, "min_effect": 0.01}))["latency !slowbatch4"]
    assert r["verdict"] == "inconclusive" and r["within_run_verdict"] == "worse"


def test_a_marker_that_no_longer_passes_is_worse_and_the_all_row_refuses_another_mix():
    old = turns("!slowbatch4", SLOW) + turns(None, TEXT)
    new = turns("!slowbatch4", SLOWER, passed=False) + turns(None, TEXT)
    rows = by_name(latency_rows(old, new, S))
    assert rows["latency !slowbatch4"]["verdict"] == "worse" and "0 of 20 turns passed" in rows["latency !slowbatch4"]["reason"]
    assert rows["latency text"]["verdict"] == "same"
    # NEW's passed turns are all text: its median is "faster" only because the slow ones failed
    assert rows["latency all"]["verdict"] == "unmeasurable" and "another mix of markers" in rows["latency all"]["reason"]
    # the other way round nothing is better: OLD could not be measured
    back = by_name(latency_rows(new, old, S))
    assert back["latency !slowbatch4"]["verdict"] == "unmeasurable"


def test_pass_rates_in_percentage_points_both_ways():
    full = turns("!batch4", SLOW)
    sixty = turns("!batch4", SLOW[:12]) + turns("!batch4", SLOW[12:], passed=False)
    worse = pass_rate_row(full, sixty, S)
    assert worse["verdict"] == "worse" and worse["change"] == pytest.approx(-0.4) and "no_overlap x8" in worse["reason"]
    # 60% -> 100%: the medians of the 0/1 outcomes are both 1; this once read as worse
    assert pass_rate_row(sixty, full, S)["verdict"] == "better"
    one_off = turns("!batch4", SLOW[:19]) + turns("!batch4", SLOW[19:], passed=False)
    assert pass_rate_row(full, one_off, S)["verdict"] == "same"  # 5 points is the minimum effect


def test_cmp_shares_the_rate_rule():
    """cmp's bombardment and stability go through the same function: 31% -> 100% is better, not same."""
    row = verdict_row({"name": "bombardment"}, {"old": [1.0] * 10 + [0.0] * 22, "new": [1.0] * 32}, {}, S, higher_is_better=True, rate=True)
    assert row["verdict"] == "better"
    row = verdict_row({"name": "bombardment"}, {"old": [1.0] * 32, "new": [1.0] * 19 + [0.0] * 13}, {}, S, higher_is_better=True, rate=True)
    assert row["verdict"] == "worse"


def test_throughput_needs_whole_windows_and_a_short_new_is_no_regression():
    def steady(per_s: int, seconds: int) -> list[dict]:
        return [{"kind": "load", "marker": None, "passed": True, "latency_s": 0.01, "t_rel": k / per_s} for k in range(per_s * seconds)]

    r = throughput_row(steady(20, 8), steady(10, 8), S)
    assert r["verdict"] == "worse" and r["old"] == pytest.approx(20) and r["new"] == pytest.approx(10)
    assert throughput_row(steady(10, 8), steady(20, 8), S)["verdict"] == "better"
    short = throughput_row(steady(20, 8), steady(20, 2), S)
    assert short["verdict"] == "unmeasurable" and "whole window" in short["reason"]


def ab_rows(conc_ms: int, serial_ms: int, rounds: int = 6, serial_overlap: int = 1) -> list[dict]:
    rows = []
    for r in range(rounds):
        for arm, ms, ov in (("concurrent", conc_ms + r, 4), ("serial", serial_ms + r, serial_overlap)):
            rows.append({"kind": "abtest", "n": 4, "round": r, "arm": arm, "passed": True, "failures": [], "tool_ms": ms, "overlap": ov})
    return rows


def test_speedups_per_round_both_ways_and_a_serial_control_that_overlapped():
    good, serial = ab_rows(210, 840), ab_rows(840, 840)
    assert round_speedups(good, "kernel")[0] == pytest.approx([840 / 210, 841 / 211, 842 / 212, 843 / 213, 844 / 214, 845 / 215])
    rows = by_name(speedup_rows(good, serial, [4], "kernel", S))
    assert rows["speedup N=4"]["verdict"] == "worse" and rows["tool phase N=4"]["verdict"] == "worse"
    assert by_name(speedup_rows(serial, good, [4], "kernel", S))["speedup N=4"]["verdict"] == "better"
    broken = by_name(speedup_rows(good, ab_rows(210, 840, serial_overlap=4), [4], "kernel", S))["speedup N=4"]
    assert broken["verdict"] == "worse" and "ran concurrently" in broken["reason"]


def doc(scenario: str = "stress", **settings) -> dict:
    base = {"stress": {"conns": 4, "inputs": 8, "mix": "!slowbatch4:1,text:1", "rate": None, "stages": [], "arrival": "constant", "warmup_s": None,
                       "timeout_s": 60.0, "connect_timeout_s": 5.0, "interrupts": 0.0, "interrupt_marker": "!batch2", "seed": 1, "out": "runs", "quiet": True}}
    target = {"name": "refkernel", "argv": ["refkernel"], "bin_sha256": "ab", "transport": "unix",
              "contract": {"batch": "whole-batch", "order": "declared"}, "workload": {"tool_ms": 200, "mixed_ms": 50, "mock_args": [], "tools": None, "llm_api": "chat"}}
    return {"schema": "kstress.run/1", "scenario": scenario, "status": "completed", "settings": {**base.get(scenario, {}), **settings},
            "summary": {}, "checks": [], "extras": {}, "meta": {"targets": [target]}}


def with_target(d: dict, key: str, value) -> dict:
    t = d["meta"]["targets"][0]
    if key.startswith("workload."):
        t["workload"][key.split(".", 1)[1]] = value
    else:
        t[key] = value
    return d


def test_refusals_name_the_difference_and_allowed_differences_are_notes():
    assert refusals(doc(), doc()) == ([], ["the same binary (sha256 ab…)"])
    bad, _ = refusals(doc(), doc(mix="!slowbatch4:1,text:2"))
    assert len(bad) == 1 and "different mix" in bad[0] and "'!slowbatch4:1,text:2'" in bad[0]
    assert refusals(doc(), doc(mix="text:1,!slowbatch4:1"))[0] == []  # the items' order does not matter
    assert "different conns" in refusals(doc(), doc(conns=8))[0][0]
    assert "different rate" in refusals(doc(), doc(rate=50.0))[0][0]
    assert "different scenarios: OLD is stress, NEW is batch" in refusals(doc(), doc("batch"))[0][0]
    assert "different contract" in refusals(doc(), with_target(doc(), "contract", {"batch": "parallel", "order": "declared"}))[0][0]
    assert "LLM pacing" in refusals(doc(), with_target(doc(), "workload.mock_args", ["--ttft-ms", "50"]))[0][0]
    assert "tool sleeps" in refusals(doc(), with_target(doc(), "workload.tool_ms", 100))[0][0]
    bad, notes = refusals(doc(), doc(seed=7, inputs=20, out="elsewhere"))
    assert bad == [] and any(n.startswith("seed differs") for n in notes) and any(n.startswith("inputs differs") for n in notes)
    assert not any(n.startswith("out ") for n in notes)
    older = doc()
    del older["meta"]["targets"][0]["workload"]
    bad, notes = refusals(older, doc())
    assert bad == [] and any("not recorded in OLD" in n for n in notes)


def write_run(path: Path, d: dict, rows: list[dict] | None) -> Path:
    path.mkdir(parents=True)
    (path / "run.json").write_text(json.dumps(d))
    if rows is not None:
        (path / "turns.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_compare_runs_end_to_end_on_files_and_what_it_refuses(tmp_path):
    old = write_run(tmp_path / "old", doc(), turns("!slowbatch4", SLOW) + turns(None, TEXT))
    new = write_run(tmp_path / "new", doc(), turns("!slowbatch4", SLOWER) + turns(None, TEXT))
    c = compare_runs(old, new)
    assert c.worse == ["latency !slowbatch4"] and c.exit_code == 1
    assert compare_runs(new, old).exit_code == 0 and "latency !slowbatch4" in [r["name"] for r in compare_runs(new, old).rows if r["verdict"] == "better"]
    assert compare_runs(old, old).exit_code == 0
    with pytest.raises(UsageError, match="different mix"):
        compare_runs(old, write_run(tmp_path / "mix", doc(mix="!batch4:1"), turns("!batch4", SLOW)))
    with pytest.raises(UsageError, match="turns.jsonl is missing"):
        compare_runs(old, write_run(tmp_path / "noturns", doc(), None))
    with pytest.raises(UsageError, match="is .* a kstress run directory"):
        compare_runs(old, tmp_path)
    hold = write_run(tmp_path / "hold", doc("hold"), [])
    with pytest.raises(UsageError, match="hold runs: compare does not take them"):
        compare_runs(hold, hold)
    with pytest.raises(UsageError, match="--min-effect"):
        compare_runs(old, new, min_effect=5)


# issue 22 item 6: two abtest runs of one binary made 7 s apart, compared stored: speedup N=4 3.51x -> 3.14x,
# p=0.03, "worse" and exit 1. Each run's own rounds spread as far (x1.14, x1.19) as the runs lie apart (x1.12)
OLD_SPEEDUPS = [3.30, 3.42, 3.50, 3.52, 3.60, 3.75]
NEW_SPEEDUPS = [2.95, 3.05, 3.12, 3.16, 3.36, 3.51]


def ab_run(speedups: list[float], n: int = 4, conc_ms: int = 100) -> list[dict]:
    rows = []
    for r, sp in enumerate(speedups):
        for arm, ms, ov in (("concurrent", conc_ms, n), ("serial", round(sp * conc_ms), 1)):
            rows.append({"kind": "abtest", "n": n, "round": r, "arm": arm, "passed": True, "failures": [], "tool_ms": ms, "overlap": ov})
    return rows


def ab_doc() -> dict:
    return doc("abtest", ns=[4], rounds=6, tool_ms_effective=100, baseline_used="kernel", timeout_s=60.0, connect_timeout_s=5.0)


def test_a_stored_speedup_change_within_the_runs_own_band_is_inconclusive_and_exit_0(tmp_path):
    old = write_run(tmp_path / "old", ab_doc(), ab_run(OLD_SPEEDUPS))
    new = write_run(tmp_path / "new", ab_doc(), ab_run(NEW_SPEEDUPS))
    c = compare_runs(old, new)
    row = by_name(c.rows)["speedup N=4"]
    assert row["old"] == pytest.approx(3.51) and row["new"] == pytest.approx(3.14) and row["p"] < 0.05  # the within-run test alone: worse
    assert row["verdict"] == "inconclusive" and row["within_run_verdict"] == "worse"
    assert c.worse == [] and c.exit_code == 0
    # the reason gives the numbers: how far apart, the band it is within, and the limit
    assert "medians are x1.12 apart" in row["reason"] and "NEW: 2.95x..3.51x, x1.19" in row["reason"] and "raised to 1.5, x1.30" in row["reason"]
    assert row["drift"]["old_band"] == pytest.approx(3.75 / 3.30) and row["drift"]["limit"] == pytest.approx((3.51 / 2.95) ** 1.5)
    assert "1 inconclusive" in final_line(c) and final_line(c).endswith("exit 0")
    # the same runs swapped: "better" by the within-run test, inconclusive too
    back = by_name(compare_runs(new, old).rows)["speedup N=4"]
    assert back["verdict"] == "inconclusive" and back["within_run_verdict"] == "better"


def test_a_stored_change_beyond_the_runs_own_band_is_still_worse(tmp_path):
    """A kernel that lost its concurrency (serial tools: ~1x) against the
    same drifting OLD: far outside either run's band, worse, exit 1."""
    old = write_run(tmp_path / "old", ab_doc(), ab_run(OLD_SPEEDUPS))
    serial = write_run(tmp_path / "serial", ab_doc(), ab_run([0.95, 1.0, 1.02, 0.98, 1.05, 1.1]))
    c = compare_runs(old, serial)
    row = by_name(c.rows)["speedup N=4"]
    assert row["verdict"] == "worse" and "within_run_verdict" not in row and row["drift"]["shift"] > row["drift"]["limit"]
    assert c.worse == ["speedup N=4"] and c.exit_code == 1
    assert by_name(compare_runs(serial, old).rows)["speedup N=4"]["verdict"] == "better"


# issue 22 item 16: the reference kernel (every capability) against one's own kernel (by default none of dedup,
# interrupts, stats, sessions) was refused as "different contract" though a stress run uses none of those keys
REFKERNEL_CONTRACT = {"batch": "whole-batch", "order": "declared", "dedup": True, "interrupts": True, "stats": True, "sessions": True}
OWN_CONTRACT = {**REFKERNEL_CONTRACT, "dedup": False, "interrupts": False, "stats": False, "sessions": False}


def test_contracts_that_differ_only_in_keys_the_scenario_does_not_use_compare(tmp_path):
    ref = with_target(doc(), "contract", REFKERNEL_CONTRACT)
    own = with_target(doc(), "contract", OWN_CONTRACT)
    bad, notes = refusals(ref, own)
    assert bad == [] and "contract sessions differs (OLD True, NEW False): allowed, stress's rows do not depend on it" in notes
    c = compare_runs(write_run(tmp_path / "ref", ref, turns("!slowbatch4", SLOW)), write_run(tmp_path / "own", own, turns("!slowbatch4", SLOW)))
    assert c.exit_code == 0 and any(n.startswith("contract dedup differs") for n in c.notes)
    # a key the rows depend on is still refused, by name
    bad, _ = refusals(ref, with_target(doc(), "contract", {**OWN_CONTRACT, "order": "any"}))
    assert len(bad) == 1 and bad[0].startswith("different contract order: OLD 'declared', NEW 'any' (order=any passes results in any order")
    with pytest.raises(UsageError, match="different contract batch: OLD 'whole-batch', NEW 'parallel'"):
        compare_runs(write_run(tmp_path / "ref2", ref, turns("!slowbatch4", SLOW)),
                     write_run(tmp_path / "par", with_target(doc(), "contract", {**REFKERNEL_CONTRACT, "batch": "parallel"}), turns("!slowbatch4", SLOW)))


def test_sessions_compares_the_sessions_key_and_stress_does_not():
    """sessions judges each turn's history only under sessions=true: there the key is used."""
    sess = {"mix": "text:1", "conns": 2, "sessions": 4, "turns": 3, "reconnect": False, "rate": None, "stages": [], "arrival": "constant",
            "warmup_s": None, "timeout_s": 60.0, "connect_timeout_s": 5.0}
    ref = with_target(doc("sessions", **sess), "contract", REFKERNEL_CONTRACT)
    own = with_target(doc("sessions", **sess), "contract", {**REFKERNEL_CONTRACT, "sessions": False})
    bad, _ = refusals(ref, own)
    assert len(bad) == 1 and bad[0].startswith("different contract sessions: OLD True, NEW False")
    assert refusals(with_target(doc(), "contract", REFKERNEL_CONTRACT), with_target(doc(), "contract", {**REFKERNEL_CONTRACT, "sessions": False}))[0] == []


def test_a_band_from_zero_bounds_nothing_and_stays_valid_json():
    """A sample series that starts at 0 (a CPU share) has no factor for its band: a change there is no claim,
    and the row's JSON holds null, not Infinity (which strict JSON readers refuse)."""
    old, new = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0], [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    row = sample_row("resources CPU", "m", "%", {"old": old, "new": new}, S, higher_is_better=False)
    assert row["verdict"] == "inconclusive" and "from 0: no factor bounds it" in row["reason"]
    assert row["drift"]["old_band"] is None and row["drift"]["limit"] is None
    json.dumps(row, allow_nan=False)


def test_holm_keeps_a_strong_verdict_and_drops_one_that_four_tests_at_once_would_make_by_chance():
    """cmp's four dimensions are four tests: an identical build came out
    `better` on its speedup at p=0.041 (issue 22's serial cmp test). With
    Holm's step-down correction the smallest p must be under alpha/4."""
    from harness.results.comparison import holm

    rows = [dict(name="batch", verdict="same", p=0.872), dict(name="concurrency", verdict="better", p=0.0411),
            dict(name="bombardment", verdict="same", p=1.0), dict(name="stability", verdict="same", p=1.0)]
    holm(rows, 0.05)
    assert [r["verdict"] for r in rows] == ["same"] * 4
    assert rows[1]["within_test_verdict"] == "better" and "Holm's correction for 4 comparisons" in rows[1]["reason"]
    # a real regression (serial tools: every round apart, p at the floor of 6 vs 6 rounds) stays
    rows = [dict(name="batch", verdict="worse", p=0.0022), dict(name="concurrency", verdict="worse", p=0.0043),
            dict(name="bombardment", verdict="same", p=1.0), dict(name="unmeasured", verdict="worse", p=None)]
    holm(rows, 0.05)
    assert [r["verdict"] for r in rows] == ["worse", "worse", "same", "worse"]
