"""Service levels: threshold expressions over a run's turns, and the
per-marker latency table they share with every report.

    THRESHOLD := [ '[' SELECTOR ']' ] METRIC OP NUMBER [UNIT]
    SELECTOR  := ITEM (',' ITEM)*          ITEM := MARKER | text | KEY=VALUE
    METRIC    := pN | p(N) | max | mean | pass_rate | errors | errors[NAME] | throughput | attempted | concurrency_ratio
    OP        := < | <= | > | >= | ==

e.g. ``p95<2s``, ``p(99.9)<=5s``, ``pass_rate>=0.99``, ``pass_rate>=99%``,
``errors[busy]<10``, ``throughput>50``, ``[!batch4]p95<1s``,
``[kernel=refkernel-2]pass_rate==1``. Latency is that of passed turns and
needs a unit (ms, s, m): k6 counts a bare ``p(95)<2000`` in milliseconds, and
guessing between the two conventions is how a 2000-second service level
passes. A threshold whose value cannot be measured (a percentile of no passed
turn) fails: a service level nobody measured did not hold.

The caller hands over the rows that count as load (warm-up and probes
excluded); a selector narrows them further by marker (`text` = a plain input)
or by any row field (kernel, version, stage, ...), as k6's tags do.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import UsageError
from .aggregate import EXACT_MAX, HIST_PRECISION, Ends, Level, Quantiles
from .stats import summarize

GRAMMAR = (
    "[SELECTOR]METRIC OP NUMBER[UNIT] — METRIC is pN or p(N) (0..100), max, mean (latency of passed turns: unit ms, s or m), "
    "pass_rate (0..1 or N%), errors, errors[NAME], throughput (passed inputs/s), attempted, concurrency_ratio (turns at the agent / in flight, 0..1 or N%); OP is <, <=, >, >=, ==; "
    "SELECTOR is markers and KEY=VALUE row fields, e.g. p95<2s, pass_rate>=0.99, errors[busy]<10, [!batch4]p95<1s"
)
OPS: dict[str, Callable[[float, float], bool]] = {"<=": operator.le, ">=": operator.ge, "==": operator.eq, "<": operator.lt, ">": operator.gt}
UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0}
LATENCY_PS = (50, 90, 95, 99)

_EXPR = re.compile(
    r"""^\s*(?:\[(?P<sel>[^\]]*)\])?\s*
        (?P<metric>p\(\s*[0-9.]+\s*\)|p[0-9.]+|max|mean|pass_rate|concurrency_ratio|errors(?:\[(?P<name>[^\]]+)\])?|throughput|attempted)\s*
        (?P<op><=|>=|==|<|>)\s*
        (?P<num>[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)\s*
        (?P<unit>ms|s|m|%|/s)?\s*$""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Threshold:
    expr: str
    metric: str  # p<N>, max, mean, pass_rate, errors, throughput, attempted, concurrency_ratio
    op: str
    bound: float  # in base units: seconds, a fraction, a count, per second
    percentile: float | None = None
    error_name: str | None = None
    markers: tuple[str, ...] = ()
    fields: tuple[tuple[str, str], ...] = ()

    @property
    def latency(self) -> bool:
        return self.percentile is not None or self.metric in ("max", "mean")

    def level(self) -> Level:
        """What this threshold keeps of the rows it selects."""
        return Level(concurrency=self.metric == "concurrency_ratio")

    def selects(self, row: dict[str, Any]) -> bool:
        if self.markers and (row.get("marker") or "text") not in self.markers:
            return False
        return all(str(row.get(k)) == v for k, v in self.fields)


@dataclass(frozen=True)
class ThresholdResult:
    expr: str
    value: float | None
    passed: bool
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"expr": self.expr, "value": self.value, "passed": self.passed, "detail": self.detail}


