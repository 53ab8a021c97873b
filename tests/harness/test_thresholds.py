"""Threshold expressions: the grammar, each metric measured from rows, the
selectors, the per-marker latency table and throughput windows."""

from __future__ import annotations

import pytest

from harness.errors import UsageError
from harness.results.thresholds import (
    evaluate,
    fmt_value,
    latency_by_marker,
    name_matches,
    parse_threshold,
    throughput_windows,
)

pytestmark = pytest.mark.fast


def row(marker="", passed=True, latency=0.1, t=0.0, failure=None, **kw):
    return {"marker": marker, "passed": passed, "latency_s": latency if passed else None, "t_rel": t,
            "failures": [] if passed else [failure or "count 1/4"], **kw}


@pytest.mark.parametrize("expr, metric, op, bound", [
    ("p95<2s", "p95", "<", 2.0),
    ("p99<=5s", "p99", "<=", 5.0),
    ("p(99.9)<=250ms", "p99.9", "<=", 0.25),
    ("max<1m", "max", "<", 60.0),
    ("mean < 300 ms", "mean", "<", 0.3),
    ("pass_rate>=0.99", "pass_rate", ">=", 0.99),
    ("pass_rate>=99%", "pass_rate", ">=", 0.99),
    ("errors[busy]<10", "errors", "<", 10),
    ("errors==0", "errors", "==", 0),
    ("throughput>50", "throughput", ">", 50),
    ("throughput>50/s", "throughput", ">", 50),
    ("attempted>=100", "attempted", ">=", 100),
])
def test_the_grammar_takes_every_documented_form(expr, metric, op, bound):
    t = parse_threshold(expr)
    assert (t.metric, t.op) == (metric, op) and t.bound == pytest.approx(bound)


def test_selectors_are_markers_and_row_fields():
    t = parse_threshold("[!batch4, text, kernel=refkernel-2]p95<1s")
    assert t.markers == ("!batch4", "text") and t.fields == (("kernel", "refkernel-2"),)
    assert t.selects({"marker": "", "kernel": "refkernel-2"}) and t.selects({"marker": "!batch4", "kernel": "refkernel-2"})
    assert not t.selects({"marker": "!batch4", "kernel": "refkernel"}) and not t.selects({"marker": "!img", "kernel": "refkernel-2"})


@pytest.mark.parametrize("expr, says", [
    ("p95<2000", "needs a unit"),
    ("p95 2s", "not a threshold expression"),
    ("latency<2s", "not a threshold expression"),
    ("pass_rate>=1.5", "outside 0..1"),
    ("pass_rate>=0.9s", "fraction"),
    ("errors<3s", "takes no unit"),
    ("p0<1s", "outside 0 < N <= 100"),
    ("p101<1s", "outside 0 < N <= 100"),
    ("[]p95<1s", "empty item"),
    ("[batch4]p95<1s", "neither a marker"),
    ("throughput>5ms", "inputs per second"),
    ("p95=<2s", "not a threshold expression"),
])
def test_a_bad_expression_names_itself_and_the_grammar(expr, says):
    with pytest.raises(UsageError) as e:
        parse_threshold(expr)
    assert repr(expr) in str(e.value) and says in str(e.value) and "the grammar is [SELECTOR]METRIC OP NUMBER[UNIT]" in str(e.value)


def test_each_metric_is_measured_from_the_rows():
    rows = [row("!batch4", latency=x / 10, t=x) for x in range(1, 11)]
    rows += [row("!batch4", passed=False, t=11, failure="error_frame:busy (queue full)"), row("", passed=False, t=11, failure="timeout (60 s)")]
    got = {r.expr: (r.value, r.passed) for r in evaluate([parse_threshold(e) for e in (
        "p50<=0.5s", "p90<0.9s", "max<=1s", "mean<600ms", "pass_rate>=0.8", "errors<2", "errors[busy]<=1",
        "errors[error_frame]==1", "errors[timeout]==0", "attempted==12", "[text]pass_rate==0", "[!batch4]p95<2s", "throughput>0.5")], rows)}
    assert got["p50<=0.5s"] == (0.5, True)
    assert got["p90<0.9s"] == (0.9, False)  # nearest rank: a value that was observed
    assert got["max<=1s"] == (1.0, True)
    assert got["mean<600ms"][0] == pytest.approx(0.55) and got["mean<600ms"][1]
    assert got["pass_rate>=0.8"] == (pytest.approx(10 / 12), True)
    assert got["errors<2"] == (2, False)
    assert got["errors[busy]<=1"] == (1, True) and got["errors[error_frame]==1"] == (1, True)
    assert got["errors[timeout]==0"] == (1, False)
    assert got["attempted==12"] == (12, True)
    assert got["[text]pass_rate==0"] == (0, True)
    assert got["[!batch4]p95<2s"] == (1.0, True)
    assert got["throughput>0.5"][0] == pytest.approx(1.0)  # 10 passed from the first send (t=1) to the last end (t=10+1.0)


