"""report.html: the run's charts and its Markdown report in one
self-contained page — inline SVG drawn by matplotlib, no script, no fetch
(a Content-Security-Policy forbids any), so it opens offline from a file.

Why matplotlib (../shared/research/report-libraries.md): static SVG needs no
JavaScript, so the page cannot log a script error or break on an old browser;
a chart is ~15 KiB (plotly's page is ~4.7 MiB of JS before the first chart, and
CI keeps many runs); output is reproducible (fixed hash salt, no date), so two
reports of the same data diff clean. Scatters of many points are rasterized
inside the SVG (a PNG of the dots, axes still vector), which keeps a
10,000-turn report small.

Every chart is drawn only when the run has its data; each is a
``<figure class="chart" data-chart="NAME">`` so a browser test can find them.
"""

from __future__ import annotations

import html
import io
import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

RASTER_ABOVE = 2_000  # points in a scatter before it is rasterized
MAX_LINE_POINTS = 600  # a CDF or a time series is thinned to this many points
MAX_MARKERS = 8  # markers drawn apart; the rest are "other"
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
STYLE = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;max-width:1100px;padding:1.5em;color:#222}
h1{font-size:1.5em} h2{font-size:1.2em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.6em 0} td,th{border:1px solid #ddd;padding:.25em .6em;text-align:right}
th{background:#f4f4f4} td:first-child,th:first-child{text-align:left}
code{background:#f4f4f4;padding:0 .2em} figure.chart{margin:1em 0;border:1px solid #eee;padding:.5em}
figure.chart svg{max-width:100%;height:auto} figcaption{color:#555;font-size:.92em}
nav a{margin-right:1em}
"""


def _mpl() -> Any:
    import matplotlib

    matplotlib.use("svg", force=True)
    matplotlib.rcParams.update({"svg.hashsalt": "kstress", "svg.fonttype": "none", "font.size": 9, "axes.grid": True, "grid.alpha": 0.3})
    from matplotlib.figure import Figure

    return Figure


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None}, bbox_inches="tight")
    text = buf.getvalue()
    return text[text.index("<svg"):]


def _thin(xs: Sequence[Any], n: int = MAX_LINE_POINTS) -> list[Any]:
    if len(xs) <= n:
        return list(xs)
    step = len(xs) / n
    out = [xs[int(i * step)] for i in range(n)]
    out[-1] = xs[-1]
    return out


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _timed(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if _num(r.get("t_rel")) and _num(r.get("latency_s"))]


def _markers(rows: list[dict[str, Any]]) -> list[str]:
    counts: dict[str, int] = {}
    for r in rows:
        m = r.get("marker") or "text"
        counts[m] = counts.get(m, 0) + 1
    return [m for m, _ in sorted(counts.items(), key=lambda kv: -kv[1])]


# --- the charts: each takes what it needs and returns a figure or None ------------------


def latency_over_time(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    timed = [r for r in _timed(rows) if r.get("kind") != "probe"]
    if len(timed) < 2:
        return None
    fig = Figure(figsize=(9, 3.4))
    ax = fig.subplots()
    markers = _markers(timed)
    shown = markers[:MAX_MARKERS]
    raster = len(timed) > RASTER_ABOVE
    for m in shown + (["other"] if len(markers) > MAX_MARKERS else []):
        sel = [r for r in timed if r.get("passed") and ((r.get("marker") or "text") == m or (m == "other" and (r.get("marker") or "text") not in shown))]
        if sel:
            ax.scatter([r["t_rel"] for r in sel], [r["latency_s"] * 1000 for r in sel], s=6, alpha=0.6, label=m, rasterized=raster)
    bad = [r for r in timed if not r.get("passed")]
    if bad:
        ax.scatter([r["t_rel"] for r in bad], [r["latency_s"] * 1000 for r in bad], s=18, marker="x", color="crimson", label=f"failed ({len(bad)})", rasterized=raster)
    warm = [r["t_rel"] for r in timed if r.get("warmup")]
    if warm:
        ax.axvspan(min(r["t_rel"] for r in timed), max(warm), color="0.85", alpha=0.5, label="warm-up")
    t0 = (doc.get("extras") or {}).get("load_t0_rel") or 0.0
    for st in ((doc.get("summary") or {}).get("stages") or [])[:-1]:
        if _num(st.get("to_s")):
            ax.axvline(t0 + st["to_s"], color="0.5", lw=0.8, ls="--")
    ax.set_xlabel("s since the run started (send time)")
    ax.set_ylabel("latency, ms")
    ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=4, loc="upper left")
    return fig


def latency_cdf(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    # the rows the latency tables count (summary.latency_by_marker): warm-up turns are out of every statistic
    passed = [r for r in _timed(rows) if r.get("passed") and r.get("kind") != "probe" and not r.get("warmup")]
    if len(passed) < 2:
        return None
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    groups = [("all", passed)] + [(m, [r for r in passed if (r.get("marker") or "text") == m]) for m in _markers(passed)[:MAX_MARKERS]]
    for name, sel in groups:
        xs = sorted(r["latency_s"] * 1000 for r in sel)
        if len(groups) == 2 and name != "all":
            continue  # one marker: its curve is the all-turns one
        ys = [(i + 1) / len(xs) for i in range(len(xs))]
        pts = _thin(list(zip(xs, ys)))
        ax.step([p[0] for p in pts], [p[1] for p in pts], where="post", label=f"{name} (n={len(xs)})", lw=2 if name == "all" else 1)
    for q in (0.5, 0.95, 0.99):
        ax.axhline(q, color="0.6", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("latency, ms (passed turns)")
    ax.set_ylabel("fraction of turns ≤ x")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def inflight_throughput(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    timed = [r for r in _timed(rows) if r.get("kind") != "probe"]
    tp = ((doc.get("summary") or {}).get("throughput") or {}).get("windows")
    if len(timed) < 2:
        return None
    events = sorted([(r["t_rel"], 1) for r in timed] + [(r["t_rel"] + r["latency_s"], -1) for r in timed])
    # a uniform sample of the rows holds that share of the turns in flight at each instant
    scale = ctx["sampled"]["of"] / ctx["sampled"]["rows"] if ctx.get("sampled") else 1
    t, level, xs, ys = 0.0, 0, [], []
    for t, d in events:
        xs.append(t)
        ys.append(level * scale)
        level += d
        xs.append(t)
        ys.append(level * scale)
    pts = _thin(list(zip(xs, ys)), 2 * MAX_LINE_POINTS)
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    ax.plot([p[0] for p in pts], [p[1] for p in pts], color="tab:blue", lw=1, label="in flight")
    ax.set_xlabel("s since the run started")
    ax.set_ylabel("turns in flight", color="tab:blue")
    ax.set_ylim(bottom=0)
    if tp:
        ax2 = ax.twinx()
        ax2.grid(False)
        window = ((doc.get("summary") or {}).get("throughput") or {}).get("window_s") or 1.0
        # each window's rate drawn across the window it was counted in
        ax2.step([w[0] for w in tp] + [tp[-1][0] + window], [w[1] for w in tp] + [tp[-1][1]], where="post", color="tab:green", label="passed/s")
        ax2.set_ylabel("passed turns per s (per window)", color="tab:green")
        ax2.set_ylim(bottom=0)
    return fig


def _samples(ctx: dict[str, Any]) -> list[dict[str, Any]]:
    if "samples" not in ctx:
        out = []
        p = ctx["dir"] / "resources.jsonl" if ctx.get("dir") else None
        if p is not None and p.exists():
            for line in p.read_text(errors="replace").splitlines():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    continue  # a torn last line of a killed run
        ctx["samples"] = out
    return ctx["samples"]


def kernel_counters(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    ks = [(s["t"], s["kernel"]) for s in _samples(ctx) if _num(s.get("t")) and isinstance(s.get("kernel"), dict)]
    if len(ks) < 2:
        return None
    fig = Figure(figsize=(9, 3.2))
    ax = fig.subplots()
    for key in ("queued", "running", "children"):
        if any(_num(k.get(key)) for _, k in ks):
            ax.plot([t for t, _ in ks], [k.get(key) if _num(k.get(key)) else float("nan") for _, k in ks], label=key)
    ax.set_xlabel("s since sampling began")
    ax.set_ylabel("count")
    ax.set_ylim(bottom=0)
    if any(_num(k.get("executed")) for _, k in ks):
        ax2 = ax.twinx()
        ax2.grid(False)
        pairs = [(t, k["executed"]) for t, k in ks if _num(k.get("executed"))]
        rate = [(b[0], (b[1] - a[1]) / (b[0] - a[0])) for a, b in zip(pairs, pairs[1:]) if b[0] > a[0]]
        ax2.plot([r[0] for r in rate], [r[1] for r in rate], color="tab:gray", lw=0.8, ls="--", label="executed/s")
        ax2.set_ylabel("executed per s")
    ax.legend(fontsize=7, loc="upper left")
    return fig


def resources(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    ss = [s for s in _samples(ctx) if _num(s.get("t")) and _num(s.get("rss_mb"))]
    if len(ss) < 2:
        return None
    fig = Figure(figsize=(9, 4.2))
    axes = fig.subplots(2, 2, sharex=True)
    for ax, (key, label) in zip(axes.flat, (("rss_mb", "RSS, MB"), ("cpu_pct", "CPU, %"), ("fds", "open fds"), ("children", "child processes"))):
        ax.plot([s["t"] for s in ss], [s.get(key) if _num(s.get(key)) else float("nan") for s in ss], lw=1)
        ax.set_ylabel(label)
    for ax in axes[1]:
        ax.set_xlabel("s since sampling began")
    return fig


def abtest_speedup(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    if doc.get("scenario") != "abtest":
        return None
    rs = [r for r in (doc.get("summary") or {}).get("rows") or () if _num(r.get("n"))]
    if not rs:
        return None
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    ns = [r["n"] for r in rs]
    ax.plot(ns, [r.get("ideal") if _num(r.get("ideal")) else r["n"] for r in rs], color="0.5", ls="--", label="ideal (all N at once)")
    ok = [r for r in rs if _num(r.get("speedup"))]
    if ok:
        lo = [r["speedup"] - r["speedup_ci"][0] if isinstance(r.get("speedup_ci"), (list, tuple)) and _num(r["speedup_ci"][0]) else 0 for r in ok]
        hi = [r["speedup_ci"][1] - r["speedup"] if isinstance(r.get("speedup_ci"), (list, tuple)) and _num(r["speedup_ci"][1]) else 0 for r in ok]
        ax.errorbar([r["n"] for r in ok], [r["speedup"] for r in ok], yerr=[lo, hi], fmt="o-", capsize=4, label="measured speedup (95% CI)")
    bad = [r for r in rs if not _num(r.get("speedup"))]
    if bad:
        ax.scatter([r["n"] for r in bad], [1] * len(bad), marker="x", color="crimson", label="no valid measurement")
    ax.set_xlabel("N (calls in the batch)")
    ax.set_ylabel("speedup = serial / concurrent")
    ax.legend(fontsize=7)
    return fig


def cmp_distributions(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    if doc.get("scenario") != "cmp":
        return None
    # every turn of a version, passed or failed: a NEW whose turns all failed
    # must not vanish from its panel (its box is missing, its failures are not)
    groups: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        if r.get("kind") == "cmp":
            groups.setdefault(r.get("dim") or "?", {}).setdefault(r.get("version") or "?", []).append(r)
    if not groups:
        return None
    fig = Figure(figsize=(9, 3.4))
    axes = fig.subplots(1, len(groups), squeeze=False)[0]
    for ax, (dim, by) in zip(axes, sorted(groups.items())):
        names = [v for v in ("old", "new") if v in by] + [v for v in by if v not in ("old", "new")]
        labels = []
        for i, v in enumerate(names, start=1):
            ok = [r["latency_s"] * 1000 for r in by[v] if r.get("passed") and _num(r.get("latency_s"))]
            bad = [r for r in by[v] if not r.get("passed")]
            if ok:
                ax.boxplot([ok], positions=[i], widths=0.5, showfliers=True, flierprops={"markersize": 2})
            timed_bad = [r["latency_s"] * 1000 for r in bad if _num(r.get("latency_s"))]
            if timed_bad:
                ax.scatter([i] * len(timed_bad), timed_bad, s=18, marker="x", color="crimson", zorder=3)
            labels.append(v + (f"\n{len(bad)} of {len(by[v])} failed" if bad else ""))
        ax.set_xticks(range(1, len(names) + 1), labels)
        ax.set_xlim(0.4, len(names) + 0.6)
        ax.set_title(dim, fontsize=9)
        ax.set_ylabel("turn latency, ms (failed: red x)")
    return fig


def findmax_stages(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    from matplotlib.ticker import NullLocator

    s = doc.get("summary") or {}
    stages = s.get("stages") or []
    if doc.get("scenario") != "findmax" or not stages:
        return None
    fig = Figure(figsize=(8, 3.4))
    ax = fig.subplots()
    lv = [h["level"] for h in stages]
    ax.plot(lv, [h.get("throughput_per_s") or 0 for h in stages], "o-", color="tab:green", label="throughput")
    for h in stages:
        if not h.get("held"):
            ax.axvline(h["level"], color="crimson", ls="--", lw=1)
    if _num(s.get("max_level")):
        ax.axvline(s["max_level"], color="tab:green", ls=":", lw=1.2)
    # levels grow by a factor: log-spaced, but labelled with the levels themselves (not 2², 2³)
    ax.set_xscale("log", base=2)
    ax.set_xticks(lv, [f"{x:g}" for x in lv])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"level ({s.get('unit') or 'connections'}); dotted: max sustainable, dashed red: broke an --slo")
    ax.set_ylabel("passed per s", color="tab:green")
    ax.set_ylim(bottom=0)  # a rate axis from 0: one cut at 50 makes a 10% gain look like a doubling
    ax2 = ax.twinx()
    ax2.grid(False)
    ax2.plot(lv, [((h.get("latency_s") or {}).get("p95") or float("nan")) * 1000 for h in stages], "s-", color="tab:orange", label="p95")
    ax2.set_ylabel("p95, ms", color="tab:orange")
    ax2.set_ylim(bottom=0)
    return fig


def anatomy(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    an = (doc.get("summary") or {}).get("anatomy") or {}
    if not an:
        return None
    fig = Figure(figsize=(8, 0.9 + 0.45 * len(an)))
    ax = fig.subplots()
    names = list(an)
    left = [0.0] * len(names)
    for key, label, color in (("llm_s", "LLM", "tab:blue"), ("tool_s", "tools", "tab:orange"), ("overhead_s", "kernel overhead", "tab:red")):
        vals = [max(0.0, ((an[m].get(key) or {}).get("p50") or 0.0) * 1000) for m in names]
        ax.barh(names, vals, left=left, label=label, color=color)
        left = [a + b for a, b in zip(left, vals)]
    ax.set_xlabel("ms (p50 of each part, passed turns)")
    ax.invert_yaxis()
    ax.legend(fontsize=7, loc="lower right")
    return fig


def session_turns(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    bt = [b for b in (doc.get("summary") or {}).get("by_turn") or () if _num(b.get("p50"))]
    if doc.get("scenario") != "sessions" or not bt:
        return None
    fig = Figure(figsize=(8, 3.2))
    ax = fig.subplots()
    ax.plot([b["turn"] for b in bt], [b["p50"] * 1000 for b in bt], "o-", label="p50")
    ax.plot([b["turn"] for b in bt], [(b.get("p95") or float("nan")) * 1000 for b in bt], "s--", label="p95")
    ax.set_xlabel("turn index within the session")
    ax.set_ylabel("latency, ms")
    ax.legend(fontsize=7)
    return fig


# an attempt's colour by the fault the mock served it (its record's "fault")
FAULT_STYLE: dict[str, tuple[str, str]] = {
    "reply": ("tab:green", "normal reply"),
    "429": ("tab:orange", "429 / rate limit"),
    "rate_limit": ("tab:orange", "429 / rate limit"),
    "500": ("tab:red", "5xx / 529"),
    "503": ("tab:red", "5xx / 529"),
    "529": ("tab:red", "5xx / 529"),
    "reset": ("black", "connection reset"),
    "stall": ("tab:purple", "stall (line: until it ended)"),
    "truncate": ("tab:brown", "truncated stream"),
}


def _fault_style(fault: Any) -> tuple[str, str]:
    if fault is None:
        return FAULT_STYLE["reply"]
    f = str(fault)
    if f in FAULT_STYLE:
        return FAULT_STYLE[f]
    if len(f) == 3 and f.startswith("5") and f.isdigit():
        return FAULT_STYLE["500"]
    return ("tab:gray", "other fault")


def attempt_timeline(Figure: Any, doc: dict[str, Any], rows: list[dict[str, Any]], ctx: dict[str, Any]) -> Any:
    """One lane per fault class's example turn: every attempt the mock saw, the
    Retry-After it was given as a light bar from the attempt's end (a retry
    inside the bar came early), and when the client got its answer. The
    timeline comes from the mock's records and the kernel's reply, so a value
    may be missing: a lane draws what it has rather than costing the chart."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    tl = (doc.get("summary") or {}).get("timeline")
    if doc.get("scenario") != "resilience" or not isinstance(tl, list):
        return None
    examples = [e for e in tl if isinstance(e, dict)]
    if not examples:
        return None
    fig = Figure(figsize=(8, 1.4 + 0.55 * len(examples)))
    ax = fig.subplots()
    seen: dict[str, str] = {}  # legend label -> colour, in the order first drawn
    bars = client = followup = False
    labels = []
    for y, ex in enumerate(examples):
        marker = str(ex.get("marker") or "")
        labels.append(f"{ex.get('class') or '?'}" + (f"\n{marker[:48]}" if marker else ""))
        attempts = [a for a in ex.get("attempts") or () if isinstance(a, dict)] if isinstance(ex.get("attempts"), list) else []
        for a in attempts:
            color, label = _fault_style(a.get("fault"))
            t, end, ra = a.get("t_s"), a.get("end_s"), a.get("retry_after_s")
            if _num(end) and _num(ra) and ra > 0:
                ax.barh(y, ra, left=end, height=0.4, color="tab:orange", alpha=0.2, lw=0, zorder=1)
                bars = True
            if not _num(t):
                continue
            if a.get("fault") == "stall" and _num(end) and end > t:
                ax.plot([t, end], [y, y], color=color, lw=2, zorder=2)
            # a follow-up call (the turn's next LLM call after a recovered one) is hollow: not a retry
            ax.scatter([t], [y], s=36, marker="o", zorder=3, edgecolors=color,
                       facecolors="none" if a.get("followup") else color, linewidths=1.4)
            seen.setdefault(label, color)
            followup = followup or bool(a.get("followup"))
        c = ex.get("client")
        if isinstance(c, dict) and _num(c.get("t_s")):
            ax.scatter([c["t_s"]], [y], s=110, marker="*", color="tab:blue", edgecolors="black", linewidths=0.5, zorder=4)
            outs = [str(o) for o in ex.get("outcomes") or () if o] if isinstance(ex.get("outcomes"), list) else []
            text = str(c.get("outcome") or "?") + (f" ({', '.join(outs)})" if outs else "")
            ax.annotate(text, (c["t_s"], y), xytext=(7, 5), textcoords="offset points", fontsize=7, parse_math=False, zorder=5)
            client = True
    # kernels' and users' words ($ in a marker) are text, never mathtext
    ax.set_yticks(range(len(examples)), labels, parse_math=False)
    ax.set_ylim(len(examples) - 0.5, -0.5)  # the first example on top
    lo, hi = ax.get_xlim()
    ax.set_xlim(min(0.0, lo), hi + 0.15 * (hi - min(0.0, lo)))  # room for the last lane's outcome label
    ax.set_xlabel("s since the example's first attempt reached the mock")
    handles = [Line2D([], [], ls="", marker="o", color=c, label=lb) for lb, c in seen.items()]
    if followup:
        handles.append(Line2D([], [], ls="", marker="o", color="0.3", markerfacecolor="none", label="hollow: a follow-up call"))
    if bars:
        handles.append(Patch(color="tab:orange", alpha=0.2, label="Retry-After given"))
    if client:
        handles.append(Line2D([], [], ls="", marker="*", markersize=10, color="tab:blue", markeredgecolor="black", label="client's answer (outcome)"))
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


Chart = Callable[[Any, dict[str, Any], list[dict[str, Any]], dict[str, Any]], Any]
CHARTS: list[tuple[str, str, Chart]] = [
    ("findmax-stages", "find-max: throughput and p95 by level", findmax_stages),
    ("abtest-speedup", "Speedup vs N, with the ideal line and 95% confidence intervals", abtest_speedup),
    ("cmp-distributions", "OLD and NEW: turn latency per dimension", cmp_distributions),
    ("attempt-timeline", "Resilience: each fault class's attempts over time (light bar: the Retry-After given; star: the client's answer)", attempt_timeline),
    ("latency-over-time", "Latency over time, per marker (failed turns: red x; stage boundaries dashed)", latency_over_time),
    ("latency-cdf", "Latency distribution (CDF) per marker", latency_cdf),
    ("inflight-throughput", "Turns in flight and passed turns per second", inflight_throughput),
    ("session-turns", "Session latency by turn index", session_turns),
    ("anatomy", "Turn anatomy: where the time went, per marker", anatomy),
    ("kernel-counters", "The kernel's queue and counters over time (its stats frame)", kernel_counters),
    ("resources", "The target's process tree: RSS, CPU, fds, children", resources),
]


def _markdown_without_html(text: str) -> str:
    """report.md as HTML with every tag in it shown as text, never parsed: the
    report quotes kernels (error codes and messages, replies) and users
    (target names, argv), and one ``<meta http-equiv="refresh">`` would take
    the page away (the CSP does not stop a meta refresh). report.md escapes
    what it quotes (report.md_text); this is the second wall, for a value a
    renderer forgot. Python-Markdown has no safe mode since 3.0: dropping its
    raw-HTML block and inline handlers leaves ``<`` to be escaped as text."""
    import markdown

    conv = markdown.Markdown(extensions=["tables", "fenced_code"], output_format="html")
    conv.preprocessors.deregister("html_block")
    conv.inlinePatterns.deregister("html")
    return conv.convert(text)


def render_html(doc: dict[str, Any], rows: list[dict[str, Any]], report_md: str, run_dir: Path | None = None,
                sampled: dict[str, int] | None = None) -> str:
    """The whole page: charts first, then the Markdown report rendered.
    ``sampled``: ``rows`` are a uniform sample of a long run's (``{"rows":
    n, "of": total}``); the tables of report.md are over every turn."""
    Figure = _mpl()
    ctx: dict[str, Any] = {"dir": run_dir, "sampled": sampled}
    figures, errors = [], []
    for name, caption, fn in CHARTS:
        try:
            fig = fn(Figure, doc, rows, ctx)
            if fig is not None:
                figures.append((name, caption, _svg(fig)))
        except Exception as exc:  # noqa: BLE001 - one chart that cannot be drawn must not cost the report
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    title = report_md.splitlines()[0].lstrip("# ").strip() if report_md else f"kstress {doc.get('scenario')}"
    # the report's header (title, target, verdict) on top, the charts, then the rest of it
    cut = report_md.find("\n## ")
    head, rest = (report_md[:cut], report_md[cut:]) if cut >= 0 else (report_md, "")
    md = _markdown_without_html
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>",
        md(head),
        "<nav>" + "".join(f'<a href="#{n}">{html.escape(c.split(":")[0].split(",")[0])}</a>' for n, c, _ in figures) + '<a href="#report">report</a></nav>',
        f'<section id="charts" data-charts="{len(figures)}">',
    ]
    if sampled:
        parts.append(f'<p class="sampled" data-sampled="{sampled["rows"]}">The charts of turns draw a uniform sample of {sampled["rows"]:,} of the run\'s '
                     f'{sampled["of"]:,} rows (the in-flight line scaled by {sampled["of"] / sampled["rows"]:.3g}); every table is over all of them.</p>')
    for name, caption, svg in figures:
        parts.append(f'<figure class="chart" id="{name}" data-chart="{name}">{svg}<figcaption>{html.escape(caption)}</figcaption></figure>')
    if errors:
        parts.append("<p><strong>Charts that could not be drawn:</strong> " + html.escape("; ".join(errors)) + "</p>")
    parts += ["</section>", '<section id="report">', md(rest), "</section></body></html>"]
    return "\n".join(parts)
