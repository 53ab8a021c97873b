"""report.html's attempt timeline for a resilience run (issue 24 item 3): one
lane per fault class's example, each attempt where and in the colour the mock
recorded it, the Retry-After as a bar from the attempt's end, the client's
answer labelled by its outcome; drawn for a resilience run only, and a
timeline with holes draws what it has. The real chart function of
harness/results/htmlreport.py on hand-made summaries, read back from the
figure and from the page render_html writes."""

from __future__ import annotations

from matplotlib.colors import to_rgba

from harness.results.htmlreport import _mpl, _svg, attempt_timeline, render_html


def attempt(t, end, fault=None, status=200, retry_after=None, followup=False):
    return {"t_s": t, "end_s": end, "fault": fault, "status": status, "retry_after_s": retry_after, "followup": followup}


# the 429 lane's second attempt came 0.3 s after the first was told to wait 1 s: early
TIMELINE = [
    {"class": "429", "marker": "!flaky:429x2 !batch2", "nonce": "n-429",
     "attempts": [attempt(0.0, 0.002, "429", 429, 1.0), attempt(0.3, 0.302, "429", 429, 1.0), attempt(1.4, 1.5), attempt(1.55, 1.65, followup=True)],
     "client": {"t_s": 1.7, "outcome": "response"}, "outcomes": ["retry_after_ignored"]},
    {"class": "stall", "marker": "!stall !batch2", "nonce": "n-stall",
     "attempts": [attempt(0.0, 3.0, "stall"), attempt(3.1, 3.2, "reset", None), attempt(3.5, 3.6, "truncate"), attempt(3.9, 4.0, "529", 529)],
     "client": {"t_s": 4.1, "outcome": "error"}, "outcomes": ["gave_up"]},
]


def resilience_doc(timeline, scenario="resilience"):
    return {"scenario": scenario, "passed": False, "summary": {"timeline": timeline}}


def drawn(doc):
    fig = attempt_timeline(_mpl(), doc, [], {})
    if fig is not None:
        _svg(fig)  # laid out as report.html draws it
    return fig


def points(ax) -> list[tuple[float, float, tuple]]:
    """(x, lane, face colour or None when hollow) of every scatter point, stars included."""
    out = []
    for c in ax.collections:
        faces = c.get_facecolors()
        for i, (x, y) in enumerate(c.get_offsets()):
            face = tuple(round(v, 3) for v in faces[i % len(faces)]) if len(faces) else None
            out.append((round(float(x), 3), round(float(y), 3), face))
    return out


def rgba(name):
    return tuple(round(v, 3) for v in to_rgba(name))


def test_the_page_has_the_chart_with_a_lane_per_example_and_another_scenario_has_none():
    page = render_html(resilience_doc(TIMELINE), [], "# kstress resilience\n\n## Outcomes\n")
    assert page.count('data-chart="attempt-timeline"') == 1, page[:2000]
    assert "could not be drawn" not in page
    fig = drawn(resilience_doc(TIMELINE))
    (ax, ) = fig.axes
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert lanes == ["429\n!flaky:429x2 !batch2", "stall\n!stall !batch2"], lanes
    # the first example on top
    assert ax.get_ylim()[0] > ax.get_ylim()[1]
    for other in ("stress", "findmax", None):
        assert 'data-chart="attempt-timeline"' not in render_html(resilience_doc(TIMELINE, other), [], "# kstress\n")
        assert drawn(resilience_doc(TIMELINE, other)) is None
    assert drawn(resilience_doc([])) is None
    assert drawn({"scenario": "resilience", "summary": {}}) is None


