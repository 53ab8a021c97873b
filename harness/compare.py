"""`kstress compare OLD_RUN NEW_RUN`: two stored run directories of the same
scenario, row by row, with cmp's rule (harness/scenarios/cmp.py
``verdict_row``: Mann-Whitney U at alpha and a minimum effect; rates in
percentage points). CI keeps the baseline run directory, not the old binary.

Rows (each: better | worse | same | unmeasurable):

    stress, sessions  pass rate; latency of the passed turns, all and per
                      marker (and from the schedule in the open model);
                      throughput (passed/s in the whole windows); stress also
                      the target's RSS, CPU and fds (resources.jsonl samples
                      taken while the load ran)
    batch             pass rate; per marker: tool phase and latency
    abtest            pass rate; per N: speedup (one sample per round) and the
                      concurrent arm's tool phase

Values a run has only once (peaks, start-up, memory per session) are shown
side by side, never tested. Two runs whose settings make the comparison
meaningless are refused (UsageError, exit 2) naming the difference: see
``MUST_MATCH`` and docs/results.md, "Comparing stored runs".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .errors import UsageError
from .report import fmt_ms, fmt_num
from .results import LoadedRun, read_jsonl, read_run
from .stats import ALPHA, MIN_EFFECT
from .verdict import is_timing_sample

MIN_SAMPLES = 3  # as cmp: fewer samples on a side is unmeasurable
SUPPORTED = ("stress", "sessions", "batch", "abtest")
REFUSED = {
    "cmp": "a cmp run is already OLD against NEW, interleaved; compare two stress, sessions, batch or abtest runs instead",
    "hold": "a hold run measures one count per run (connections held, memory per connection): there is no sample to test",
    "findmax": "a findmax run yields one maximum level per run: there is no sample to test; compare two stress runs at the level you care about",
}

# settings that must be equal, per scenario, and why a difference makes the
# comparison meaningless. Everything else may differ (out, quiet, seed,
# thresholds, the run's length: --inputs / --duration / --rounds).
_SHAPE = {
    "conns": "the number of connections is the load level",
    "rate": "the open model's rate is the load level (and open vs closed model measure latency differently)",
    "stages": "the stages are the load's shape",
    "arrival": "constant and Poisson arrivals queue differently",
    "warmup_s": "the warm-up decides which turns count",
    "timeout_s": "a turn slower than the shorter --timeout fails in one run and is a sample in the other",
    "connect_timeout_s": "a connection slower than the shorter --connect-timeout fails in one run only",
}
MUST_MATCH: dict[str, dict[str, str]] = {
    "stress": {"mix": "the marker mix decides what each turn asks of the kernel", **_SHAPE,
               "interrupts": "interrupt inputs compete with the load", "interrupt_marker": "interrupt inputs compete with the load"},
    "sessions": {"mix": "the marker mix decides what each turn asks of the kernel", **_SHAPE,
                 "sessions": "the number of concurrent sessions is the load level", "turns": "history length grows with the turns",
                 "reconnect": "resuming sessions elsewhere is another workload"},
    "batch": {"ns": "the batch sizes are the marker set", "kinds": "the batch kinds are the marker set",
              "timeout_s": _SHAPE["timeout_s"], "connect_timeout_s": _SHAPE["connect_timeout_s"]},
    "abtest": {"ns": "the batch sizes are the rows", "tool_ms_effective": "the tools' sleep sets the times and the speedup's bound",
               "baseline_used": "the serial time is measured another way (kernel control, control launch, or sum)",
               "timeout_s": _SHAPE["timeout_s"], "connect_timeout_s": _SHAPE["connect_timeout_s"]},
}
# per target (meta.targets[0]): what the judge and the mock made of the turns
TARGET_MUST_MATCH = {
    "contract": "the contract is what each turn is judged by (a batch=parallel kernel fails where a whole-batch one passes)",
    "workload.tool_ms": "the mock's tool sleeps set every tool time",
    "workload.mixed_ms": "the mock's shell-call sleeps set the mixed batches' time",
    "workload.mock_args": "the mock's LLM pacing (--ttft-ms, --chunk-delay-ms) is part of every turn's latency",
    "workload.tools": "another tool catalog plans other calls",
    "workload.llm_api": "another LLM dialect is another wire and another parser in the kernel",
    "transport": "latency includes the transport (unix, tcp, ws)",
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


def _norm(key: str, v: Any) -> Any:
    if key == "mix" and isinstance(v, str):
        from .scenarios.stress import parse_mix

        try:
            return sorted(parse_mix(v))  # the order of the items does not matter, their weights do
        except UsageError:
            return v
    if isinstance(v, list):
        return tuple(v)
    return v


def refusals(old: dict[str, Any], new: dict[str, Any]) -> tuple[list[str], list[str]]:
    """(differences that make the comparison meaningless, notes on allowed
    differences and on what could not be checked)."""
    so, sn = old.get("scenario"), new.get("scenario")
    if so != sn:
        return [f"different scenarios: OLD is {so}, NEW is {sn}; only runs of one scenario measure the same thing"], []
    bad, notes = [], []
    st_o, st_n = old.get("settings") or {}, new.get("settings") or {}
    for key, why in MUST_MATCH.get(so, {}).items():
        a, b = _norm(key, st_o.get(key)), _norm(key, st_n.get(key))
        if a != b:
            bad.append(f"different {key}: OLD {st_o.get(key)!r}, NEW {st_n.get(key)!r} ({why})")
    for key in ALLOWED_TEXT:
        if key in st_o and st_o.get(key) != st_n.get(key) and key not in ("out", "quiet"):
            notes.append(f"{key} differs (OLD {st_o.get(key)!r}, NEW {st_n.get(key)!r}): allowed, it does not change what a turn measures")
    to, tn = (((d.get("meta") or {}).get("targets") or [{}])[0] for d in (old, new))
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


# --- rows ----------------------------------------------------------------------------------


def _row(name: str, metric: str, unit: str, samples: dict[str, list[float]], s: dict[str, Any], *, higher_is_better: bool, rate: bool = False,
         missing_new_is_worse: bool = True, why_short: Callable[[str, int], str] | None = None) -> dict[str, Any]:
    from .scenarios.cmp import verdict_row

    notes = {}
    for v in ("old", "new"):
        if not samples[v]:
            notes[v] = "unmeasurable: no sample" if why_short is None else why_short(v, 0)
        elif not rate and len(samples[v]) < MIN_SAMPLES:
            notes[v] = f"unmeasurable: only {len(samples[v])} sample(s)" if why_short is None else why_short(v, len(samples[v]))
    out = verdict_row({"name": name, "metric": metric, "unit": unit}, samples, notes, s, higher_is_better=higher_is_better, rate=rate,
                      missing_new_is_worse=missing_new_is_worse)
    return out


def _passed_latency(rows: list[dict[str, Any]], key: str = "latency_s") -> list[float]:
    return [r[key] for r in rows if r.get("passed") and isinstance(r.get(key), (int, float))]


def _by_marker(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r.get("marker") or "text", []).append(r)
    return dict(sorted(out.items()))


def pass_rate_row(old: list[dict[str, Any]], new: list[dict[str, Any]], s: dict[str, Any], name: str = "pass rate") -> dict[str, Any]:
    from .scenarios.common import failure_counts

    samples = {"old": [1.0 if r.get("passed") else 0.0 for r in old], "new": [1.0 if r.get("passed") else 0.0 for r in new]}
    row = _row(name, "passed / attempted, higher is better", "rate", samples, s, higher_is_better=True, rate=True)
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
    for m in set(_by_marker(po)) | set(_by_marker(pn)):
        a = sum(1 for r in po if (r.get("marker") or "text") == m) / len(po)
        b = sum(1 for r in pn if (r.get("marker") or "text") == m) / len(pn)
        shares.append((abs(b - a), m, a, b))
    d, m, a, b = max(shares)
    return f"{m}: OLD {a:.0%}, NEW {b:.0%} of the passed turns", d


def latency_rows(old: list[dict[str, Any]], new: list[dict[str, Any]], s: dict[str, Any], key: str = "latency_s", label: str = "latency") -> list[dict[str, Any]]:
    """The all-turns row, then one per marker: passed turns only."""
    out = []
    samples = {"old": _passed_latency(old, key), "new": _passed_latency(new, key)}
    row = _row(f"{label} all", "passed turns, lower is better", "s", samples, s, higher_is_better=False)
    shift = _mix_shift(old, new)
    if shift is not None and shift[1] >= s["min_effect"]:
        # a median over another mix of markers: faster because the slow ones failed is no gain
        row.update(verdict="unmeasurable", p=None, change=None,
                   reason=f"the passed turns are another mix of markers ({shift[0]}): the per-marker rows compare like with like")
    out.append(row)
    bo, bn = _by_marker(old), _by_marker(new)
    for m in sorted(set(bo) | set(bn)):
        ro, rn = bo.get(m, []), bn.get(m, [])

        def why(v: str, n: int, ro: list = ro, rn: list = rn) -> str:
            rs = ro if v == "old" else rn
            return f"unmeasurable: {n} of {len(rs)} turns passed (at least {MIN_SAMPLES} needed)"

        out.append(_row(f"{label} {m}", "passed turns, lower is better", "s", {"old": _passed_latency(ro, key), "new": _passed_latency(rn, key)}, s,
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
    return _row("throughput", "passed inputs/s per whole window, higher is better", "/s", samples, s, higher_is_better=True,
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
        out.append(_row(f"resources {label}", f"target process tree, samples while the load ran, lower is better", unit, samples, s,
                        higher_is_better=False, missing_new_is_worse=False))
    return out


def _load_span(rows: list[dict[str, Any]]) -> tuple[float, float] | None:
    """The load's span on the sampler's clock. Rows count from the run's t0,
    the sampler from its own start, a moment later; the stats connection is
    opened in between: close enough for 0.5 s samples."""
    from .thresholds import span_s

    starts = [r["t_rel"] for r in rows if isinstance(r.get("t_rel"), (int, float))]
    if not starts:
        return None
    return min(starts), min(starts) + span_s(rows)


def speedup_rows(old: list[dict[str, Any]], new: list[dict[str, Any]], ns: list[int], baseline: str, s: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for n in ns:
        samples, notes = {}, {}
        tool = {}
        for v, rows in (("old", old), ("new", new)):
            rs = [r for r in rows if r.get("kind") == "abtest" and r.get("n") == n]
            sp, bad = round_speedups(rs, baseline)
            samples[v] = sp
            if bad:
                notes[v] = f"unmeasurable: the serial control ran concurrently in {bad} round(s)"
            tool[v] = [r["tool_ms"] / 1000 for r in rs if r.get("arm") == "concurrent" and is_timing_sample(r)]
        row = _row(f"speedup N={n}", f"serial/concurrent tool phase per round (baseline {baseline}), higher is better", "x", samples, s, higher_is_better=True)
        for v, note in notes.items():
            if row.get(v) is not None:
                row[v], row[f"{v}_note"] = None, note
                row.update(verdict="worse" if v == "new" and "old" not in notes else "unmeasurable", p=None, change=None, reason=f"{v.upper()}: {note}")
        out.append(row)
        out.append(_row(f"tool phase N={n}", f"!slowbatch{n} tool phase, concurrent arm, lower is better", "s", tool, s, higher_is_better=False))
    return out


def round_speedups(rs: list[dict[str, Any]], baseline: str) -> tuple[list[float], int]:
    """One speedup per round (as cmp's concurrency dimension): serial over
    concurrent tool time of the same round, or, with baseline sum, a turn's
    summed call durations over their span. And the rounds whose serial
    control overlapped (its speedup is refused)."""
    if baseline == "sum":
        ok = [r for r in rs if r.get("arm") == "concurrent" and is_timing_sample(r) and r.get("tool_sum_ms") and r.get("tool_span_ms")]
        return [r["tool_sum_ms"] / r["tool_span_ms"] for r in ok], 0
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in rs:
        if isinstance(r.get("round"), int):
            by_round.setdefault(r["round"], {})[r.get("arm", "")] = r
    out, bad = [], 0
    for arms in by_round.values():
        c, sr = arms.get("concurrent"), arms.get("serial")
        if sr is not None and sr.get("overlap") is not None and sr["overlap"] > 1:
            bad += 1
        if c and sr and is_timing_sample(c) and is_timing_sample(sr) and c["tool_ms"]:
            out.append(sr["tool_ms"] / c["tool_ms"])
    return out, bad


# --- the scenarios --------------------------------------------------------------------------


def _inputs(doc: dict[str, Any], rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The turns a scenario's statistics count (warm-up and probes out)."""
    kinds = {"stress": ("load", "interrupt"), "sessions": ("session",), "batch": ("batch",), "abtest": ("abtest",)}[doc["scenario"]]
    return [r for r in rows if r.get("kind") in kinds and not r.get("warmup")]


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


def compare_runs(old_dir: Path, new_dir: Path, alpha: float = ALPHA, min_effect: float = MIN_EFFECT) -> Comparison:
    """Load, refuse what cannot be compared, and compare row by row."""
    if not 0 < alpha < 0.5:
        raise UsageError(f"--alpha {alpha} is invalid: use 0 < alpha < 0.5 (e.g. 0.05)")
    if not 0 <= min_effect < 1:
        raise UsageError(f"--min-effect {min_effect} is invalid: a fraction, e.g. 0.05 for 5% (5 percentage points for rates)")
    lo, ln = load(old_dir, "OLD"), load(new_dir, "NEW")
    sc = lo.doc["scenario"]
    if sc == ln.doc["scenario"] and sc not in SUPPORTED:
        why = REFUSED.get(sc, f"compare knows {', '.join(SUPPORTED)}")
        raise UsageError(f"OLD and NEW are {sc} runs: compare does not take them ({why})")
    bad, notes = refusals(lo.doc, ln.doc)
    if bad:
        raise UsageError(f"OLD {old_dir} and NEW {new_dir} cannot be compared: " + "; ".join(bad)
                         + ". Make both runs with the same command, changing only the target (docs/results.md, \"Comparing stored runs\", lists what may differ)")
    notes = [f"OLD: {n}" for n in lo.notes] + [f"NEW: {n}" for n in ln.notes] + notes
    s = {"alpha": alpha, "min_effect": min_effect}
    old, new = _inputs(lo.doc, lo.rows or []), _inputs(ln.doc, ln.rows or [])
    rows = [pass_rate_row(old, new, s)]
    if sc in ("stress", "sessions"):
        rows += latency_rows(old, new, s)
        if any(isinstance(r.get("scheduled_s"), (int, float)) for r in old + new):
            rows.append(latency_rows(old, new, s, key="scheduled_s", label="latency from schedule")[0])
        rows.append(throughput_row(old, new, s))
        if sc == "stress":
            spans = {"old": _load_span(old), "new": _load_span(new)}
            rows += resource_rows(old_dir, new_dir, spans, s)
    elif sc == "batch":
        bo, bn = _by_marker(old), _by_marker(new)
        for m in sorted(set(bo) | set(bn)):
            ro, rn = bo.get(m, []), bn.get(m, [])
            tool = {v: [r["tool_ms"] / 1000 for r in rs if r.get("passed") and r.get("tool_ms") is not None] for v, rs in (("old", ro), ("new", rn))}
            if tool["old"] or tool["new"]:
                rows.append(_row(f"tool phase {m}", "passed turns, lower is better", "s", tool, s, higher_is_better=False))
            rows.append(_row(f"latency {m}", "passed turns, lower is better", "s", {"old": _passed_latency(ro), "new": _passed_latency(rn)}, s, higher_is_better=False))
    elif sc == "abtest":
        st = lo.doc.get("settings") or {}
        rows += speedup_rows(old, new, list(st.get("ns") or ()), st.get("baseline_used") or "kernel", s)
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
    counts = {k: sum(1 for r in c.rows if r["verdict"] == k) for k in ("better", "worse", "same", "unmeasurable")}
    tally = ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    if c.worse:
        return f"compare: NEW is worse on {len(c.worse)} row(s): {', '.join(c.worse)} ({tally}); exit 1"
    return f"compare: NEW is not worse on any row ({tally}); exit 0"


def render(c: Comparison) -> str:
    out = [f"# kstress compare — {c.scenario}", "",
           f"- OLD `{c.old}`", f"- NEW `{c.new}`",
           f"- better/worse needs p < {c.alpha:g} (Mann-Whitney U) and a change of at least {c.min_effect:.0%} "
           f"({c.min_effect * 100:.0f} percentage points for rates), as cmp"]
    out += [f"- note: {n}" for n in c.notes]
    out += ["", "| row | OLD | NEW | change | p | verdict | why |", "|---|---:|---:|---:|---:|---|---|"]
    for r in c.rows:
        verdict = f"**{r['verdict']}**" if r["verdict"] == "worse" else r["verdict"]
        out.append(f"| {r['name']} | {_val(r, 'old')} | {_val(r, 'new')} | {_change(r)} | {fmt_num(r.get('p'), '{:.3g}')} | {verdict} | {r.get('reason', '')} |")
    if c.shown:
        out += ["", "One value per run, shown side by side (not tested):", "", "| value | OLD | NEW |", "|---|---:|---:|"]
        for v in c.shown:
            unit = v["unit"]
            f = (lambda x: fmt_ms(x)) if unit == "s" else (lambda x: fmt_num(x, "{:.4g}" + (f" {unit}" if unit else "")))
            out.append(f"| {v['name']} | {f(v['old'])} | {f(v['new'])} |")
    # the warnings qualify a claim: those of the rows judged better or worse
    warnings = [f"{r['name']}: {w}" for r in c.rows if r["verdict"] in ("better", "worse") for w in r.get("warnings") or ()]
    if warnings:
        out += ["", "Stability warnings (rows judged better or worse):", ""] + [f"- {w}" for w in warnings]
    out += ["", final_line(c), ""]
    return "\n".join(out)


def write_output(c: Comparison, path: Path) -> None:
    """-o FILE: JSON when FILE ends in .json, else the Markdown table."""
    text = json.dumps(c.to_json(), indent=2) + "\n" if path.suffix == ".json" else render(c)
    try:
        path.write_text(text)
    except OSError as exc:
        raise UsageError(f"-o {path}: cannot write it ({exc.strerror}); pass a writable file") from None


__all__ = ["Comparison", "compare_runs", "final_line", "render", "write_output", "MUST_MATCH", "TARGET_MUST_MATCH"]
