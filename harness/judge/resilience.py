"""How a kernel survives a misbehaving LLM (issue 24): one turn's grade, from
the mock's record of every attempt at its LLM requests, against what the
kernel declares in its contract (retries, retry_after, backoff, llm_timeout).

The mock decides each attempt's fault by the attempt's number (a fault
schedule: ``!flaky:429x2``, ``!stall:MS``, ``!truncate``; docs/markers.md) and
records its arrival, its bytes' times, its status, the fault it got and the
Retry-After it said. Everything here is read from those records and from how
the turn ended at the client; nothing asks the kernel what it meant to do.

Outcomes that keep the contract:
    recovered           the retries got through and the verdict line proves the tools ran
    gave_up             a clear error frame after exactly the attempts the contract allows
Outcomes that break it (docs/resilience.md has each one's rule):
    retry_after_ignored a retry came sooner than the Retry-After it was given
    retry_storm         more retries than declared, or one within STORM_GAP_S of a failure
    no_backoff          a retry no Retry-After set came at once, or (exponential) its
                        waits did not grow
    gave_up_early       fewer attempts than the contract promises, and the client got an error
    stall_unnoticed     a stream silent past llm_timeout + STALL_SLACK_S was waited out
    truncated_accepted  a stream cut before its terminal event was answered as whole
    error_hidden        the client got a normal answer without the verdict after a fault
    no_answer           the client got neither an answer nor an error (a timeout, a drop)
    verdict_failed      the LLM came through but the turn failed its verdict (a tool ran twice,
                        or not at all)
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Iterable

from .contract import Contract

# A retry this soon after a failure is no wait at all, whatever was declared.
STORM_GAP_S = 0.005
# A retry earlier than its Retry-After by more than this ignored it. The mock
# stamps the failure's last byte before the kernel can read it, so the gap it
# sees is never shorter than a kernel's whole wait: the tolerance is only the
# timers' and the rounding's (retry-after-ms is whole milliseconds, rounded
# up). It must stay small: under --rate-limit a Retry-After is a few ms.
RETRY_AFTER_TOLERANCE_S = 0.002
RETRY_AFTER_TOLERANCE = 0.01  # and 1% of a long one
# A declared backoff waits at least this: the openai SDK's least is 0.375 s.
MIN_BACKOFF_S = 0.05
# Exponential waits grow by at least this factor from one retry to the next
# (the openai SDK's: 0.375..0.5 s, then 0.75..1.0 s: at least 1.5).
BACKOFF_GROWTH = 1.2
# How much later than its llm_timeout a kernel may notice a silent stream.
STALL_SLACK_S = 1.0

FAILED = frozenset({"429", "500", "503", "529", "reset", "rate_limit", "truncate"})
KEEPS = ("recovered", "gave_up")
BREAKS = ("retry_after_ignored", "retry_storm", "no_backoff", "gave_up_early", "stall_unnoticed", "truncated_accepted", "error_hidden",
          "no_answer", "verdict_failed")


def stall_ms(contract: Contract) -> int:
    """The stall `kstress resilience` gives a stream: a second past the
    latest moment the kernel may notice it, so waiting it out is told apart."""
    return int((contract.llm_timeout + STALL_SLACK_S + 1.0) * 1000)


def _failed(r: dict[str, Any]) -> bool:
    """The attempt got no usable reply: a faulted status or reset, a cut
    stream, or a stall the kernel gave up on (it went away: 499)."""
    f = r.get("fault")
    return f in FAILED or (f == "stall" and r.get("status") != 200)


def _end(r: dict[str, Any]) -> float:
    """When the attempt's failure reached the kernel's socket (a reset sends
    nothing: its arrival)."""
    return r.get("last_byte") or r.get("first_byte") or r["arrival"]


def _ra_floor(ra: float) -> float:
    return ra * (1 - RETRY_AFTER_TOLERANCE) - RETRY_AFTER_TOLERANCE_S


def _chains(records: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The records as requests: a failed attempt and the attempts after it
    of the same kind (first request or follow-up) are one request's retries."""
    chains: list[list[dict[str, Any]]] = []
    for r in records:
        c = chains[-1] if chains else None
        if c is not None and _failed(c[-1]) and bool(c[-1].get("followup")) == bool(r.get("followup")):
            c.append(r)
        else:
            chains.append([r])
    return chains