def test_a_service_level_nobody_measured_did_not_hold():
    [r] = evaluate([parse_threshold("p95<1s")], [row(passed=False)])
    assert r.value is None and not r.passed and "no passed turn" in r.detail
    [r] = evaluate([parse_threshold("[!img]pass_rate>=0.9")], [row("!batch4")])
    assert r.value is None and not r.passed


def test_failure_names_match_whole_kind_or_sub():
    assert name_matches("error_frame:busy", "busy") and name_matches("error_frame:busy", "error_frame") and name_matches("error_frame:busy", "error_frame:busy")
    assert not name_matches("error_frame:busy", "bus") and not name_matches("count", "busy")


def test_values_are_shown_in_the_thresholds_terms():
    assert fmt_value("p95<2s", 0.1234) == "123.4 ms" and fmt_value("pass_rate>=0.9", 0.987) == "98.70%"
    assert fmt_value("throughput>1", 12.345) == "12.35/s" and fmt_value("errors<1", 3.0) == "3" and fmt_value("p95<1s", None) == "-"


def test_latency_by_marker_has_the_all_row_first_and_every_percentile():
    rows = [row("!batch4", latency=0.2), row("!batch4", latency=0.4), row("", latency=0.1), row("!img", passed=False)]
    t = latency_by_marker(rows)
    assert list(t) == ["all", "!batch4", "text"]
    assert t["all"]["n"] == 3 and t["all"]["max"] == 0.4 and t["!batch4"]["p50"] == 0.2 and t["!batch4"]["mean"] == pytest.approx(0.3)
    assert set(t["text"]) == {"n", "p50", "p90", "p95", "p99", "max", "mean"}


def test_throughput_windows_stable_excludes_the_edges_and_peak_is_the_max():
    # 1 s windows over 10 s: a ramp in the first window, 5/s after, a burst of 9 in window 5
    rows = [row(t=0.5, latency=0.1)]
    rows += [row(t=w + k / 5, latency=0.01) for w in range(1, 10) for k in range(5)]
    rows += [row(t=5.1, latency=0.01) for _ in range(4)]
    tp = throughput_windows(rows)
    assert tp["window_s"] == 1.0 and tp["stable_per_s"] == 5.0 and tp["peak_per_s"] == 9.0
    assert len(tp["windows"]) == 10
    long = throughput_windows([row(t=float(x), latency=0.01) for x in range(600)])
    assert long["window_s"] == 10.0 and len(long["windows"]) <= 60
    assert throughput_windows([row(passed=False)]) is None


def test_a_selected_marker_must_be_one_the_run_sends():
    # the bad-input rows (tests/e2e/test_bad_inputs.py) show the refusal; here, what counts as sent
    from harness.scenarios.findmax import FindmaxSettings
    from harness.scenarios.stress import StressSettings

    StressSettings(mix="!batch4:3,text:1", thresholds=("[!batch4,text]p95<1s", "[kernel=a]errors<1"))
    StressSettings(mix="text", interrupts=2, thresholds=("[!batch2]p95<1s",))  # the interrupt inputs' marker
    with pytest.raises(UsageError, match=r"marker !batch2 is not in the mix \(text\)"):
        StressSettings(mix="text", thresholds=("[!batch2]p95<1s",))
    with pytest.raises(UsageError, match=r"--slo '\[!img\]p95<1s': marker !img is not in the mix"):
        FindmaxSettings(slos=("[!img]p95<1s",), mix="!batch4")
