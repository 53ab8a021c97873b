"""`kstress compare OLD_RUN NEW_RUN`: the mechanics of comparing two stored
run directories of the same scenario, row by row, with cmp's rule
(:func:`verdict_row`: Mann-Whitney U at alpha and a minimum effect; rates in
percentage points). CI keeps the baseline run directory, not the old binary.

What a scenario compares is its own: its registry entry's ``compare`` is a
:class:`CompareSpec` (the turn kinds its statistics count, the settings that
must match, the rows after the pass rate, or why its runs are refused), built
from the row helpers here. This module knows no scenario by name.

Rows (each: better | worse | same | inconclusive | unmeasurable): the pass rate always,
then the scenario's (stress and sessions: latency, all and per marker, from the
schedule in the open model, throughput, stress the target's resources; batch:
per marker tool phase and latency; abtest: per N speedup and tool phase).

Stored runs were not interleaved: a timed row the within-run test calls
better or worse is *inconclusive* (exit 0) unless its medians lie further
apart than :data:`DRIFT_BANDS` times the wider p10..p90 band of either run
(:func:`drift_rule`; docs/metrics.md, "drift between stored runs").

Values a run has only once (peaks, start-up, memory per session) are shown
side by side, never tested. Two runs whose settings make the comparison
meaningless are refused (UsageError, exit 2) naming the difference: see each
spec's ``must_match`` and ``contract_keys``, :data:`TARGET_MUST_MATCH` and
docs/results.md, "Comparing stored runs".
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from ..errors import UsageError
from ..judge import failure_counts
from ..judge.contract import KEYS as CONTRACT_KEYS
from .report import fmt_ms, fmt_num, md_code, md_text
from .rundir import LoadedRun, read_jsonl, read_run
from .stats import ALPHA, MIN_EFFECT, band, compare, percentile
from .thresholds import span_s, throughput_windows

MIN_SAMPLES = 3  # as cmp: fewer samples on a side is unmeasurable
# stored runs were not interleaved: a timed row is better or worse only when
# its medians are further apart than the wider p10..p90 band of either run to
# this power (as factors). Measured (docs/design-notes.md): 56 pairs of abtest
# runs of one build came at most 1.45 bands apart, serial-tools against clean
# at least 1.72
DRIFT_BANDS = 1.5

# settings of a load's shape that must be equal, and why a difference makes
# the comparison meaningless; a scenario's spec names those it has. Everything
# else may differ (out, quiet, seed, thresholds, the run's length: --inputs /
# --duration / --rounds).
SHAPE = {
    "conns": "the number of connections is the load level",
    "rate": "the open model's rate is the load level (and open vs closed model measure latency differently)",
    "stages": "the stages are the load's shape",
    "arrival": "constant and Poisson arrivals queue differently",
    "warmup_s": "the warm-up decides which turns count",
    "timeout_s": "a turn slower than the shorter --timeout fails in one run and is a sample in the other",
    "connect_timeout_s": "a connection slower than the shorter --connect-timeout fails in one run only",
}
Rows = list[dict[str, Any]]


@dataclass(frozen=True)
class RunPair:
    """OLD and NEW as a scenario's rows function sees them: the turns its
    statistics count (``old``, ``new``), the whole runs, their directories."""

    old: Rows
    new: Rows
    old_run: LoadedRun
    new_run: LoadedRun
    old_dir: Path
    new_dir: Path


@dataclass(frozen=True)
class CompareSpec:
    """What `kstress compare` compares of one scenario's runs (a registry
    entry's ``compare``). ``refused``: why its runs cannot be compared."""

    kinds: tuple[str, ...] = ()  # the turn kinds its statistics count (warm-up is always out)
    must_match: Mapping[str, str] = field(default_factory=dict)  # setting -> why a difference is meaningless
    rows: Callable[[RunPair, dict[str, Any]], Rows] = lambda pair, s: []  # the rows after the pass rate
    normalize: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)  # a setting's canonical form
    refused: str | None = None
    # the contract keys its rows depend on: only these must match (the reference kernel declares every
    # capability, one's own kernel by default none, and a stress run judges no session history)
    contract_keys: tuple[str, ...] = CONTRACT_KEYS


