"""report.md from a run's raw files. Formatting only: every number comes from
run.json (settings, extras) and turns.jsonl; summaries are recomputed from the
turns so that `kstress report DIR` shows exactly what the raw files say."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, Callable

from .results import load_run


def _ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def _pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def _header(doc: dict[str, Any], title: str) -> list[str]:
    started = dt.datetime.fromtimestamp(doc.get("started", 0), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    status = "PASS" if doc.get("passed") else "FAIL"
    out = [f"# kstress {title} — {status}", ""]
    out.append(f"- started {started}, {doc.get('duration_s', 0):.1f} s, exit code {doc.get('exit_code')}")
    host = doc.get("meta", {}).get("host", {})
    out.append(f"- host {host.get('hostname')} ({host.get('cpus')} CPUs, Linux {host.get('kernel')}, Python {host.get('python')}), kstress {host.get('harness_version')}")
    for t in doc.get("meta", {}).get("targets", []):
        label = f"{t.get('label')}: " if t.get("label") else ""
        argv = " ".join(t.get("argv") or []) or t.get("socket") or ""
        sha = (t.get("bin_sha256") or "")[:16]
        out.append(f"- target {label}`{argv}`" + (f" (sha256 {sha}…)" if sha else "") + (f", sandbox {t.get('namespace')} ({t.get('mechanism')})" if t.get("namespace") else ""))
    if doc.get("error"):
        out.append(f"- **error:** {doc['error']}")
    out.append("")
    return out


def _checks(doc: dict[str, Any]) -> list[str]:
    out = ["## Checks", ""]
    for c in doc.get("checks", []):
        out.append(f"- {'PASS' if c['passed'] else 'FAIL'} {c['name']}" + (f" — {c['detail']}" if c.get("detail") else ""))
    out.append("")
    return out


def render_stress(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    from .scenarios.stress import summarize_stress

    s = summarize_stress(rows, doc.get("extras") or {}) if rows else doc.get("summary", {})
    st = doc.get("settings", {})
    model = f"open model at {st.get('rate')} inputs/s" if st.get("rate") else "closed model"
    out = _header(doc, "stress")
    out += [
        f"{st.get('conns')} connections x {st.get('inputs')} inputs ({model}), mix `{st.get('mix')}`"
        + (f", {st.get('interrupts')} interrupts/s" if st.get("interrupts") else ""),
        "",
        "## Verdicts",
        "",
        "| attempted | passed | pass rate | throughput |",
        "|---:|---:|---:|---:|",
        f"| {s.get('attempted')} | {s.get('passed')} | {_pct(s.get('pass_rate'))} | {_num(s.get('throughput_per_s'), '{:.1f}/s')} |",
        "",
    ]
    if s.get("failures"):
        ex = s.get("failure_examples") or {}
        out += ["| failure | count | first seen as |", "|---|---:|---|"]
        out += [f"| {k} | {v} | `{ex.get(k, k)}` |" for k, v in s["failures"].items()] + [""]
    out += ["## Latency (passed turns only)", "", "| measure | n | p50 | p90 | p99 | max |", "|---|---:|---:|---:|---:|---:|"]
    for name, key in (("done (from send)", "latency_s"), ("first frame", "first_frame_s"), ("done (from schedule)", "scheduled_latency_s")):
        p = s.get(key)
        if p:
            out.append(f"| {name} | {p.get('n')} | {_ms(p.get('p50'))} | {_ms(p.get('p90'))} | {_ms(p.get('p99'))} | {_ms(p.get('max'))} |")
    out.append("")
    k = s.get("kernel") or {}
    if k:
        out += ["## Kernel counters", "", "| " + " | ".join(k) + " |", "|" + "---:|" * len(k), "| " + " | ".join(str(v) for v in k.values()) + " |", ""]
    r = s.get("resources") or {}
    if r:
        out += [
            "## Resources (target process tree)",
            "",
            f"peak RSS {_num(r.get('peak_rss_mb'), '{:.1f} MB')}, peak CPU {_num(r.get('peak_cpu_pct'), '{:.0f}%')} "
            f"(mean {_num(r.get('mean_cpu_pct'), '{:.0f}%')}), peak threads {r.get('peak_threads')}, peak fds {r.get('peak_fds')}, "
            f"peak children {r.get('peak_children')}, peak queue {s.get('peak_queue')}; {r.get('samples')} samples, "
            f"sampler CPU {_num(r.get('sampler_cpu_s'), '{:.3f} s')}",
            "",
        ]
    if s.get("capacity_errors"):
        out += [f"Capacity errors (harness side): {s['capacity_errors']}", ""]
    out += _checks(doc)
    return "\n".join(out)


def render_batch(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    st = doc.get("settings", {})
    s = summarize("batch", st, rows) or doc.get("summary", {})
    out = _header(doc, "batch")
    out += [
        f"kinds {', '.join(st.get('kinds', []))} for N in {', '.join(map(str, st.get('ns', [])))}, {st.get('rounds')} round(s) each, one turn at a time",
        "",
        f"{s.get('passed')}/{s.get('attempted')} turns passed ({_pct(s.get('pass_rate'))})",
        "",
        "| marker | turns | passed | overlap (min..max) | tool phase (median) | turn (median) | failures |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for r in s.get("rows", []):
        ov = "-" if r["overlap_min"] is None else (f"{r['overlap_min']}" if r["overlap_min"] == r["overlap_max"] else f"{r['overlap_min']}..{r['overlap_max']}")
        fails = ", ".join(f"{k} x{v}" for k, v in r["failures"].items()) or "-"
        out.append(f"| `{r['marker']}` | {r['turns']} | {r['passed']} | {ov} | {_ms(r['tool_median_s'])} | {_ms(r['latency_median_s'])} | {fails} |")
    out.append("")
    out.append("Overlap is the peak number of timed tools running at once, from the KST-S/KST-E timestamps the tools echoed; `!mixedN` must show 1.")
    out.append("")
    out += _checks(doc)
    return "\n".join(out)


def render_abtest(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    st = doc.get("settings", {})
    tool_ms = _abtest_tool_ms(st)
    s = summarize("abtest", st, rows) or doc.get("summary", {})
    out = _header(doc, "abtest")
    out += [
        f"`!slowbatchN` (concurrent) vs `!serialbatchN` (serial control), {st.get('rounds')} interleaved rounds (ABBA), tools of {tool_ms} ms; "
        "time = the kernel's tool phase (tool_ms of the verdict line); medians with 95% bootstrap intervals.",
        "",
        "| N | concurrent | serial | speedup [95% CI] | ideal | overlap conc. | overlap serial | valid |",
        "|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in s.get("rows", []):
        ci = r.get("speedup_ci")
        sp = "-" if r.get("speedup") is None else f"{r['speedup']:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci and ci[0] is not None else "")
        valid = "yes" if r["valid"] else "NO: " + "; ".join(r["reasons"])
        out.append(
            f"| {r['n']} | {_ms(r['concurrent_median_s'])} | {_ms(r['serial_median_s'])} | {sp} | {r['ideal']:.2f}x | "
            f"{_num(r['overlap_concurrent'], '{:g}')} | {_num(r['overlap_serial'], '{:g}')} | {valid} |"
        )
    out.append("")
    warn = [f"N={r['n']}: {w}" for r in s.get("rows", []) for w in r.get("warnings", [])]
    inval = [f"N={r['n']}: {k} x{v}" for r in s.get("rows", []) for k, v in r.get("invalid_rounds", {}).items()]
    if inval:
        out += ["Invalid rounds (reported, never samples):", ""] + [f"- {x}" for x in inval] + [""]
    if warn:
        out += ["Stability warnings:", ""] + [f"- {w}" for w in warn] + [""]
    out += _checks(doc)
    return "\n".join(out)


def render_cmp(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    st = doc.get("settings", {})
    s = summarize("cmp", st, rows) or doc.get("summary", {})
    out = _header(doc, "cmp")
    out += [
        f"OLD `{st.get('old')}` vs NEW `{st.get('new')}`, interleaved rounds (ABBA); better/worse needs p < {st.get('alpha')} "
        f"(Mann-Whitney U) and a change of at least {st.get('min_effect', 0):.0%}.",
        "",
        "| dimension | metric | OLD | NEW | change | p | verdict |",
        "|---|---|---:|---:|---:|---:|---|",
    ]

    def val(d: dict[str, Any], v: str) -> str:
        if d.get(v) is None:
            return d.get(f"{v}_note", "unmeasurable")
        x = d[v]
        return f"{x:.1%}" if d["name"] in ("bombardment", "stability") else (f"{x:.2f}x" if d["name"] == "concurrency" else _ms(x))

    for d in s.get("dimensions", []):
        change = "-" if d.get("change") is None else (f"{d['change']:+.1%}" if d["name"] not in ("bombardment", "stability") else f"{d['change'] * 100:+.1f} pts")
        out.append(f"| {d['name']} | {d['metric']} | {val(d, 'old')} | {val(d, 'new')} | {change} | {_num(d.get('p'), '{:.3g}')} | **{d['verdict']}** |")
    out.append("")
    for d in s.get("dimensions", []):
        if d["name"] == "batch":
            out.append(f"- batch: tools processed OLD {d.get('old_processed')}, NEW {d.get('new_processed')}; error frames OLD {d.get('old_errors')}, NEW {d.get('new_errors')}")
        for w in d.get("warnings", []):
            out.append(f"- {d['name']}: {w}")
    out.append("")
    out += _checks(doc)
    return "\n".join(out)


def render_hold(doc: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    s = doc.get("summary", {})
    out = _header(doc, "hold")
    rss = s.get("harness_rss_mb") or {}
    out += [
        f"{s.get('connected')}/{s.get('requested')} connections opened and authenticated from one process in {s.get('open_s')} s; "
        f"{s.get('held_at_probe')} still open while {s.get('probe', {}).get('sent')} of them sent an input "
        f"({s.get('probe', {}).get('passed')} passed).",
        "",
        f"Harness memory: {rss.get('before')} MB before, {rss.get('held')} MB holding them: "
        f"**{s.get('harness_kb_per_connection')} KiB per connection**. The kernel reported {s.get('kernel_connections')} connections.",
        "",
        f"Failed connections by kind: {s.get('failures') or 'none'}",
        "",
    ]
    out += _checks(doc)
    return "\n".join(out)


RENDERERS: dict[str, Callable[[dict[str, Any], list[dict[str, Any]]], str]] = {
    "hold": render_hold,
    "stress": render_stress,
    "batch": render_batch,
    "abtest": render_abtest,
    "cmp": render_cmp,
}


def _abtest_tool_ms(settings: dict[str, Any]) -> int:
    return settings.get("tool_ms_effective") or settings.get("tool_ms") or 200


def summarize(scenario: str, settings: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A scenario's summary recomputed from its turn rows alone (what an
    interrupted run or a dead target leaves); {} for scenarios without one."""
    from .scenarios.abtest import summarize_abtest
    from .scenarios.batch import summarize_batch
    from .scenarios.cmp import summarize_cmp
    from .scenarios.stress import summarize_stress

    if not rows:
        return {}
    if scenario == "stress":
        return summarize_stress(rows, {})
    if scenario == "batch":
        return summarize_batch(rows)
    if scenario == "abtest":
        return summarize_abtest(rows, tuple(settings.get("ns", ())), settings.get("rounds", 0), _abtest_tool_ms(settings))
    if scenario == "cmp":
        return summarize_cmp(rows, settings)
    return {}


def rerender(path: Path) -> str:
    """`kstress report DIR`: re-render report.md from the raw files."""
    from .errors import UsageError

    doc, rows = load_run(path)
    fn = RENDERERS.get(doc.get("scenario", ""))
    if fn is None:
        raise UsageError(f"{path}: no report renderer for scenario {doc.get('scenario')!r}")
    text = fn(doc, rows)
    (path / "report.md").write_text(text)
    return text
