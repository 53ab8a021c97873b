"""Each scenario's pure functions on hand-made rows: summarize -> checks ->
render, as the runner and `kstress report` call them through the registry. No
process is started: these are the fast tests of what a slow run would show."""

from __future__ import annotations

from typing import Any

import pytest

from harness.scenarios.runner import all_checks, orphan_checks, partial_summary, settings_json
from harness.scenarios import REGISTRY, AbtestSettings, BatchSettings, CmpSettings, HoldSettings, SessionsSettings, StressSettings
from harness.scenarios.findmax import FindmaxSettings
from harness.scenarios.resilience import ResilienceSettings


def doc_for(name: str, summary: dict[str, Any], settings: dict[str, Any], extras: dict[str, Any] | None = None) -> dict[str, Any]:
    sc = REGISTRY[name]
    checks = all_checks(sc, summary, settings, extras or {})
    return {
        "scenario": name, "passed": all(c.passed for c in checks), "exit_code": 0, "error": None, "started": 0, "duration_s": 1.0,
        "meta": {"host": {}, "targets": []}, "settings": settings, "summary": summary, "checks": [c.to_json() for c in checks], "extras": extras or {},
    }


def through(name: str, rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any] | None = None):
    sc = REGISTRY[name]
    summary = sc.summarize(rows, settings, extras or {})
    doc = doc_for(name, summary, settings, extras)
    return summary, {c["name"]: c for c in doc["checks"]}, sc.render(doc, summary)


# --- stress ------------------------------------------------------------------------------


def stress_row(passed: bool = True, failure: str | None = None, latency: float = 0.1, kind: str = "load", t_rel: float = 0.0) -> dict:
    return {"kind": kind, "passed": passed, "failures": [failure] if failure else [], "latency_s": latency if passed else None,
            "first_frame_s": latency / 2 if passed else None, "t_rel": t_rel, "marker": "!batch4"}


def test_stress_all_passed():
    st = settings_json(StressSettings())
    rows = [stress_row(t_rel=k * 0.1) for k in range(10)]
    s, checks, text = through("stress", rows, st, {"dedup_probe": {"ok": True, "detail": "dropped"}, "orphans": []})
    assert s["attempted"] == s["passed"] == 10 and s["pass_rate"] == 1.0
    assert s["latency_s"]["p50"] == 0.1 and s["throughput_per_s"] == round(10 / 1.0, 2)
    assert checks["every input passed its verdict"]["passed"]
    assert checks["replay guard drops an identical input"]["passed"]
    assert checks["no orphans after the target exited"]["passed"]
    assert "# kstress stress — PASS" in text and "| 10 | 10 | 100.0% |" in text and "| done (from send) | 10 | 100.0 ms |" in text


def test_stress_failures_and_probe_fail_by_name():
    st = settings_json(StressSettings())
    rows = [stress_row(), stress_row(False, "count 1/4"), stress_row(False, "error_frame:busy"), stress_row(kind="probe")]
    s, checks, text = through("stress", rows, st, {"dedup_probe": {"ok": False, "detail": "executed again (no dedup)"}})
    assert s["attempted"] == 3 and s["passed"] == 1, "probe rows are not load"
    assert s["failures"] == {"count": 1, "error_frame:busy": 1}
    assert not checks["every input passed its verdict"]["passed"]
    assert "count" in checks["every input passed its verdict"]["detail"]
    assert not checks["replay guard drops an identical input"]["passed"]
    assert "no orphans after the target exited" not in checks, "no orphan check when the run did not start the target"
    assert "| count | 1 | `count 1/4` |" in text and "FAIL replay guard" in text and "# kstress stress — FAIL" in text


def test_stress_with_no_turns_fails_its_check():
    s, checks, _ = through("stress", [], settings_json(StressSettings()))
    assert s["attempted"] == 0 and not checks["every input passed its verdict"]["passed"]


# --- batch -------------------------------------------------------------------------------


def batch_row(kind: str, n: int, overlap: int | None, passed: bool = True, tool_ms: int = 210) -> dict:
    return {"kind": "batch", "batch_kind": kind, "n": n, "marker": f"!{kind}{n}", "passed": passed, "failures": [] if passed else ["order"],
            "overlap": overlap, "tool_ms": tool_ms, "latency_s": 0.3}


def test_batch_mixed_serial_passes():
    st = settings_json(BatchSettings(ns=(4,)))
    rows = [batch_row("batch", 4, None), batch_row("mixed", 4, 1), batch_row("slowbatch", 4, 4)]
    s, checks, text = through("batch", rows, st)
    assert s["attempted"] == 3 == s["passed"]
    assert [r["kind"] for r in s["rows"]] == ["batch", "mixed", "slowbatch"]
    assert checks["mixed batches ran serially (observed overlap 1)"]["passed"]
    assert "| `!slowbatch4` | 1 | 1 | 4 | 210.0 ms |" in text