# per target (meta.targets[0]): what the judge and the mock made of the turns
TARGET_MUST_MATCH = {
    "workload.tool_ms": "the mock's tool sleeps set every tool time",
    "workload.mixed_ms": "the mock's shell-call sleeps set the mixed batches' time",
    "workload.mock_args": "the mock's LLM pacing (--ttft-ms, --chunk-delay-ms) is part of every turn's latency",
    "workload.tools": "another tool catalog plans other calls",
    "workload.llm_api": "another LLM dialect is another wire and another parser in the kernel",
    "transport": "latency includes the transport (unix, tcp, ws)",
}
# per contract key a scenario's spec names: why a difference changes what its turns are judged by
CONTRACT_MUST_MATCH = {
    "batch": "the batch rule is what each batch's schedule is judged by (a batch=parallel kernel fails where a whole-batch one passes)",
    "order": "order=any passes results in any order, order=declared fails them",
    "dedup": "the replay-guard probe runs only under dedup=true",
    "interrupts": "interrupt inputs are sent only under interrupts=true",
    "stats": "the kernel's counters and queue are read only under stats=true",
    "sessions": "under sessions=false a turn's history is not held to its session's earlier turns",
}
ALLOWED_TEXT = ("out", "quiet", "seed", "thresholds", "inputs", "duration_s", "rounds", "dedup_probe", "expect_concurrency", "control_args")


@dataclass(frozen=True)
class Comparison:
    scenario: str
    old: str
    new: str
    alpha: float
    min_effect: float
    rows: list[dict[str, Any]]
    shown: list[dict[str, Any]]  # single values, side by side, not tested
    notes: list[str]

    @property
    def worse(self) -> list[str]:
        return [r["name"] for r in self.rows if r["verdict"] == "worse"]

    @property
    def exit_code(self) -> int:
        return 1 if self.worse else 0

    def to_json(self) -> dict[str, Any]:
        return {"schema": "kstress.compare/1", "scenario": self.scenario, "old": self.old, "new": self.new, "alpha": self.alpha,
                "min_effect": self.min_effect, "rows": self.rows, "shown": self.shown, "notes": self.notes, "worse": self.worse,
                "exit_code": self.exit_code}


# --- loading and refusing -----------------------------------------------------------------


def load(path: Path, side: str) -> LoadedRun:
    if not path.is_dir():
        raise UsageError(f"{side} {path}: not a directory; give a run directory (runs/<scenario>-<stamp>/, the `run:` line of a run)")
    loaded = read_run(path)  # names the file and the problem when it is not a run
    if loaded.rows is None:
        raise UsageError(f"{side} {path}: turns.jsonl is missing; compare tests the turns themselves, and run.json's summary holds no samples")
    return loaded


def _get(d: dict[str, Any], dotted: str) -> Any:
    for k in dotted.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(k)  # type: ignore[assignment]
    return d


def _norm(key: str, v: Any, spec: CompareSpec | None = None) -> Any:
    fn = spec.normalize.get(key) if spec is not None else None
    if fn is not None and v is not None:
        try:
            return fn(v)
        except UsageError:
            return v
    if isinstance(v, list):
        return tuple(v)
    return v


