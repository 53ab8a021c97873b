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