@pytest.mark.parametrize("overlap, detail", [(3, "!mixed4: overlap 3>1 (calls 0 and 1 ran at once)"), (None, "!mixed4: no timestamps (tools did not run)")])
def test_batch_mixed_that_overlapped_or_never_ran_fails(overlap, detail):
    row = batch_row("mixed", 4, overlap)
    if overlap:
        row.update(passed=False, failures=["overlap 3>1 (calls 0 and 1 ran at once)"])
    s, checks, text = through("batch", [row], settings_json(BatchSettings(ns=(4,))))
    c = checks["mixed batches ran serially (observed overlap 1)"]
    assert not c["passed"] and c["detail"] == detail
    assert "FAIL mixed batches ran serially" in text


def test_batch_mixed_check_follows_the_contract():
    row = batch_row("mixed", 4, 2)
    _, checks, _ = through("batch", [row], settings_json(BatchSettings(ns=(4,))), {"contract": {"batch": "barrier"}})
    assert checks["mixed batches ran as barriers (the unsafe call alone, between the others)"]["passed"]
    row.update(passed=False, failures=["barrier (call 1 ended at +60.0 ms, after call 3 started at +10.0 ms: the unsafe call 2 must separate them)"])
    _, checks, _ = through("batch", [row], settings_json(BatchSettings(ns=(4,))), {"contract": {"batch": "barrier"}})
    c = checks["mixed batches ran as barriers (the unsafe call alone, between the others)"]
    assert not c["passed"] and "the unsafe call 2 must separate them" in c["detail"]


def test_batch_failures_are_counted_per_marker():
    s, checks, _ = through("batch", [batch_row("batch", 2, None), batch_row("batch", 2, None, passed=False)], settings_json(BatchSettings(ns=(2,))))
    assert s["rows"][0]["failures"] == {"order": 1} and not checks["every batch turn passed its verdict"]["passed"]


# --- abtest ------------------------------------------------------------------------------


def ab_rows(n: int, conc_ms: int, serial_ms: int, rounds: int = 4, serial_overlap: int = 1, conc_overlap: int | None = None) -> list[dict]:
    rows = []
    for r in range(rounds):
        rows.append({"kind": "abtest", "n": n, "round": r, "arm": "concurrent", "passed": True, "failures": [], "tool_ms": conc_ms + r, "overlap": conc_overlap or n})
        rows.append({"kind": "abtest", "n": n, "round": r, "arm": "serial", "passed": True, "failures": [], "tool_ms": serial_ms + r, "overlap": serial_overlap})
    return rows


def ab_settings(**kw) -> dict:
    return {**settings_json(AbtestSettings(ns=(4,), rounds=4, **kw)), "tool_ms_effective": 200}


def test_abtest_valid_speedup():
    s, checks, text = through("abtest", ab_rows(4, 210, 820), ab_settings())
    row = s["rows"][0]
    assert row["valid"] and 3.8 < row["speedup"] < 4.0 and row["ideal"] == 4.0
    assert checks["N=4: valid measurement"]["passed"] and checks["N=4: parallel-safe batch ran concurrently"]["passed"]
    assert "tools of 200 ms" in text and "| 4 |" in text and "yes |" in text


def test_abtest_refuses_a_serial_control_that_overlapped():
    s, checks, text = through("abtest", ab_rows(4, 210, 220, serial_overlap=4), ab_settings())
    row = s["rows"][0]
    assert not row["valid"] and row["speedup"] is None
    assert "serial control ran concurrently (observed overlap 4): speedup refused" in row["reasons"]
    assert not checks["N=4: valid measurement"]["passed"] and "NO: serial control ran concurrently" in text


def test_abtest_a_serial_kernel_fails_the_concurrency_check_unless_told_not_to():
    rows = ab_rows(4, 820, 820, conc_overlap=1)
    _, checks, _ = through("abtest", rows, ab_settings())
    assert checks["N=4: valid measurement"]["passed"]
    assert not checks["N=4: parallel-safe batch ran concurrently"]["passed"]
    _, checks, _ = through("abtest", rows, ab_settings(expect_concurrency=False))
    assert "N=4: parallel-safe batch ran concurrently" not in checks


def test_abtest_invalid_rounds_are_never_samples():
    rows = ab_rows(4, 210, 820, rounds=4)
    for r in rows[:6]:
        if r["arm"] == "concurrent":
            r.update(passed=False, failures=["count 3/4"], tool_ms=1)
    s, _, text = through("abtest", rows, ab_settings())
    row = s["rows"][0]
    assert not row["valid"] and "only 1 valid concurrent round(s) of 4" in row["reasons"]
    assert row["invalid_rounds"] == {"concurrent: count 3/4": 3} and "concurrent: count 3/4 x3" in text


