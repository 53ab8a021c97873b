"""Formatting helpers for report.md: the header every report starts with, the
checks section, and number formats. Formatting only: the numbers come from a
scenario's summary (harness/scenarios/runner.py, each scenario's ``render``); this module
imports nothing from the scenarios."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

from .observed import not_checked


_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", "\\": "\\\\", "`": "\\`", "[": "\\[", "]": "\\]",
                             "|": "\\|", "\r": " ", "\n": " ⏎ "})


HTML_ENV = "KSTRESS_HTML"
_HTML_VALUES = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def html_wanted() -> bool:
    """Whether a run ends by drawing report.html (``KSTRESS_HTML``, default
    on). Drawing it costs about 2 CPU-seconds a run, 1.1 of them importing
    matplotlib: a job that runs kstress in a loop and reads run.json can
    leave it out (``KSTRESS_HTML=0``) and draw it later, from the run's
    files, with ``kstress report DIR --format html``. A value it does not
    know is an error (check_html_env), never a silent default."""
    return _HTML_VALUES.get(os.environ.get(HTML_ENV, "1").strip().lower(), True)


def check_html_env() -> None:
    from ..errors import UsageError

    v = os.environ.get(HTML_ENV)
    if v is not None and v.strip().lower() not in _HTML_VALUES:
        raise UsageError(f"{HTML_ENV}={v!r} is invalid: use 1 (draw report.html at the end of a run, the default) or 0 (leave it out; "
                         "`kstress report DIR --format html` draws it later)")


def md_text(v: Any) -> str:
    """A value a kernel or a user supplied (an error code or message, a reply,
    a failure detail, a target's name or argv) as inert Markdown text: no tag
    (entities, which CommonMark and Python-Markdown both decode, since
    Python-Markdown does not honour a backslash before ``<``; ``>`` alone
    opens nothing mid-line), no link or code span, no ``|`` that would split
    a table cell, and on one line (a newline would end the table row or the
    list item). ``*`` and ``_`` stay: emphasis is harmless, and failure names
    such as ``error_frame`` stay greppable in report.md."""
    return str(v).replace("\r\n", "\n").translate(_MD_ESCAPES)


def md_code(v: Any) -> str:
    """``v`` as a code span when that is safe in a table cell too (a code span
    shows ``<`` as it is, but a backtick ends it and GitHub splits a cell at a
    ``|`` even inside one); otherwise as :func:`md_text`."""
    s = str(v)
    return f"`{s}`" if s and not any(c in s for c in "`|\r\n") else md_text(s)


def fmt_ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def fmt_pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1%}"


def fmt_num(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def header(doc: dict[str, Any], title: str) -> list[str]:
    started = dt.datetime.fromtimestamp(doc.get("started", 0), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    status = "PASS" if doc.get("passed") else {99: "FAIL (a threshold)", 6: "INCOMPLETE (a core check could not run)"}.get(doc.get("exit_code"), "FAIL")
    out = [f"# kstress {title} — {status}", ""]
    code = doc.get("exit_code")
    out.append(f"- started {started}, {doc.get('duration_s') or 0:.1f} s, " + (f"exit code {code}" if code is not None else "never finished (no exit code)"))
    host = doc.get("meta", {}).get("host", {})
    out.append(f"- host {host.get('hostname')} ({host.get('cpus')} CPUs, Linux {host.get('kernel')}, Python {host.get('python')}), kstress {host.get('harness_version')}")
    for t in doc.get("meta", {}).get("targets", []):
        label = f"{md_text(t.get('label') or t.get('kernel'))}: " if t.get("label") or t.get("kernel") else ""
        argv = " ".join(t.get("argv") or []) or t.get("socket") or ""
        sha = (t.get("bin_sha256") or "")[:16]
        out.append(f"- target {label}{md_code(argv)}" + (f" (sha256 {sha}…)" if sha else "") + (f", sandbox {t.get('namespace')} ({t.get('mechanism')})" if t.get("namespace") else ""))
        c = t.get("contract")
        if isinstance(c, dict):
            out.append("  - contract: " + md_text(" ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in c.items())))
    src = (doc.get("meta") or {}).get("source") or {}
    if src.get("scenario_file"):
        out.append(f"- scenario file {md_code(src['scenario_file'])} (sha256 {str(src.get('scenario_file_sha256'))[:16]}…): `kstress run` it again to repeat this run")
    if html_wanted():
        out.append("- charts and this report as one page: [report.html](report.html)")
    else:
        out.append(f"- no report.html ({HTML_ENV}=0): `kstress report` of this run's directory with `--format html` draws it")
    if doc.get("error"):
        out.append(f"- **error:** {md_text(doc['error'])}")
    for note in doc.get("notes") or ():
        out.append(f"- **note:** {md_text(note)}")
    out.append("")
    return out


def checks_section(doc: dict[str, Any]) -> list[str]:
    out = ["## Checks", ""]
    for c in doc.get("checks", []):
        mark = "NOT RUN" if c.get("ran") is False else "PASS" if c["passed"] else "FAIL"
        out.append(f"- {mark} {md_text(c['name'])}" + (f" — {md_text(c['detail'])}" if c.get("detail") else ""))
    for sk in (doc.get("extras") or {}).get("skipped") or ():
        out.append(f"- SKIPPED {md_text(sk.get('check'))} — {md_text(sk.get('why'))}")
    for name, why in not_checked(doc.get("extras") or {}):
        out.append(f"- NOT CHECKED {md_text(name)} — {md_text(why)}")
    out.append("")
    out += failure_examples_section(doc)
    thresholds = (doc.get("summary") or {}).get("thresholds") or ()
    if thresholds:
        from .thresholds import fmt_value

        out += ["## Thresholds", "", "| threshold | measured | result | |", "|---|---:|---|---|"]
        for t in thresholds:
            out.append(f"| {md_code(t['expr'])} | {fmt_value(t['expr'], t.get('value'))} | {'PASS' if t['passed'] else '**FAIL**'} | {md_text(t.get('detail') or '')} |")
        failed = sum(not t["passed"] for t in thresholds)
        out += ["", f"{failed} of {len(thresholds)} thresholds failed: exit code 99." if failed else f"All {len(thresholds)} thresholds held.", ""]
    return out


def failure_examples_section(doc: dict[str, Any]) -> list[str]:
    """One failed turn per failure name (run.json extras.failure_examples,
    harness/judge/forensics.py): what was expected, what came, and the nonce whose
    whole story `kstress show RUN NONCE` prints from failures.jsonl."""
    fx = (doc.get("extras") or {}).get("failure_examples") or {}
    examples = fx.get("examples") or {}
    if not examples:
        return []
    out = ["## Failure examples", "", "One failed turn per failure name; `kstress show RUN NONCE` prints its frames, the mock's requests and the verdict.", ""]
    kept, not_kept = fx.get("kept") or {}, fx.get("not_kept") or {}
    for name, ex in examples.items():
        counts = f"{kept.get(name, 0)} kept in failures.jsonl" + (f", {not_kept[name]} more not kept" if not_kept.get(name) else "")
        out.append(f"- **{md_text(name)}** ({md_code(ex.get('nonce'))}, {counts}): {md_text(ex.get('failure'))}")
        out.append(f"  - expected: {md_text(ex.get('want'))}")
        out.append(f"  - came: {md_text(ex.get('came'))}")
    dropped = sorted(set(not_kept) - set(examples))
    if dropped:
        out.append(f"- not kept at all (over the limit of failure names): {md_text(', '.join(f'{n} ({not_kept[n]})' for n in dropped))}")
    out.append("")
    return out


def latency_by_marker_section(s: dict[str, Any], title: str = "Latency by marker (passed turns)") -> list[str]:
    """summary.latency_by_marker (harness/results/thresholds.py) as one table: the
    all-turns row first, then one row per marker; and the throughput windows."""
    rows = s.get("latency_by_marker") or {}
    out: list[str] = []
    if rows:
        out += [f"## {title}", "", "| marker | n | p50 | p90 | p95 | p99 | max | mean |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for m, st in rows.items():
            name = "**all**" if m == "all" else md_code(m)
            out.append(f"| {name} | {st.get('n')} | " + " | ".join(fmt_ms(st.get(k)) for k in ("p50", "p90", "p95", "p99", "max", "mean")) + " |")
        out.append("")
    tp = s.get("throughput")
    if isinstance(tp, dict) and tp.get("windows"):
        out += [f"Throughput in {tp['window_s']:g} s windows: stable {tp['stable_per_s']:.1f}/s (median of the whole windows), "
                f"peak {tp['peak_per_s']:.1f}/s, over {len(tp['windows'])} windows.", ""]
    return out
