"""Formatting helpers for report.md: the header every report starts with, the
checks section, and number formats. Formatting only: the numbers come from a
scenario's summary (harness/runner.py, each scenario's ``render``); this module
imports nothing from the scenarios."""

from __future__ import annotations

import datetime as dt
from typing import Any


def fmt_ms(v: Any) -> str:
    return "-" if v is None else f"{v * 1000:.1f} ms"


def fmt_pct(v: Any) -> str:
    return "-" if v is None else f"{v:.1%}"


def fmt_num(v: Any, fmt: str = "{:.3g}") -> str:
    return "-" if v is None else fmt.format(v)


def header(doc: dict[str, Any], title: str) -> list[str]:
    started = dt.datetime.fromtimestamp(doc.get("started", 0), dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
    status = "PASS" if doc.get("passed") else "FAIL"
    out = [f"# kstress {title} — {status}", ""]
    code = doc.get("exit_code")
    out.append(f"- started {started}, {doc.get('duration_s') or 0:.1f} s, " + (f"exit code {code}" if code is not None else "never finished (no exit code)"))
    host = doc.get("meta", {}).get("host", {})
    out.append(f"- host {host.get('hostname')} ({host.get('cpus')} CPUs, Linux {host.get('kernel')}, Python {host.get('python')}), kstress {host.get('harness_version')}")
    for t in doc.get("meta", {}).get("targets", []):
        label = f"{t.get('label')}: " if t.get("label") else ""
        argv = " ".join(t.get("argv") or []) or t.get("socket") or ""
        sha = (t.get("bin_sha256") or "")[:16]
        out.append(f"- target {label}`{argv}`" + (f" (sha256 {sha}…)" if sha else "") + (f", sandbox {t.get('namespace')} ({t.get('mechanism')})" if t.get("namespace") else ""))
        c = t.get("contract")
        if isinstance(c, dict):
            out.append(f"  - contract: " + " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in c.items()))
    if doc.get("error"):
        out.append(f"- **error:** {doc['error']}")
    for note in doc.get("notes") or ():
        out.append(f"- **note:** {note}")
    out.append("")
    return out


def checks_section(doc: dict[str, Any]) -> list[str]:
    out = ["## Checks", ""]
    for c in doc.get("checks", []):
        out.append(f"- {'PASS' if c['passed'] else 'FAIL'} {c['name']}" + (f" — {c['detail']}" if c.get("detail") else ""))
    for sk in (doc.get("extras") or {}).get("skipped") or ():
        out.append(f"- SKIPPED {sk.get('check')} — {sk.get('why')}")
    out.append("")
    return out