def refusals(old: dict[str, Any], new: dict[str, Any], specs: Mapping[str, CompareSpec]) -> tuple[list[str], list[str]]:
    """(differences that make the comparison meaningless, notes on allowed
    differences and on what could not be checked)."""
    so, sn = old.get("scenario"), new.get("scenario")
    if so != sn:
        return [f"different scenarios: OLD is {so}, NEW is {sn}; only runs of one scenario measure the same thing"], []
    bad, notes = [], []
    st_o, st_n = old.get("settings") or {}, new.get("settings") or {}
    spec = specs.get(so) if isinstance(so, str) else None
    for key, why in (spec.must_match if spec is not None else {}).items():
        a, b = _norm(key, st_o.get(key), spec), _norm(key, st_n.get(key), spec)
        if a != b:
            bad.append(f"different {key}: OLD {st_o.get(key)!r}, NEW {st_n.get(key)!r} ({why})")
    for key in ALLOWED_TEXT:
        if key in st_o and st_o.get(key) != st_n.get(key) and key not in ("out", "quiet"):
            notes.append(f"{key} differs (OLD {st_o.get(key)!r}, NEW {st_n.get(key)!r}): allowed, it does not change what a turn measures")
    to, tn = (((d.get("meta") or {}).get("targets") or [{}])[0] for d in (old, new))
    bad_c, notes_c = contract_refusals(to.get("contract"), tn.get("contract"), spec.contract_keys if spec is not None else CONTRACT_KEYS, so)
    bad += bad_c
    notes += notes_c
    for key, why in TARGET_MUST_MATCH.items():
        a, b = _get(to, key), _get(tn, key)
        if a is None or b is None:
            if key.startswith("workload") and (a is None) != (b is None):
                notes.append(f"{key} is not recorded in {'OLD' if a is None else 'NEW'} (an older kstress, or a bare --socket): not checked")
            continue
        if _norm(key, a) != _norm(key, b):
            bad.append(f"different {key}: OLD {a!r}, NEW {b!r} ({why})")
    # the argv holds each sandbox's own paths and port: only the binary itself says "the same build"
    ho, hn = to.get("bin_sha256"), tn.get("bin_sha256")
    if ho and hn:
        notes.append(f"the same binary (sha256 {ho[:12]}…)" if ho == hn else f"different binaries: OLD sha256 {ho[:12]}…, NEW {hn[:12]}…")
    for side, d in (("OLD", old), ("NEW", new)):
        if d.get("status", "completed") != "completed":
            notes.append(f"{side} did not complete (status {d.get('status')}): its figures are those of the turns it recorded")
    return bad, notes


def contract_refusals(co: Any, cn: Any, used: tuple[str, ...], scenario: Any) -> tuple[list[str], list[str]]:
    """The contract keys ``used`` (a scenario's rows depend on them) must
    match, each refused by name; another key may differ, with a note: the
    reference kernel against one's own kernel differs in dedup, interrupts,
    stats and sessions, which a stress run does not use."""
    if not isinstance(co, dict) or not isinstance(cn, dict):
        return [], []
    bad, notes = [], []
    for key in CONTRACT_KEYS:
        a, b = co.get(key), cn.get(key)
        if a == b:
            continue
        if a is None or b is None:
            if key in used:
                notes.append(f"contract {key} is not recorded in {'OLD' if a is None else 'NEW'}: not checked")
        elif key in used:
            bad.append(f"different contract {key}: OLD {a!r}, NEW {b!r} ({CONTRACT_MUST_MATCH.get(key, 'the turns are judged by it')})")
        else:
            notes.append(f"contract {key} differs (OLD {a!r}, NEW {b!r}): allowed, {scenario}'s rows do not depend on it")
    return bad, notes


# --- rows ----------------------------------------------------------------------------------


def holm(rows: list[dict[str, Any]], alpha: float) -> list[dict[str, Any]]:
    """Holm's step-down correction over one comparison's rows: each row is a
    test at ``alpha``, and k of them at once would call some identical pair
    better or worse k times as often. The rows with a p-value, smallest p
    first, keep a better/worse verdict while p < alpha / (m - rank); from the
    first that does not, every later one is `same`, saying why. Rows without
    a p-value (unmeasurable, or worse for being unmeasured) are not tests and
    keep their verdict. Mutates and returns ``rows``."""
    tested = sorted((r for r in rows if r.get("p") is not None), key=lambda r: r["p"])
    m = len(tested)
    failed = False
    for rank, r in enumerate(tested):
        need = alpha / (m - rank)
        failed = failed or r["p"] >= need
        r["holm_alpha"] = need
        if failed and r.get("verdict") in ("better", "worse"):
            r["within_test_verdict"] = r["verdict"]
            r["verdict"] = "same"
            r["reason"] = f"{r['within_test_verdict']} by this test alone (p={r['p']:.3g}), not after Holm's correction for {m} comparisons (p < {need:.3g} needed)"
    return rows