def parse_threshold(expr: str, flag: str = "--threshold") -> Threshold:
    """One expression; a bad one is a UsageError naming ``flag``, the
    expression, what is wrong and the grammar."""

    def _bad(expr: str, why: str) -> UsageError:
        return UsageError(f"{flag} {expr!r}: {why}; the grammar is {GRAMMAR}")

    m = _EXPR.match(expr)
    if not m:
        raise _bad(expr, "not a threshold expression")
    metric, unit, num = m["metric"], m["unit"], float(m["num"])
    markers: list[str] = []
    fields: list[tuple[str, str]] = []
    for item in (m["sel"] or "").split(",") if m["sel"] is not None else ():
        item = item.strip()
        if not item:
            raise _bad(expr, "the selector has an empty item")
        if "=" in item:
            k, _, v = item.partition("=")
            if not re.fullmatch(r"[a-z_][a-z0-9_]*", k.strip()) or not v.strip():
                raise _bad(expr, f"selector item {item!r} is not KEY=VALUE with a row field as KEY")
            fields.append((k.strip(), v.strip()))
        elif item == "text" or re.fullmatch(r"![a-z]+[0-9a-z:_-]*", item):
            markers.append(item)
        else:
            raise _bad(expr, f"selector item {item!r} is neither a marker (!batch4, text) nor KEY=VALUE")
    pct = None
    if metric.startswith("p") and metric not in ("pass_rate",):
        raw = metric[1:].strip("()").strip() if metric.startswith("p(") else metric[1:]
        try:
            pct = float(raw)
        except ValueError:
            raise _bad(expr, f"percentile {raw!r} is not a number") from None
        if not 0 < pct <= 100:
            raise _bad(expr, f"percentile {pct:g} is outside 0 < N <= 100")
        metric = f"p{pct:g}"
    name = m["name"]
    if name is not None:
        metric = "errors"
    if pct is not None or metric in ("max", "mean"):
        if unit not in UNITS:
            raise _bad(expr, f"a latency bound needs a unit (ms, s or m), e.g. {metric}<{m['num']}ms or {metric}<{m['num']}s")
        bound = num * UNITS[unit]
    elif metric in ("pass_rate", "concurrency_ratio"):
        if unit not in (None, "%"):
            raise _bad(expr, f"{metric} is a fraction (0.99) or a percentage (99%), not {unit!r}")
        bound = num / 100 if unit == "%" else num
        if not 0 <= bound <= 1:
            raise _bad(expr, f"{metric} {m['num']}{unit or ''} is outside 0..1 (or 0%..100%)")
    elif metric == "throughput":
        if unit not in (None, "/s"):
            raise _bad(expr, f"throughput is in passed inputs per second (a number, or N/s), not {unit!r}")
        bound = num
    else:  # errors, attempted: counts
        if unit is not None:
            raise _bad(expr, f"{metric} is a count and takes no unit")
        bound = num
    if bound < 0:
        raise _bad(expr, "the bound is negative")
    return Threshold(expr.strip(), metric, m["op"], bound, pct, name.strip() if name else None, tuple(markers), tuple(fields))


def parse_thresholds(exprs: Iterable[str], flag: str = "--threshold") -> tuple[Threshold, ...]:
    """Every expression, each error named: the first bad one ends the run before it starts."""
    return tuple(parse_threshold(e, flag) for e in exprs)


def check_thresholds(settings: Any) -> None:
    """For settings __post_init__: a bad --threshold is a usage error (exit 2)."""
    parse_thresholds(getattr(settings, "thresholds", ()) or ())


def check_mix_markers(exprs: Iterable[str], markers: Sequence[str], flag: str = "--threshold") -> None:
    """A selector's marker that no turn of the run carries selects nothing: a
    count over it (`errors`) passed and a latency failed, neither saying why
    (issue 22, item 15). ``markers``: what the run sends, as its rows name them."""
    sent = list(dict.fromkeys(markers))
    for t in parse_thresholds(exprs, flag):
        for m in t.markers:
            if m not in sent:
                raise UsageError(
                    f"{flag} {t.expr!r}: marker {m} is not in the mix ({','.join(sent)}), so the threshold would judge no turn; "
                    f"add {m} to --mix, or select a marker of the mix"
                )


def span_s(rows: Sequence[dict[str, Any]]) -> float:
    """From the first send to the last end among ``rows``: the time the load
    they are part of took."""
    lvl = Level()
    for r in rows:
        lvl.add(r)
    return lvl.span()


def measure(t: Threshold, rows: Iterable[dict[str, Any]], duration_s: float | None = None) -> tuple[float | None, str]:
    """The threshold's metric over the selected rows, and a note when it could not be measured."""
    lvl = t.level()
    for r in rows:
        if t.selects(r):
            lvl.add(r)
    return measure_level(t, lvl, duration_s)


def measure_level(t: Threshold, lvl: Level, duration_s: float | None = None) -> tuple[float | None, str]:
    """The threshold's metric over the rows its :class:`Level` was fed (the
    selected ones): what a streaming run keeps instead of the rows."""
    q = lvl.lat
    if t.latency:
        if not q.n:
            return None, "no passed turn to measure latency on"
        approx = "" if q.exact else f" (within {HIST_PRECISION:.0%}: a histogram past {EXACT_MAX} samples)"
        if t.percentile is not None:
            return q.percentile(t.percentile), f"over {q.n} passed turns{approx}"
        if t.metric == "max":
            return q.max, f"over {q.n} passed turns"
        xs = q.values()
        return (math.fsum(xs) / len(xs) if xs is not None else q.sum / q.n), f"over {q.n} passed turns"
    if t.metric == "pass_rate":
        if not lvl.attempted:
            return None, "no input attempted"
        return lvl.passed / lvl.attempted, f"{lvl.passed}/{lvl.attempted}"
    if t.metric == "errors":
        if t.error_name is not None:
            wanted = t.error_name
            return float(sum(c for n, c in lvl.failures.items() if name_matches(n, wanted))), f"of {lvl.attempted} attempted"
        return float(lvl.failed), f"of {lvl.attempted} attempted"
    if t.metric == "attempted":
        return float(lvl.attempted), ""
    if t.metric == "concurrency_ratio":
        assert lvl.conc is not None
        c = lvl.conc.achieved()
        if c is None or c.get("ratio") is None:
            return None, (c or {}).get("why") or "no turn ended"
        return c["ratio"], f"{c['agent']['mean']:.2f} at the agent of {c['in_flight']['mean']:.2f} in flight"
    # throughput: passed inputs per second of the load's own span
    span = duration_s if duration_s is not None else lvl.span()
    if span <= 0:
        return None, "no time elapsed"
    return lvl.passed / span, f"{lvl.passed} passed in {span:.2f} s"


