"""`kstress runs`: the stored runs under --out, newest first, one line each —
scenario, when, verdict, and the headline number of its scenario. Reads only
run.json (never turns.jsonl), so listing a thousand runs stays instant."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

from .report import fmt_ms, fmt_num, fmt_pct
from .rundir import LATEST, run_dirs


def verdict(doc: dict[str, Any]) -> str:
    status = doc.get("status", "completed")
    if status == "running":
        return "running or cut short"
    if status != "completed":
        return f"{status} (exit {doc.get('exit_code')})"
    if doc.get("passed"):
        return "PASS"
    return {99: "FAIL (threshold)", 6: "INCOMPLETE (exit 6)"}.get(doc.get("exit_code"), f"FAIL (exit {doc.get('exit_code')})")


def headline(doc: dict[str, Any]) -> str:
    """The one number a reader of this scenario looks at first."""
    s = doc.get("summary") or {}
    sc = doc.get("scenario")
    if sc in ("stress", "sessions"):
        lat = s.get("latency_s") or {}
        return f"{s.get('passed')}/{s.get('attempted')} passed, p95 {fmt_ms(lat.get('p95'))}" + (f", {s['throughput_per_s']:.1f}/s" if isinstance(s.get("throughput_per_s"), (int, float)) else "")
    if sc == "findmax":
        return f"max level {fmt_num(s.get('max_level'), '{:g}')} {s.get('unit') or ''}, stopped: {s.get('stop_reason')}"
    if sc == "abtest":
        return "speedup " + ", ".join(f"N={r.get('n')} {fmt_num(r.get('speedup'), '{:.2f}x')}" for r in s.get("rows") or ())
    if sc == "cmp":
        reg = s.get("regressed") or []
        return "regressed: " + ", ".join(reg) if reg else "no regression"
    if sc == "hold":
        return f"{s.get('connected')}/{s.get('requested')} connections held"
    if sc == "batch":
        return f"{s.get('passed')}/{s.get('attempted')} passed ({fmt_pct(s.get('pass_rate'))})"
    return ""


def list_runs(root: Path, limit: int | None = 20) -> list[dict[str, Any]]:
    out = []
    latest = (root / LATEST).resolve() if (root / LATEST).is_symlink() else None
    for d in reversed(run_dirs(root)):
        try:
            doc = json.loads((d / "run.json").read_text())
        except (OSError, ValueError) as exc:
            out.append({"run": d.name, "scenario": "?", "when": "", "verdict": f"unreadable run.json ({exc})", "headline": "", "latest": False})
            continue
        if not isinstance(doc, dict):
            continue
        when = dt.datetime.fromtimestamp(doc.get("started") or 0, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")
        out.append({"run": d.name, "scenario": doc.get("scenario"), "when": when, "verdict": verdict(doc), "headline": headline(doc),
                    "latest": latest is not None and d.resolve() == latest})
        if limit is not None and len(out) >= limit:
            break
    return out


def table(runs: list[dict[str, Any]]) -> str:
    if not runs:
        return "no runs"
    rows = [("run", "scenario", "started", "verdict", "headline")] + [
        (r["run"] + (" (latest)" if r["latest"] else ""), str(r["scenario"]), r["when"], r["verdict"], r["headline"]) for r in runs]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4] for row in rows)
