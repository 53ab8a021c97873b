"""resilience: how the kernel survives a misbehaving LLM (issue 24).

Each fault class is a fault schedule the mock plays per attempt (429 with
Retry-After, 529, 500, a reset, a stalled stream, a cut stream, more failures
than the kernel retries) on a tool turn (`!batch2`), a few turns of it on a few
connections. Every turn is graded from the mock's record of its attempts
against the contract's retries / retry_after / backoff / llm_timeout
(harness/judge/resilience.py); the verdict line still proves that the tools
of the retry that came through ran, once each. Exit 1 on any grade that breaks
the contract. docs/resilience.md."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from mock.errors import MarkerError
from mock.markers import build_plan, parse_markers

from ..errors import UsageError
from ..judge.contract import Contract
from ..judge.resilience import BREAKS, KEEPS, STALL_SLACK_S, expected, grade, stall_ms, tally, timeline
from ..judge.verdict import TurnVerdict
from ..load.shapes import DURATION_HELP, duration_parser
from ..results.stats import summarize
from ..results.report import checks_section, fmt_ms, header, md_code, md_text
from ..results.rundir import Check
from ..sandbox.sut import Access, Target
from ..wire.client import Turn
from .options import check_timeouts, connect_opt, opt, out_opt, quiet_opt, threshold_opt
from .runner import Run, RunResult, Scenario, run_scenario
from .seq import Sequential

PLAN = "!batch2"  # the tool turn each fault rides on: its verdict proves the retry's tools ran
CLASSES = ("429", "529", "500", "503", "reset", "stall", "truncate", "exhausted")
DEFAULT_CLASSES = ("429", "529", "500", "reset", "stall", "truncate", "exhausted")
CLASS_HELP = {
    "429": "HTTP 429 with Retry-After: 1, min(retries, 2) times (at least once)",
    "529": "HTTP 529 overloaded, once",
    "500": "HTTP 500, min(retries, 2) times (at least once): two waits show a backoff's growth",
    "503": "HTTP 503, min(retries, 2) times (at least once)",
    "reset": "the connection closed before any byte, once",
    "stall": "the stream silent for llm_timeout + 2 s after its first chunks, once",
    "truncate": "every stream cut before its terminal event",
    "exhausted": "HTTP 500 retries + 1 times: one more than the kernel may retry",
}


def _classes(value: str) -> tuple[str, ...]:
    items = tuple(c.strip() for c in value.split(","))
    if not value.strip() or any(not c for c in items):
        raise UsageError(f"--classes {value!r} has an empty item: give fault classes ({', '.join(CLASSES)}) or fault markers "
                         f"(e.g. '!flaky:503x2:ra=3'), comma-separated")
    return items


@dataclass(frozen=True)
class ResilienceSettings:
    classes: tuple[str, ...] = opt(DEFAULT_CLASSES, "--classes", str,
                                   "Fault classes (" + ", ".join(CLASSES) + ") or fault markers (e.g. '!flaky:503x2:ra=3'), comma-separated.",
                                   parse=_classes, shown=",".join(DEFAULT_CLASSES))
    rounds: int = opt(2, "--rounds", int, "Turns per fault class.")
    conns: int = opt(2, "--conns", int, "Connections each class's turns run on at once.")
    stall_max_s: float = opt(30.0, "--stall-max", float, "Longest stall to give a stream (seconds); a longer llm_timeout leaves the stall class not run.")
    load_s: float = opt(10.0, "--load", str, "Each of the two load phases' length (" + DURATION_HELP + "; 0: no load phase): the kernel's "
                        "throughput unlimited, then under a provider-wide rate limit at half its LLM request rate.",
                        parse=duration_parser("--load"), shown="10s")
    load_conns: int = opt(8, "--load-conns", int, "Connections of the load phases.")
    timeout_s: float = opt(60.0, "--timeout", float, "Seconds one turn may take (the stall class adds its stall).")
    connect_timeout_s: float = connect_opt()
    out: Path = out_opt()
    quiet: bool = quiet_opt()
    thresholds: tuple[str, ...] = threshold_opt()

    def __post_init__(self) -> None:
        check_timeouts(self)
        if not self.classes:
            raise UsageError(f"--classes is empty: give one or more of {', '.join(CLASSES)}")
        for c in self.classes:
            if c not in CLASSES and not c.startswith("!"):
                raise UsageError(f"--classes {c!r} is unknown: use {', '.join(CLASSES)}, or a fault marker such as '!flaky:503x2:ra=3'")
            if c.startswith("!"):
                _fault_of(c)
        if len(set(self.classes)) != len(self.classes):
            raise UsageError(f"--classes {','.join(self.classes)!r} names a class twice: give each once")
        if not 1 <= self.rounds <= 100:
            raise UsageError(f"--rounds {self.rounds} is invalid: use 1 to 100 turns per class")
        if not 1 <= self.conns <= 64:
            raise UsageError(f"--conns {self.conns} is invalid: use 1 to 64")
        if isinstance(self.stall_max_s, bool) or not 1 <= self.stall_max_s <= 3600:
            raise UsageError(f"--stall-max {self.stall_max_s!r} is invalid: use 1 to 3600 seconds")
        if not 0 <= self.load_s <= 3600:
            raise UsageError(f"--load {self.load_s:g} s is invalid: use 0 (no load phase) to 1h, e.g. --load 10s")
        if not 1 <= self.load_conns <= 1024:
            raise UsageError(f"--load-conns {self.load_conns} is invalid: use 1 to 1024")


def _fault_of(marker: str) -> tuple[str, str | None, int | None]:
    """A fault marker's (kind, label, count), by the mock's own grammar: a
    bad one is a usage error naming the value, the rule and the fix."""
    try:
        plan_marker, fault_marker_ = parse_markers(marker)
        plan = build_plan(f"{marker} {PLAN}") if fault_marker_ is not None and plan_marker is None else None
    except MarkerError as exc:
        raise UsageError(f"--classes item {marker!r}: {exc}") from None
    if plan is None or plan.fault is None:
        raise UsageError(f"--classes item {marker!r} is no fault marker: write !flaky:KINDxN[:ra=S], !stall:MS[xN] or !truncate "
                         f"(docs/markers.md), or a class name ({', '.join(CLASSES)})")
    f = plan.fault
    return f.kind, f.label, (None if f.kind == "truncate" else f.count)


def fault_marker(cls: str, contract: Contract) -> str:
    """The fault marker a class plays against this contract."""
    within = max(1, min(contract.retries, 2))
    if cls in ("429", "500", "503"):
        return f"!flaky:{cls}x{within}"
    if cls == "529":
        return "!flaky:529x1"
    if cls == "reset":
        return "!flaky:resetx1"
    if cls == "stall":
        return f"!stall:{stall_ms(contract)}"
    if cls == "truncate":
        return "!truncate"
    if cls == "exhausted":
        return f"!flaky:500x{contract.retries + 1}"
    return cls  # a fault marker given as it is


async def run_resilience(settings: ResilienceSettings, access: Access) -> RunResult:
    target = Target(access)

    async def body(run: Run) -> None:
        contract = target.contract
        run.extras["contract"] = contract.to_json()
        if target.join is None:
            raise UsageError("kstress resilience grades each turn from the mock's record of its attempts: run it with --launch or a "
                             "sandbox, or give --mock (the mock the kernel talks to) with --socket/--url")
        plans, skipped = [], []
        for cls in settings.classes:
            marker = fault_marker(cls, contract)
            kind, label, count = _fault_of(marker)
            if kind == "stall" and stall_ms(contract) / 1000 > settings.stall_max_s:
                skipped.append({"class": cls, "marker": marker, "why": (
                    f"a stall past llm_timeout={contract.llm_timeout:g} s + {STALL_SLACK_S:g} s slack would take "
                    f"{stall_ms(contract) / 1000:g} s, over --stall-max {settings.stall_max_s:g} s: declare the kernel's own "
                    f"llm_timeout (e.g. --contract llm_timeout=5, with the kernel's timeout set to 5 s) or raise --stall-max")})
                continue
            plans.append((cls, marker, kind, count))
        run.extras["skipped"] = skipped
        for cls, marker, kind, count in plans:
            timeout = settings.timeout_s + (stall_ms(contract) / 1000 if kind == "stall" else 0.0)
            labels = {"kind": "resilience", "fault_class": cls, "fault_marker": marker, "fault_kind": kind,
                      "expect": expected(contract, kind, count)}
            await _class_turns(run, target, contract, f"{marker} {PLAN}", settings, timeout, labels)
        if settings.load_s > 0:
            await _load_phases(run, target, contract, settings)

    total = settings.rounds * len(settings.classes)
    return await run_scenario(SCENARIO, settings, [target], body, total=total)


def _grader(target: Target, contract: Contract, with_timeline: bool) -> Callable[[Turn, TurnVerdict], Awaitable[dict[str, Any]]]:
    """Run.record's ``more``: the turn's grade from the mock's record of its
    attempts (and, for the classes, the attempt timeline the report shows)."""

    async def graded(turn: Turn, v: TurnVerdict) -> dict[str, Any]:
        entry = await target.join.get(turn.nonce) if target.join is not None else None
        out: dict[str, Any] = {"grade": grade(contract, entry, outcome=turn.outcome, passed=v.passed,
                                              failure=v.failures[0] if v.failures else None, t_client=turn.t_done)}
        if with_timeline:
            out["timeline"] = timeline(entry, turn.t_done, turn.outcome)
        return out

    return graded


async def _class_turns(run: Run, target: Target, contract: Contract, text: str, settings: ResilienceSettings, timeout: float,
                       labels: dict[str, Any]) -> None:
    """``rounds`` turns of one class over up to ``conns`` connections at once."""
    todo = list(range(settings.rounds))

    graded = _grader(target, contract, with_timeline=True)

    async def conn() -> None:
        seq = Sequential(run, target, timeout, settings.connect_timeout_s)
        try:
            while todo:
                await seq.turn(text, more=graded, round=todo.pop(0), **labels)
        finally:
            await seq.aclose()

    async with asyncio.TaskGroup() as tg:
        for _ in range(min(settings.conns, settings.rounds)):
            tg.create_task(conn())


LOAD_TURNS_MAX = 100_000  # per connection and phase: a load loop is bounded in count as well as time


async def _load_phases(run: Run, target: Target, contract: Contract, settings: ResilienceSettings) -> None:
    """The kernel's own pace first (no limit), then the provider-wide rate
    limit at half the LLM request rate it reached: offered twice what the
    provider allows, does it retry as declared, tell its clients, keep up?"""
    assert target.join is not None
    base = await _closed_loop(run, target, contract, settings, "load_base")
    requests = sum((r.get("anatomy") or {}).get("requests") or 2 for r in base if r.get("passed"))
    rate = requests / settings.load_s / 2
    run.extras["load"] = {"request_rate": requests / settings.load_s, "rate_limit": rate if rate > 0 else None}
    if rate <= 0:
        run.extras["load"]["why"] = "no turn passed in the unlimited phase, so there is no request rate to halve"
        return
    await target.join.set_rate_limit(rate)
    try:
        await _closed_loop(run, target, contract, settings, "load_limited")
    finally:
        await target.join.set_rate_limit(None)


async def _closed_loop(run: Run, target: Target, contract: Contract, settings: ResilienceSettings, kind: str) -> list[dict[str, Any]]:
    """``load_conns`` connections sending `!batch2` back to back for ``load_s``."""
    end = asyncio.get_running_loop().time() + settings.load_s
    first = len(run.rows)

    graded = _grader(target, contract, with_timeline=False)

    async def conn(i: int) -> None:
        seq = Sequential(run, target, settings.timeout_s, settings.connect_timeout_s)
        try:
            for n in range(LOAD_TURNS_MAX):
                if asyncio.get_running_loop().time() >= end:
                    break
                await seq.turn(PLAN, more=graded if kind == "load_limited" else None, kind=kind, conn=i, seq=n)
        finally:
            await seq.aclose()

    async with asyncio.TaskGroup() as tg:
        for i in range(settings.load_conns):
            tg.create_task(conn(i))
    return run.rows[first:]


def _phase(rows: list[dict[str, Any]], seconds: float | None) -> dict[str, Any]:
    ok = [r for r in rows if r.get("passed")]
    lat = summarize([r["latency_s"] for r in ok if isinstance(r.get("latency_s"), (int, float))], (50, 95))
    errors = Counter(r.get("error_code") or "?" for r in rows if r.get("outcome") == "error")
    return {"turns": len(rows), "passed": len(ok), "throughput": len(ok) / seconds if seconds else None, "p50_s": lat["p50"], "p95_s": lat["p95"],
            "errors": dict(errors), "no_answer": sum(1 for r in rows if r.get("outcome") not in ("response", "error"))}


def summarize_resilience(rows: list[dict[str, Any]], settings: dict[str, Any], extras: dict[str, Any]) -> dict[str, Any]:
    classes: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("kind") == "resilience":
            classes.setdefault(r.get("fault_class") or "?", []).append(r)
    table, examples = [], []
    for cls, rs in classes.items():
        outcomes, broken = tally(r.get("grade") or {"outcomes": ["ungraded"]} for r in rs)
        # the example: a turn that broke the contract, else the first
        ex = next((r for r in rs if (r.get("grade") or {}).get("broken")), rs[0])
        retries = [(r.get("grade") or {}).get("retries") for r in rs]
        table.append({
            "class": cls,
            "marker": rs[0].get("fault_marker"),
            "expect": rs[0].get("expect"),
            "turns": len(rs),
            "passed_verdict": sum(1 for r in rs if r.get("passed")),
            "outcomes": dict(outcomes),
            "broken": dict(broken),
            "ungraded": outcomes.get("ungraded", 0),
            "retries_max": max((x for x in retries if isinstance(x, int)), default=None),
            "example": next(iter((ex.get("grade") or {}).get("broken") or ()), None),
            "latency_median_s": sorted(lat)[len(lat) // 2] if (lat := [r["latency_s"] for r in rs if isinstance(r.get("latency_s"), (int, float))]) else None,
        })
        tl = ex.get("timeline") or {}
        examples.append({"class": cls, "marker": rs[0].get("fault_marker"), "nonce": ex.get("nonce"), "attempts": tl.get("attempts") or [],
                         "client": tl.get("client") or {}, "outcomes": (ex.get("grade") or {}).get("outcomes") or []})
    graded = [r for r in rows if r.get("kind") == "resilience"]
    load = None
    base, limited = [r for r in rows if r.get("kind") == "load_base"], [r for r in rows if r.get("kind") == "load_limited"]
    if base:
        seconds = settings.get("load_s") or None
        lim = _phase(limited, seconds)
        outcomes, broke = tally(r.get("grade") or {} for r in limited)
        lim.update(outcomes=dict(outcomes), broken=dict(broke),
                   example=next((b for r in limited for b in (r.get("grade") or {}).get("broken") or ()), None),
                   rate_limited=sum(1 for r in limited if "ungraded" not in ((r.get("grade") or {}).get("outcomes") or ["ungraded"])))
        load = {**(extras.get("load") or {}), "seconds": seconds, "conns": settings.get("load_conns"), "base": _phase(base, seconds), "limited": lim}
    return {
        "attempted": len(graded),
        "broken_turns": sum(1 for r in graded if (r.get("grade") or {}).get("broken")),
        "ungraded": sum(t["ungraded"] for t in table),
        "classes": table,
        "timeline": examples,
        "skipped": extras.get("skipped") or [],
        "load": load,
        "contract": extras.get("contract"),
    }


def resilience_checks(s: dict[str, Any], settings: dict[str, Any]) -> list[Check]:
    c = s.get("contract") or {}
    declared = f"retries={c.get('retries')} retry_after={str(c.get('retry_after')).lower()} backoff={c.get('backoff')} llm_timeout={c.get('llm_timeout')}"
    bad = [t for t in s.get("classes") or () if t["broken"]]
    checks = [Check(
        "every fault class kept the declared contract",
        s.get("attempted", 0) > 0 and not bad,
        "; ".join(f"{t['class']}: {', '.join(f'{k} x{v}' for k, v in t['broken'].items())} — e.g. {t['example']}" for t in bad)
        or f"{s.get('attempted', 0)} turns over {len(s.get('classes') or ())} classes, as {declared} says",
    )]
    ungraded = s.get("ungraded") or 0
    checks.append(Check("every turn was graded from the mock's record", s.get("attempted", 0) > 0 and not ungraded,
                        f"{ungraded} turn(s) the mock has no record of" if ungraded else "all"))
    for sk in s.get("skipped") or ():
        checks.append(Check(f"fault class {sk['class']} ran", False, f"not run: {sk['why']}", ran=False))
    load = s.get("load")
    if load is not None:
        name = "under a rate limit at half its request rate, the kernel kept the declared contract"
        lim = load.get("limited") or {}
        if not load.get("rate_limit"):
            checks.append(Check(name, False, f"not run: {load.get('why') or 'no rate limit was set'}", ran=False))
        else:
            bad = lim.get("broken") or {}
            checks.append(Check(name, not bad and lim.get("turns", 0) > 0,
                                f"{', '.join(f'{k} x{v}' for k, v in bad.items())} — e.g. {lim.get('example')}" if bad
                                else f"{lim.get('rate_limited', 0)} of {lim.get('turns', 0)} turns met the limit; none broke the contract"))
    return checks


def render_resilience(doc: dict[str, Any], s: dict[str, Any]) -> str:
    st = doc.get("settings", {})
    c = s.get("contract") or {}
    out = header(doc, "resilience")
    out += [
        f"fault classes {', '.join(st.get('classes') or [])}, {st.get('rounds')} turn(s) each on up to {st.get('conns')} connection(s); "
        f"each rides on `{PLAN}` (its verdict proves the tools of the attempt that came through ran)",
        "",
        f"Contract: retries={c.get('retries')} retry_after={str(c.get('retry_after')).lower()} backoff={c.get('backoff')} llm_timeout={c.get('llm_timeout')} s",
        "",
        "| class | fault marker | expected | turns | outcomes | broken | most retries | turn (median) |",
        "|---|---|---|---:|---|---|---:|---:|",
    ]
    for t in s.get("classes") or ():
        outs = ", ".join(f"{k} x{v}" for k, v in t["outcomes"].items() if k not in t["broken"]) or "-"
        broke = ", ".join(f"**{k}** x{v}" for k, v in t["broken"].items()) or "-"
        out.append(f"| {t['class']} | {md_code(t['marker'] or '')} | {t['expect']} | {t['turns']} | {md_text(outs)} | {broke} | "
                   f"{t['retries_max'] if t['retries_max'] is not None else '-'} | {fmt_ms(t['latency_median_s'])} |")
    for sk in s.get("skipped") or ():
        out.append(f"| {sk['class']} | {md_code(sk['marker'])} | - | 0 | not run | - | - | - |")
    out += ["", f"Outcomes that keep the contract: {', '.join(KEEPS)}; that break it: {', '.join(BREAKS)} (docs/resilience.md).", ""]
    load = s.get("load")
    if load is not None:
        b, lim = load.get("base") or {}, load.get("limited") or {}
        rl = load.get("rate_limit")
        out += ["## Under a provider-wide rate limit", "",
                f"{load.get('conns')} connections sending `{PLAN}` back to back for {load.get('seconds'):g} s, first unlimited, then with the mock "
                f"refusing past {f'{rl:.1f}' if rl else '-'} requests/s (half the {load.get('request_rate') or 0:.1f}/s the kernel reached) "
                f"with 429 and the wait in Retry-After.", "",
                "| phase | turns | passed | throughput | p50 | p95 | errors to the client | no answer |",
                "|---|---:|---:|---:|---:|---:|---|---:|"]
        for name, ph in (("unlimited", b), ("rate-limited", lim)):
            if not ph:
                continue
            errs = ", ".join(f"{k} x{v}" for k, v in (ph.get("errors") or {}).items()) or "-"
            tp = f"{ph['throughput']:.1f}/s" if isinstance(ph.get("throughput"), (int, float)) else "-"
            out.append(f"| {name} | {ph.get('turns')} | {ph.get('passed')} | {tp} | {fmt_ms(ph.get('p50_s'))} | {fmt_ms(ph.get('p95_s'))} | "
                       f"{md_text(errs)} | {ph.get('no_answer')} |")
        if lim:
            outs = ", ".join(f"{k} x{v}" for k, v in (lim.get("outcomes") or {}).items()) or "-"
            out += ["", f"Grades of the rate-limited turns: {md_text(outs)}."]
        out.append("")
    if s.get("timeline"):
        out += ["## Attempt timelines (one example per class)", "",
                "Seconds from the first attempt's arrival at the mock; `ra` is the Retry-After that attempt's answer said.", ""]
        for ex in s["timeline"]:
            parts = []
            for a in ex.get("attempts") or ():
                what = a.get("fault") or ("follow-up" if a.get("followup") else "ok")
                ra = f" ra={a['retry_after_s']:g}s" if a.get("retry_after_s") is not None else ""
                parts.append(f"{a.get('t_s', 0):.3f}s {what} ({a.get('status')}){ra}")
            cl = ex.get("client") or {}
            when = f"{cl['t_s']:.3f}s" if isinstance(cl.get("t_s"), (int, float)) else "?"
            out.append(f"- **{ex['class']}** {md_code(ex.get('marker') or '')}: " + " → ".join(parts)
                       + f" → client {cl.get('outcome')} at {when} [{', '.join(ex.get('outcomes') or [])}]")
        out.append("")
    out += checks_section(doc)
    return "\n".join(out)


SCENARIO = Scenario(
    name="resilience",
    help="Fault classes (429, 529, 500, reset, stall, truncate, exhausted) graded against the contract's retries, retry_after, backoff and llm_timeout.",
    settings=ResilienceSettings,
    run=run_resilience,
    summarize=summarize_resilience,
    checks=resilience_checks,
    render=render_resilience,
)