def verdict_row(out: dict[str, Any], samples: dict[str, list[float]], notes: dict[str, str], s: dict[str, Any], *, higher_is_better: bool, rate: bool = False,
                missing_new_is_worse: bool = True) -> dict[str, Any]:
    """One row's verdict from OLD's and NEW's samples (``notes``: why a side
    is unmeasurable), with ``s['alpha']`` and ``s['min_effect']``; cmp's
    dimensions and `kstress compare`'s rows both go through here."""
    for v in ("old", "new"):
        xs = samples[v]
        if v in notes:
            out[v] = None
            out[f"{v}_note"] = notes[v]
        else:
            out[v] = (sum(xs) / len(xs)) if rate else statistics.median(xs)
        out[f"{v}_n"] = len(xs)
    if notes:
        if "new" in notes and "old" not in notes and missing_new_is_worse:
            out.update(verdict="worse", p=None, change=None, reason=f"NEW is {notes['new']} while OLD was measured")
        else:
            out.update(verdict="unmeasurable", p=None, change=None, reason="; ".join(f"{k.upper()}: {m}" for k, m in notes.items()))
        out["warnings"] = []
        return out
    if rate:
        # proportions: the test on the 0/1 outcomes gives p; the direction and
        # the minimum effect are the difference of the rates, in percentage
        # points (the medians of 0/1 samples are 0 or 1: 60% -> 100% has no
        # median change, and read as one it came out "worse")
        c = compare(out["name"], samples["old"], samples["new"], higher_is_better=higher_is_better, alpha=s["alpha"], min_effect=0.0)
        diff = out["new"] - out["old"]
        if c.p is None or c.p >= s["alpha"]:
            verdict, reason = "same", f"not significant (p={c.p:.3g} >= {s['alpha']})" if c.p is not None else "no test"
        elif abs(diff) < s["min_effect"]:
            verdict, reason = "same", f"difference {diff * 100:+.1f} pts below the {s['min_effect'] * 100:.0f}-point minimum effect"
        else:
            verdict = "better" if (diff > 0) == higher_is_better else "worse"
            reason = f"p={c.p:.3g}, change {diff * 100:+.1f} pts"
        out.update(verdict=verdict, p=c.p, change=diff, reason=reason, warnings=[])
        return out
    c = compare(out["name"], samples["old"], samples["new"], higher_is_better=higher_is_better, alpha=s["alpha"], min_effect=s["min_effect"])
    out.update(verdict=c.verdict, p=c.p, change=c.change, reason=c.reason, warnings=list(c.warnings))
    return out


def sample_row(name: str, metric: str, unit: str, samples: dict[str, list[float]], s: dict[str, Any], *, higher_is_better: bool, rate: bool = False,
         missing_new_is_worse: bool = True, why_short: Callable[[str, int], str] | None = None) -> dict[str, Any]:
    """One compared row from OLD's and NEW's samples; ``why_short`` says why
    a side with too few samples is unmeasurable."""
    notes = {}
    for v in ("old", "new"):
        if not samples[v]:
            notes[v] = "unmeasurable: no sample" if why_short is None else why_short(v, 0)
        elif not rate and len(samples[v]) < MIN_SAMPLES:
            notes[v] = f"unmeasurable: only {len(samples[v])} sample(s)" if why_short is None else why_short(v, len(samples[v]))
    out = verdict_row({"name": name, "metric": metric, "unit": unit}, samples, notes, s, higher_is_better=higher_is_better, rate=rate,
                      missing_new_is_worse=missing_new_is_worse)
    if not rate and not notes:
        drift_rule(out, samples, s)
    return out