def name_matches(name: str, wanted: str) -> bool:
    """``errors[busy]`` counts `error_frame:busy`; ``errors[conn_error]``
    every `conn_error:*`; the whole name matches too."""
    kind, _, sub = name.partition(":")
    return wanted in (name, kind, sub)


def evaluate(thresholds: Sequence[Threshold], rows: Iterable[dict[str, Any]], duration_s: float | None = None) -> list[ThresholdResult]:
    levels = [t.level() for t in thresholds]
    for r in rows:
        for t, lvl in zip(thresholds, levels):
            if t.selects(r):
                lvl.add(r)
    return evaluate_levels(thresholds, levels, duration_s)


def evaluate_levels(thresholds: Sequence[Threshold], levels: Sequence[Level], duration_s: float | None = None) -> list[ThresholdResult]:
    """Each threshold judged on the :class:`Level` of its selection."""
    out = []
    for t, lvl in zip(thresholds, levels):
        value, note = measure_level(t, lvl, duration_s)
        ok = value is not None and OPS[t.op](value, t.bound)
        out.append(ThresholdResult(t.expr, None if value is None else round(value, 6), ok, note))
    return out


def fmt_value(t: Threshold | str, value: float | None) -> str:
    """A measured value in the threshold's own terms (ms for latency, % for a pass rate)."""
    if isinstance(t, str):
        t = parse_threshold(t)
    if value is None:
        return "-"
    if t.latency:
        return f"{value * 1000:.1f} ms"
    if t.metric in ("pass_rate", "concurrency_ratio"):
        return f"{value:.2%}"
    if t.metric == "throughput":
        return f"{value:.2f}/s"
    return f"{value:g}"


# --- the per-marker latency table -------------------------------------------------------


def latency_stats(xs: Sequence[float]) -> dict[str, Any]:
    return _rounded(summarize(xs, LATENCY_PS))


def latency_stats_of(q: Quantiles) -> dict[str, Any]:
    """latency_stats of a streaming series (``rel_error`` when from its histogram)."""
    return _rounded(q.stats(LATENCY_PS))


def _rounded(s: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in s.items() if k != "min"}


def latency_by_marker(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{"all": S, marker: S, ...}``, S = n, p50, p90, p95, p99, max, mean of
    the passed turns' latency (seconds); `text` is a plain input."""
    every, groups = Quantiles(), {}
    for r in rows:
        add_by_marker(every, groups, r)
    return by_marker_of(every, groups)


def add_by_marker(every: Quantiles, groups: dict[str, Quantiles], r: dict[str, Any]) -> None:
    if r.get("passed") and isinstance(r.get("latency_s"), (int, float)):
        every.add(r["latency_s"])
        m = r.get("marker") or "text"
        q = groups.get(m)
        if q is None:
            q = groups[m] = Quantiles()
        q.add(r["latency_s"])


def by_marker_of(every: Quantiles, groups: dict[str, Quantiles]) -> dict[str, dict[str, Any]]:
    out = {"all": latency_stats_of(every)}
    for m in sorted(groups):
        out[m] = latency_stats_of(groups[m])
    return out


def throughput_windows(rows: Iterable[dict[str, Any]], max_windows: int = 60) -> dict[str, Any] | None:
    """Passed turns per second in fixed windows by completion time: the
    stable rate (median of the whole windows, the edges excluded: ramp-up and
    the last partial window) and the peak. Window = 1 s, or longer so that a
    long run has at most ``max_windows``."""
    ends = Ends()
    for r in rows:
        add_end(ends, r)
    return ends.windows(max_windows)


def add_end(ends: Ends, r: dict[str, Any]) -> None:
    t = r.get("t_rel")
    if isinstance(t, (int, float)):
        ends.start(t)
        if r.get("passed") and isinstance(r.get("latency_s"), (int, float)):
            ends.end(t + r["latency_s"])