# --- cmp -----------------------------------------------------------------------------------


def cmp_rows(old_ms: float, new_ms: float, rounds: int = 6, new_pass: bool = True) -> list[dict]:
    rows = []
    for r in range(rounds):
        for v, ms in (("old", old_ms), ("new", new_ms)):
            rows.append({"kind": "cmp", "dim": "batch", "version": v, "round": r, "passed": True, "tool_ms": ms + r, "got": 4, "expected": 4, "outcome": "response"})
            for arm, t in (("concurrent", ms + r), ("serial", 4 * (old_ms + r))):
                rows.append({"kind": "cmp", "dim": "concurrency", "version": v, "round": r, "arm": arm, "passed": True, "tool_ms": t, "overlap": 1 if arm == "serial" else 4})
            for dim in ("bombardment", "stability"):
                rows.append({"kind": "cmp", "dim": dim, "version": v, "round": r, "passed": new_pass or v == "old", "outcome": "response"})
    return rows


def test_cmp_same_build_is_same_everywhere():
    s, checks, text = through("cmp", cmp_rows(210, 210), settings_json(CmpSettings(old="a", new="b")))
    assert s["regressed"] == [] and all(d["verdict"] == "same" for d in s["dimensions"])
    assert all(c["passed"] for c in checks.values()) and "**same**" in text


def test_cmp_a_slower_less_concurrent_new_regresses():
    s, checks, text = through("cmp", cmp_rows(210, 840, rounds=8, new_pass=False), settings_json(CmpSettings(old="a", new="b")))
    assert set(s["regressed"]) >= {"batch", "concurrency"}
    assert not checks["batch: NEW does not regress"]["passed"] and "**worse**" in text


# --- hold --------------------------------------------------------------------------------


def test_hold_from_its_measurements_and_probe_rows():
    extras = {"hold": {"requested": 10, "connected": 10, "held_at_probe": 10, "failures": {}, "open_s": 0.2,
                       "harness_rss_mb": {"before": 50.0, "held": 52.0}, "harness_kb_per_connection": 4.2, "kernel_connections": 11}, "orphans": []}
    rows = [{"kind": "probe", "passed": True, "failures": []} for _ in range(3)] + [{"kind": "probe", "passed": False, "failures": ["timeout"]}]
    s, checks, text = through("hold", rows, settings_json(HoldSettings(conns=10, probe=4)), extras)
    assert s["probe"] == {"sent": 4, "passed": 3} and s["connected"] == 10
    assert checks["10 connections opened and authenticated"]["passed"]
    assert not checks["the kernel answers while they are held"]["passed"]
    assert "**4.2 KiB per connection**" in text


# --- what every scenario shares ------------------------------------------------------------


def test_the_orphan_check_names_every_orphan_and_its_target():
    assert orphan_checks({}) == [] and orphan_checks({"orphans": None}) == []
    [ok] = orphan_checks({"orphans": []})
    assert ok.passed and ok.detail == "none"
    [bad] = orphan_checks({"orphans": [{"pid": 7, "cmdline": "sleep 600", "target": "new"}, {"pid": 8, "cmdline": "x"}]})
    assert not bad.passed and bad.detail == "new: pid 7: sleep 600; pid 8: x"


def test_a_partial_summary_is_the_scenarios_own_plus_its_marks():
    rows = [stress_row(), stress_row(False, "timeout")]
    s = partial_summary(REGISTRY["stress"], rows, settings_json(StressSettings()), {})
    assert s["partial"] and s["turns_recorded"] == 2 and s["attempted"] == 2 and s["passed"] == 1
    assert partial_summary(REGISTRY["batch"], [], settings_json(BatchSettings()), {}) == {"partial": True, "turns_recorded": 0}


def test_every_registered_scenario_renders_its_empty_summary():
    samples = {"stress": StressSettings(), "batch": BatchSettings(), "abtest": AbtestSettings(), "cmp": CmpSettings(old="a", new="b"), "hold": HoldSettings(conns=4, probe=1), "sessions": SessionsSettings(),
               "findmax": FindmaxSettings(slos=("p95<1s",)), "resilience": ResilienceSettings()}
    assert set(samples) == set(REGISTRY), "a new scenario needs a line here"
    for name, settings in samples.items():
        st = {**settings_json(settings), "tool_ms_effective": 200}
        _, checks, text = through(name, [], st, {"hold": {}} if name == "hold" else {})
        assert text.startswith(f"# kstress {name} — ") and "## Checks" in text, name
