"""summarize_stress on hand-made rows: what the report and run.json say."""

from harness.scenarios.stress import summarize_stress


def _row(passed: bool, failure: str | None = None, latency: float = 0.1) -> dict:
    return {"kind": "load", "passed": passed, "failures": [failure] if failure else [], "latency_s": latency, "t_rel": 0.0}


def test_failures_group_by_name_and_keep_a_full_example():
    rows = [_row(True), _row(False, "count 1/4"), _row(False, "count 3/4"), _row(False, "order")]
    s = summarize_stress(rows, {})
    assert s["attempted"] == 4 and s["passed"] == 1
    assert s["failures"] == {"count": 2, "order": 1}
    assert s["failure_examples"] == {"count": "count 1/4", "order": "order"}


def test_a_peak_queue_of_zero_is_reported_as_zero():
    s = summarize_stress([_row(True)], {"kernel_stats": {"peak_queued": 0}, "resources": {}})
    assert s["peak_queue"] == 0
    assert summarize_stress([_row(True)], {})["peak_queue"] is None
    assert summarize_stress([_row(True)], {"kernel_stats": {"peak_queued": 2}, "resources": {"peak_queued": 5}})["peak_queue"] == 5


def test_kernel_counters_are_the_runs_own_on_a_kept_sandbox():
    """A kept sandbox's kernel counts every run it served (issue 22 item 8). Before: the
    totals at the end were shown as the run's; now the end minus the start, and
    "lifetime" said out loud when no start value exists."""
    from harness.scenarios.stress import render_stress

    end = {"executed": 50, "rejected": 2, "peak_queued": 7, "children": 0, "llm_state": "ok"}
    start = {"executed": 40, "rejected": 2, "peak_queued": 7, "children": 0, "llm_state": "ok"}
    s = summarize_stress([_row(True)] * 10, {"kernel_stats": end, "kernel_stats_start": start, "resources": {}, "orphans": None})
    assert s["kernel"] == {"executed": 10, "rejected": 0, "children": 0, "llm_state": "ok"} and s["kernel_counted"] == "run"
    assert s["peak_queue"] is None  # 7 was reached before this run: not its peak
    raised = summarize_stress([_row(True)], {"kernel_stats": {**end, "peak_queued": 9}, "kernel_stats_start": start, "resources": {}})
    assert raised["kernel"]["peak_queued"] == 9 and raised["peak_queue"] == 9
    kept = summarize_stress([_row(True)], {"kernel_stats": end, "resources": {}, "orphans": None})  # a run stored before the start was read
    assert kept["kernel"]["executed"] == 50 and kept["kernel_counted"] == "lifetime"
    report = render_stress({"settings": {}, "checks": []}, kept)
    assert "lifetime totals" in report
    launched = summarize_stress([_row(True)], {"kernel_stats": end, "resources": {}, "orphans": []})
    assert launched["kernel_counted"] == "run" and "this run's" in render_stress({"settings": {}, "checks": []}, launched)