def drift_rule(out: dict[str, Any], samples: dict[str, list[float]], s: dict[str, Any]) -> None:
    """A better/worse row whose medians are no further apart (as a factor)
    than the wider p10..p90 band of either run (:func:`band`) raised to
    ``s['drift_bands']`` (default :data:`DRIFT_BANDS`; 0 turns the rule off)
    becomes *inconclusive*, with the numbers. The Mann-Whitney test sees each run's
    spread, not how far the machine moved between two runs made apart (two
    runs of one binary 7 s apart: speedup 3.51x -> 3.14x at p=0.032). The
    pass rate is not subject: a failure is a verdict, not a timing."""
    k = s.get("drift_bands", DRIFT_BANDS)
    bands = {v: band(samples[v]) for v in ("old", "new")}
    mo, mn = out.get("old"), out.get("new")
    if not k or None in bands.values() or not isinstance(mo, (int, float)) or not isinstance(mn, (int, float)) or mo <= 0 or mn <= 0:
        return
    wider = max(b for b in bands.values() if b is not None)
    limit = wider**k
    shift = max(mo, mn) / min(mo, mn)

    def finite(x: float | None) -> float | None:  # JSON has no infinity: a band from 0 is null
        return None if x is None or math.isinf(x) else x

    out["drift"] = {"old_band": finite(bands["old"]), "new_band": finite(bands["new"]), "bands": k, "limit": finite(limit), "shift": shift}
    if out["verdict"] in ("better", "worse") and shift <= limit:
        side = "old" if bands["old"] == wider else "new"
        xs = samples[side]
        lo, hi = percentile(xs, 10), percentile(xs, 90)
        unit = out.get("unit")
        fmt = fmt_ms if unit == "s" else (lambda x: f"{x:.3g}{unit or ''}")
        bound = (f"x{wider:.2f}) raised to {k:g}, x{limit:.2f}" if math.isfinite(wider) else "from 0: no factor bounds it)")
        out["within_run_verdict"] = out["verdict"]
        out.update(verdict="inconclusive",
                   reason=f"{out['verdict']} by the within-run test ({out['reason']}), but the runs were not interleaved: the medians are "
                          f"x{shift:.2f} apart, not beyond the wider p10..p90 band of a run ({side.upper()}: {fmt(lo)}..{fmt(hi)}, "
                          f"{bound}; a whole run drifts by that much on a loaded machine (docs/metrics.md)")


def passed_latency(rows: list[dict[str, Any]], key: str = "latency_s") -> list[float]:
    return [r[key] for r in rows if r.get("passed") and isinstance(r.get(key), (int, float))]


def by_marker(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.get("marker") or "text", []).append(r)
    return dict(sorted(out.items()))


def pass_rate_row(old: list[dict[str, Any]], new: list[dict[str, Any]], s: dict[str, Any], name: str = "pass rate") -> dict[str, Any]:
    samples = {"old": [1.0 if r.get("passed") else 0.0 for r in old], "new": [1.0 if r.get("passed") else 0.0 for r in new]}
    row = sample_row(name, "passed / attempted, higher is better", "rate", samples, s, higher_is_better=True, rate=True)
    row["old_failures"], row["new_failures"] = failure_counts(old)[0], failure_counts(new)[0]
    if row["verdict"] != "same" and (row["old_failures"] or row["new_failures"]):
        row["reason"] += "; failures " + "; ".join(f"{v.upper()} " + (", ".join(f"{k} x{n}" for k, n in row[f"{v}_failures"].items()) or "none") for v in ("old", "new"))
    return row