def timeline(entry: dict[str, Any] | None, t_client: float | None = None, outcome: str | None = None) -> dict[str, Any]:
    """The attempts relative to the first one's arrival (the chart's and the
    report's example). Every time is the host's monotonic clock: the mock's
    and the harness's are the same clock on one host."""
    records = [r for r in (entry or {}).get("records") or () if isinstance(r.get("arrival"), (int, float))]
    if not records:
        return {"attempts": [], "client": {"t_s": None, "outcome": outcome}}
    t0 = records[0]["arrival"]
    attempts = []
    for r in records:
        attempts.append({
            "t_s": round(r["arrival"] - t0, 4),
            "end_s": round(_end(r) - t0, 4),
            "fault": r.get("fault"),
            "status": r.get("status"),
            "retry_after_s": r.get("retry_after"),
            "followup": bool(r.get("followup")),
        })
    return {"attempts": attempts, "client": {"t_s": round(t_client - t0, 4) if t_client is not None else None, "outcome": outcome}}


def grade(
    contract: Contract,
    entry: dict[str, Any] | None,
    *,
    outcome: str,
    passed: bool,
    failure: str | None = None,
    t_client: float | None = None,
) -> dict[str, Any]:
    """One turn's grade: ``{"outcomes": [names], "broken": [name (why)],
    "attempts": n, "retries": n}``. ``outcome`` is how the turn ended at the
    client (response, error, timeout, closed, conn_error), ``passed`` its
    verdict, ``failure`` its first failure, ``t_client`` when it ended (the
    host's monotonic clock)."""
    schedule = (entry or {}).get("schedule") or None
    records = [r for r in (entry or {}).get("records") or () if isinstance(r.get("arrival"), (int, float))]
    broken: list[str] = []
    if schedule is None and any(r.get("fault") == "rate_limit" for r in records):
        # the provider-wide limit (--rate-limit): no count is known, so a kernel
        # owes every retry it declares before it may give up
        schedule = {"kind": "rate_limit", "count": None}
    if schedule is None or not records:
        why = "the mock never saw this input" if not records else "the mock has no fault schedule for it"
        return {"outcomes": ["ungraded"], "broken": [], "attempts": len(records), "retries": 0, "note": why}

    kind = schedule.get("kind")
    count = schedule.get("count")
    chains = _chains(records)
    last = chains[-1]
    came_through = not _failed(last[-1])
    # the request the client's answer hangs on: the one that came through, or
    # the one that never did
    n_attempts = len(last) if not came_through else len(chains[0])
    retries = max(len(c) - 1 for c in chains)
    r_max = contract.retries

    if retries > r_max:
        broken.append(f"retry_storm ({retries} retries of one LLM request; the contract allows {r_max})")
    gaps = [(prev, nxt["arrival"] - _end(prev)) for c in chains for prev, nxt in zip(c, c[1:])]
    # a wait a Retry-After asked for is no storm, however short (the rate
    # limit's is the few ms to its next token)
    storm = [g for p, g in gaps if g < STORM_GAP_S and (p.get("retry_after") is None or g < _ra_floor(p["retry_after"]))]
    if storm and contract.backoff != "none" and not broken:
        broken.append(f"retry_storm (a retry {min(storm) * 1000:.1f} ms after its failure; the contract declares backoff={contract.backoff})")
    if contract.retry_after:
        early = [(p.get("retry_after"), g) for p, g in gaps if p.get("retry_after") is not None and g < _ra_floor(p["retry_after"])]
        if early:
            ra, g = early[0]
            broken.append(f"retry_after_ignored (a retry {g:.3f} s after a failure whose Retry-After said {ra:g} s)")
    if contract.backoff != "none":
        own = [[nxt["arrival"] - _end(p) for p, nxt in zip(c, c[1:]) if p.get("retry_after") is None or not contract.retry_after] for c in chains]
        flat = [g for c in own for g in c]
        if any(g < MIN_BACKOFF_S for g in flat):
            broken.append(f"no_backoff (a retry {min(flat) * 1000:.1f} ms after a failure no Retry-After covered; "
                          f"the contract declares backoff={contract.backoff})")
        elif contract.backoff == "exponential" and (c := next((c for c in own if any(b < a * BACKOFF_GROWTH for a, b in zip(c, c[1:]))), None)):
            broken.append(f"no_backoff (waits {', '.join(f'{g:.3f}' for g in c)} s do not grow; the contract declares backoff=exponential)")

    if kind == "stall":
        s = records[0]
        limit = contract.llm_timeout + STALL_SLACK_S
        stalled = (schedule.get("stall_ms") or 0) / 1000
        start = s.get("first_byte") or s["arrival"]
        if not _failed(s) and s.get("status") == 200:
            broken.append(f"stall_unnoticed (waited out a {stalled:g} s silence in the stream; the contract declares llm_timeout={contract.llm_timeout:g} s)")
        else:
            later = [r["arrival"] for r in records[1:]] + ([t_client] if t_client is not None else [])
            noticed = min(later) - start if later else None
            if noticed is not None and noticed > limit:
                broken.append(f"stall_unnoticed (noticed {noticed:.2f} s into a silent stream; llm_timeout={contract.llm_timeout:g} s + {STALL_SLACK_S:g} s slack)")

    # A cut stream need not be retried (no SDK does): only its answer is graded.
    if not came_through and outcome == "error" and kind != "truncate":
        due = min(count if isinstance(count, int) else r_max, r_max) + 1
        if n_attempts < due:
            broken.append(f"gave_up_early (an error to the client after {n_attempts} attempt(s); the contract promises "
                          f"{r_max} retries, and attempt {due} was due" + (" and would have come through)" if isinstance(count, int) and count <= r_max else ")"))

    if kind == "truncate" and outcome == "response":
        broken.append("truncated_accepted (every stream was cut before its terminal event, and the client got a normal answer)")
    elif outcome == "response" and not passed and not came_through:
        broken.append(f"error_hidden (the client got a normal answer without the verdict after the LLM failed {n_attempts} time(s)"
                      + (f": {failure}" if failure else "") + ")")
    elif outcome == "response" and not passed:
        broken.append(f"verdict_failed ({failure or 'the verdict did not hold'})")
    elif outcome not in ("response", "error"):
        broken.append(f"no_answer (the turn ended {outcome}" + (f": {failure}" if failure else "") + ")")
    elif outcome == "error" and came_through:
        broken.append(f"verdict_failed (an error to the client after the LLM came through: {failure or 'error frame'})")

    names = [b.split(" ", 1)[0] for b in broken]
    if not broken:
        names = ["recovered"] if outcome == "response" and passed else ["gave_up"]
    return {"outcomes": list(dict.fromkeys(names)), "broken": broken, "attempts": n_attempts, "retries": retries}


def expected(contract: Contract, kind: str, count: int | None) -> str:
    """What a kernel keeping its contract does with a schedule: recover when
    the faults end within its retries, else give up with a clear error."""
    if kind == "truncate":
        return "gave_up"
    n = 1 if count is None else count
    return "recovered" if n <= contract.retries else "gave_up"


def tally(grades: Iterable[dict[str, Any]]) -> tuple[Counter[str], Counter[str]]:
    """Over turns' grades: how many of each outcome, and of each broken
    grade by name (a broken entry reads "name: what was seen")."""
    outcomes: Counter[str] = Counter()
    broken: Counter[str] = Counter()
    for g in grades:
        outcomes.update(g.get("outcomes") or ())
        broken.update(b.split(" ", 1)[0] for b in g.get("broken") or ())
    return outcomes, broken