def test_attempts_retry_after_and_the_answer_are_where_the_mock_recorded_them():
    (ax, ) = drawn(resilience_doc(TIMELINE)).axes
    pts = points(ax)
    # each attempt at its arrival on its lane, coloured by its fault
    assert (0.0, 0.0, rgba("tab:orange")) in pts and (0.3, 0.0, rgba("tab:orange")) in pts, pts
    assert (1.4, 0.0, rgba("tab:green")) in pts
    assert (1.55, 0.0, None) in pts  # the follow-up call is hollow (no face): not a retry
    assert {(x, c) for x, y, c in pts if y == 1.0} >= {(0.0, rgba("tab:purple")), (3.1, rgba("black")), (3.5, rgba("tab:brown")), (3.9, rgba("tab:red"))}, pts
    # the Retry-After bars start where the attempt ended, not where it began: the retry at 0.3 falls inside the first
    bars = sorted((round(p.get_x(), 3), round(p.get_x() + p.get_width(), 3), round(p.get_y() + p.get_height() / 2, 3)) for p in ax.patches)
    assert bars == [(0.002, 1.002, 0.0), (0.302, 1.302, 0.0)], bars
    assert bars[0][0] < 0.3 < bars[0][1]
    # the stall is a line from its arrival to its end
    lines = [tuple(round(float(v), 3) for v in ln.get_xdata()) + (float(ln.get_ydata()[0]),) for ln in ax.get_lines()]
    assert (0.0, 3.0, 1.0) in lines, lines
    # the client's answer: a star at its time, labelled by its outcome and the grade
    stars = [(x, y) for x, y, c in pts if c == rgba("tab:blue")]
    assert stars == [(1.7, 0.0), (4.1, 1.0)], pts
    texts = {t.get_text(): tuple(round(float(v), 3) for v in t.xy) for t in ax.texts}
    assert texts == {"response (retry_after_ignored)": (1.7, 0.0), "error (gave_up)": (4.1, 1.0)}, texts
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"429 / rate limit", "normal reply", "stall (line: until it ended)", "connection reset", "truncated stream", "5xx / 529",
            "hollow: a follow-up call", "Retry-After given", "client's answer (outcome)"} == set(legend), legend


def test_a_timeline_with_holes_draws_what_it_has():
    """The timeline is built from the mock's records and the kernel's reply, so
    any value may be missing or None; none of it may cost the report."""
    broken = [
        {"class": "429", "marker": "!flaky:429x2 $\\nope{$", "attempts": [
            attempt(0.0, None, "429", 429, 1.0),  # no end: no bar, the attempt still drawn
            attempt(None, None, "429", 429, None),  # no time at all: nothing to place
            {"fault": "500"},  # keys missing
            "not an attempt", None,
            attempt(0.5, 0.6, "stall"),  # a stall with an end: line
            attempt(0.7, None, "stall"),  # a stall without: marker only
            attempt(0.9, 1.0, "weird"), attempt(True, 1.0),  # an unknown fault, a bool for a time
            attempt(1.2, 1.3, None, 200, float("nan")),
        ], "client": {"t_s": None, "outcome": "response"}, "outcomes": None},
        {"class": None, "marker": None, "attempts": None, "client": None},
        {"attempts": "no", "client": {"t_s": 2.0}, "outcomes": ["gave_up", None, "$\\nope{$"]},
        "not an example", None, 42,
        {},
    ]
    # a marker or an outcome with a $ pair is text: as mathtext, "$\\nope{$" would fail the whole chart
    page = render_html(resilience_doc(broken), [], "# kstress resilience\n")
    assert 'data-chart="attempt-timeline"' in page and "could not be drawn" not in page, page[-3000:]
    (ax, ) = drawn(resilience_doc(broken)).axes
    lanes = [t.get_text() for t in ax.get_yticklabels()]
    assert lanes == ["429\n!flaky:429x2 $\\nope{$", "?", "?", "?"], lanes
    assert sorted(x for x, y, c in points(ax) if y == 0.0) == [0.0, 0.5, 0.7, 0.9, 1.2], points(ax)
    assert (0.9, 0.0, rgba("tab:gray")) in points(ax)
    assert not ax.patches  # no bar had both an end and a Retry-After
    assert [t.get_text() for t in ax.texts] == ["? (gave_up, $\\nope{$)"]
    # a timeline that is not a list, or holds no example, is no chart (and no error)
    for tl in ("timeline", {"class": "429"}, [None, "x"], None):
        assert drawn(resilience_doc(tl)) is None
        assert "could not be drawn" not in render_html(resilience_doc(tl), [], "# kstress resilience\n")