def _mix_shift(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> tuple[str, float] | None:
    """The marker whose share among the passed turns moved most, and by how
    much (a fraction): the all-turns latency of two different mixes."""
    shares = []
    po, pn = [r for r in old if r.get("passed")], [r for r in new if r.get("passed")]
    if not po or not pn:
        return None
    for m in set(by_marker(po)) | set(by_marker(pn)):
        a = sum(1 for r in po if (r.get("marker") or "text") == m) / len(po)
        b = sum(1 for r in pn if (r.get("marker") or "text") == m) / len(pn)
        shares.append((abs(b - a), m, a, b))
    d, m, a, b = max(shares)
    return f"{m}: OLD {a:.0%}, NEW {b:.0%} of the passed turns", d


def latency_rows(old: list[dict[str, Any]], new: list[dict[str, Any]], s: dict[str, Any], key: str = "latency_s", label: str = "latency") -> list[dict[str, Any]]:
    """The all-turns row, then one per marker: passed turns only."""
    out = []
    samples = {"old": passed_latency(old, key), "new": passed_latency(new, key)}
    row = sample_row(f"{label} all", "passed turns, lower is better", "s", samples, s, higher_is_better=False)
    shift = _mix_shift(old, new)
    if shift is not None and shift[1] >= s["min_effect"]:
        # a median over another mix of markers: faster because the slow ones failed is no gain
        row.update(verdict="unmeasurable", p=None, change=None,
                   reason=f"the passed turns are another mix of markers ({shift[0]}): the per-marker rows compare like with like")
    out.append(row)
    bo, bn = by_marker(old), by_marker(new)
    for m in sorted(set(bo) | set(bn)):
        ro, rn = bo.get(m, []), bn.get(m, [])

        def why(v: str, n: int, ro: list = ro, rn: list = rn) -> str:
            rs = ro if v == "old" else rn
            return f"unmeasurable: {n} of {len(rs)} turns passed (at least {MIN_SAMPLES} needed)"

        out.append(sample_row(f"{label} {m}", "passed turns, lower is better", "s", {"old": passed_latency(ro, key), "new": passed_latency(rn, key)}, s,
                        higher_is_better=False, why_short=why))
    return out


def throughput_row(old: list[dict[str, Any]], new: list[dict[str, Any]], s: dict[str, Any]) -> dict[str, Any]:
    from .thresholds import throughput_windows

    samples = {}
    for v, rows in (("old", old), ("new", new)):
        tw = throughput_windows(rows)
        rates = [r for _, r in tw["windows"]] if tw else []
        samples[v] = rates[1:-1]  # the whole windows: ramp-up and the last partial one left out

    def why(v: str, n: int) -> str:
        return f"unmeasurable: {n} whole window(s) (a run of at least {MIN_SAMPLES + 2} windows is needed)"

    # a short NEW is no regression: it just has fewer windows
    return sample_row("throughput", "passed inputs/s per whole window, higher is better", "/s", samples, s, higher_is_better=True,
                missing_new_is_worse=False, why_short=why)


RESOURCE_SAMPLES = (("rss_mb", "RSS", "MB"), ("cpu_pct", "CPU", "%"), ("fds", "open fds", ""))


def resource_rows(old_dir: Path, new_dir: Path, spans: dict[str, tuple[float, float] | None], s: dict[str, Any]) -> list[dict[str, Any]]:
    """The target's process tree, sampled every 0.5 s: the samples taken
    while the load ran (its first send to its last end)."""
    data = {}
    for v, d in (("old", old_dir), ("new", new_dir)):
        rows = read_jsonl(d / "resources.jsonl")
        span = spans.get(v)
        if span is not None:
            rows = [r for r in rows if isinstance(r.get("t"), (int, float)) and span[0] <= r["t"] <= span[1]]
        data[v] = rows
    if not data["old"] and not data["new"]:
        return []
    out = []
    for key, label, unit in RESOURCE_SAMPLES:
        samples = {v: [r[key] for r in data[v] if isinstance(r.get(key), (int, float))] for v in data}
        out.append(sample_row(f"resources {label}", f"target process tree, samples while the load ran, lower is better", unit, samples, s,
                        higher_is_better=False, missing_new_is_worse=False))
    return out


def load_span(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The load's span on the sampler's clock. Rows count from the run's t0,
    the sampler from its own start, a moment later; the stats connection is
    opened in between: close enough for 0.5 s samples."""
    starts = [r["t_rel"] for r in rows if isinstance(r.get("t_rel"), (int, float))]
    if not starts:
        return None
    return min(starts), min(starts) + span_s(rows)


# --- comparing -----------------------------------------------------------------------------


def _inputs(spec: CompareSpec, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns a scenario's statistics count (warm-up and probes out)."""
    return [r for r in rows if r.get("kind") in spec.kinds and not r.get("warmup")]


def _shown(old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    so, sn = old.get("summary") or {}, new.get("summary") or {}
    out = []

    def add(name: str, a: Any, b: Any, unit: str) -> None:
        if a is not None or b is not None:
            out.append({"name": name, "old": a, "new": b, "unit": unit})

    for key, label, unit in (("peak_rss_mb", "peak RSS", "MB"), ("peak_cpu_pct", "peak CPU", "%"), ("mean_cpu_pct", "mean CPU", "%"),
                             ("peak_threads", "peak threads", ""), ("peak_fds", "peak fds", ""), ("peak_children", "peak children", "")):
        add(label, _get(so, f"resources.{key}"), _get(sn, f"resources.{key}"), unit)
    add("peak queue", so.get("peak_queue"), sn.get("peak_queue"), "")
    add("throughput (whole run)", so.get("throughput_per_s"), sn.get("throughput_per_s"), "/s")
    add("memory per session", _get(so, "memory.kb_per_session"), _get(sn, "memory.kb_per_session"), "KB")
    add("RSS after the sessions", _get(so, "memory.rss_after_mb"), _get(sn, "memory.rss_after_mb"), "MB")
    add("last/first turn p50", so.get("last_vs_first_p50"), sn.get("last_vs_first_p50"), "x")
    to, tn = (((d.get("meta") or {}).get("targets") or [{}])[0] for d in (old, new))
    add("start-up (spawn to ready)", to.get("startup_s"), tn.get("startup_s"), "s")
    add("RSS at ready", to.get("ready_rss_mb"), tn.get("ready_rss_mb"), "MB")
    return out


def compare_runs(old_dir: Path, new_dir: Path, specs: Mapping[str, CompareSpec], alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> Comparison:
    """Load, refuse what cannot be compared, and compare row by row: the
    pass rate, then the rows of the scenario's spec (``specs``: the registry's)."""
    if not 0 < alpha < 0.5:
        raise UsageError(f"--alpha {alpha} is invalid: use 0 < alpha < 0.5 (e.g. 0.05)")
    if not 0 <= min_effect < 1:
        raise UsageError(f"--min-effect {min_effect} is invalid: a fraction, e.g. 0.05 for 5% (5 percentage points for rates)")
    lo, ln = load(old_dir, "OLD"), load(new_dir, "NEW")
    sc = lo.doc["scenario"]
    spec = specs.get(sc)
    if sc == ln.doc["scenario"] and (spec is None or spec.refused):
        supported = ", ".join(n for n, sp in specs.items() if not sp.refused)
        why = spec.refused if spec is not None and spec.refused else f"compare knows {supported}"
        raise UsageError(f"OLD and NEW are {sc} runs: compare does not take them ({why})")
    bad, notes = refusals(lo.doc, ln.doc, specs)
    if bad:
        raise UsageError(f"OLD {old_dir} and NEW {new_dir} cannot be compared: " + "; ".join(bad)
                         + ". Make both runs with the same command, changing only the target (docs/results.md, \"Comparing stored runs\", lists what may differ)")
    assert spec is not None  # refusals named different scenarios
    notes = [f"OLD: {n}" for n in lo.notes] + [f"NEW: {n}" for n in ln.notes] + notes
    s = {"alpha": alpha, "min_effect": min_effect}
    pair = RunPair(_inputs(spec, lo.rows or []), _inputs(spec, ln.rows or []), lo, ln, old_dir, new_dir)
    rows = [pass_rate_row(pair.old, pair.new, s)] + spec.rows(pair, s)
    return Comparison(sc, str(old_dir), str(new_dir), alpha, min_effect, rows, _shown(lo.doc, ln.doc), notes)


# --- output ---------------------------------------------------------------------------------


def _val(r: dict[str, Any], v: str) -> str:
    x = r.get(v)
    if x is None:  # the why column says why
        return "-"
    unit = r.get("unit")
    if unit == "rate":
        return f"{x:.1%}"
    if unit == "s":
        return fmt_ms(x)
    if unit == "x":
        return f"{x:.2f}x"
    return f"{x:.4g}{' ' + unit if unit and unit != '%' else unit}"


def _change(r: dict[str, Any]) -> str:
    c = r.get("change")
    if c is None:
        return "-"
    return f"{c * 100:+.1f} pts" if r.get("unit") == "rate" else f"{c:+.1%}"


def final_line(c: Comparison) -> str:
    counts = {k: sum(1 for r in c.rows if r["verdict"] == k) for k in ("better", "worse", "same", "inconclusive", "unmeasurable")}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if c.worse:
        return f"compare: NEW is worse on {len(c.worse)} row(s): {', '.join(c.worse)} ({tally}); exit 1"
    return f"compare: NEW is not worse on any row ({tally}); exit 0"


def render(c: Comparison) -> str:
    out = [f"# kstress compare — {c.scenario}", "",
           f"- OLD {md_code(c.old)}", f"- NEW {md_code(c.new)}",
           f"- better/worse needs p < {c.alpha:g} (Mann-Whitney U) and a change of at least {c.min_effect:.0%} "
           f"({c.min_effect * 100:.0f} percentage points for rates), as cmp; and, the runs not being interleaved, timed medians further apart "
           f"than the wider p10..p90 band of a run raised to {DRIFT_BANDS:g} (factors; else inconclusive, exit 0)"]
    out += [f"- note: {md_text(n)}" for n in c.notes]
    out += ["", "| row | OLD | NEW | change | p | verdict | why |", "|---|---:|---:|---:|---:|---|---|"]
    for r in c.rows:
        verdict = f"**{r['verdict']}**" if r["verdict"] == "worse" else r["verdict"]
        out.append(f"| {r['name']} | {_val(r, 'old')} | {_val(r, 'new')} | {_change(r)} | {fmt_num(r.get('p'), '{:.3g}')} | {verdict} | {md_text(r.get('reason', ''))} |")
    if c.shown:
        out += ["", "One value per run, shown side by side (not tested):", "", "| value | OLD | NEW |", "|---|---:|---:|"]
        for v in c.shown:
            unit = v["unit"]
            f = (lambda x: fmt_ms(x)) if unit == "s" else (lambda x: fmt_num(x, "{:.4g}" + (f" {unit}" if unit else "")))
            out.append(f"| {v['name']} | {f(v['old'])} | {f(v['new'])} |")
    # the warnings qualify a claim: those of the rows judged better or worse
    warnings = [f"{r['name']}: {w}" for r in c.rows if r["verdict"] in ("better", "worse") for w in r.get("warnings") or ()]
    if warnings:
        out += ["", "Stability warnings (rows judged better or worse):", ""] + [f"- {md_text(w)}" for w in warnings]
    out += ["", final_line(c), ""]
    return "\n".join(out)


def write_output(c: Comparison, path: Path) -> None:
    """-o FILE: JSON when FILE ends in .json, else the Markdown table."""
    text = json.dumps(c.to_json(), indent=2) + "\n" if path.suffix == ".json" else render(c)
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write it ({exc.strerror}); pass a writable file") from None


__all__ = ["DRIFT_BANDS", "CompareSpec", "Comparison", "RunPair", "SHAPE", "TARGET_MUST_MATCH", "by_marker", "compare_runs", "drift_rule", "final_line", "latency_rows",
           "load_span", "pass_rate_row", "passed_latency", "refusals", "render", "resource_rows", "sample_row", "throughput_row", "verdict_row",
           "write_output"]
