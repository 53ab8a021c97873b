"""report.html's charts show what the tables show (issue 22 item 8): failed
turns are drawn, not dropped; the latency CDF counts the turns the tables
count; find-max's rate axis starts at 0 and its levels read as numbers. The
charts are the real functions of harness/results/htmlreport.py on hand-made
rows, drawn by matplotlib, read back from the figure."""

from __future__ import annotations

import re

from harness.results.htmlreport import _mpl, _svg, cmp_distributions, findmax_stages, latency_cdf
from harness.scenarios.stress import summarize_stress


def drawn(fig):
    _svg(fig)  # laid out as report.html draws it: ticks and limits final
    return fig


def ticks(ax) -> list[str]:
    return [t.get_text() for t in ax.get_xticklabels()]


def cmp_row(dim: str, version: str, passed: bool, latency_s: float) -> dict:
    return {"kind": "cmp", "dim": dim, "version": version, "passed": passed, "latency_s": latency_s,
            **({} if passed else {"failures": ["error_frame:llm_error"]})}


def test_cmp_panel_draws_a_new_whose_batch_turns_all_failed():
    """Before: the box plot took passed turns only, so the batch panel showed OLD alone."""
    rows = [cmp_row("batch", "old", True, 0.3 + i / 100) for i in range(4)] + [cmp_row("batch", "new", False, 0.05 + i / 100) for i in range(4)]
    rows += [cmp_row("concurrency", v, True, 0.2) for v in ("old", "new") for _ in range(3)]
    fig = drawn(cmp_distributions(_mpl(), {"scenario": "cmp"}, rows, {}))
    batch = next(ax for ax in fig.axes if ax.get_title() == "batch")
    assert ticks(batch) == ["old", "new\n4 of 4 failed"], ticks(batch)
    # the four failed turns are on the panel, at NEW's place and their latency
    xs = [tuple(p) for c in batch.collections for p in c.get_offsets()]
    assert sorted(round(y, 1) for x, y in xs if x == 2) == [50.0, 60.0, 70.0, 80.0], xs
    conc = next(ax for ax in fig.axes if ax.get_title() == "concurrency")
    assert ticks(conc) == ["old", "new"]
    assert "4 of 4 failed" in _svg(fig)


def test_latency_cdf_counts_the_turns_the_tables_count():
    """Before: warm-up turns were in the CDF (n=2150 where the tables said 1314)."""
    rows = [{"kind": "load", "passed": True, "t_rel": i * 0.01, "latency_s": 0.1 + i / 1000, "marker": None, "warmup": i < 30}
            for i in range(100)]
    rows += [{"kind": "probe", "passed": True, "t_rel": 2.0, "latency_s": 0.1}, {"kind": "load", "passed": False, "t_rel": 2.0, "latency_s": 0.1}]
    s = summarize_stress(rows, {}, {"warmup_s": 0.3})
    n = s["latency_by_marker"]["all"]["n"]
    assert n == 70
    fig = latency_cdf(_mpl(), {"scenario": "stress", "summary": s}, rows, {})
    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert legend == [f"all (n={n})"], legend


def test_findmax_throughput_axis_starts_at_0_and_levels_read_as_numbers():
    """Before: the rate axis started near the lowest rate (50), the x ticks read 2², 2³."""
    stages = [{"stage": i + 1, "level": lv, "throughput_per_s": tp, "held": lv < 32, "latency_s": {"p95": 0.2 + i / 10}}
              for i, (lv, tp) in enumerate(((4, 50.0), (8, 52.0), (16, 55.0), (32, 56.0)))]
    doc = {"scenario": "findmax", "summary": {"stages": stages, "max_level": 16, "unit": "connections"}}
    fig = drawn(findmax_stages(_mpl(), doc, [], {}))
    rate, p95 = fig.axes
    assert rate.get_ylim()[0] == 0 and p95.get_ylim()[0] == 0, (rate.get_ylim(), p95.get_ylim())
    labels = ticks(rate)
    assert labels == ["4", "8", "16", "32"], labels
    assert not any(re.search(r"\^|mathdefault", t) for t in labels)
