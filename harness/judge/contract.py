"""A kernel's contract: the rules it declares, which kstress verifies it
against (docs/targets.md, "The kernel contract"). Real kernels have other,
legitimate rules than the reference kernel's; no check hard-codes one kernel's
rule as a law.

    batch       how a batch holding a not-parallel-safe call is scheduled:
                whole-batch  one unsafe call makes the whole batch serial (the reference kernel)
                barrier      the unsafe call runs alone: calls before it complete first,
                             calls after it start afterwards, the rest run concurrently
                parallel     no such notion: every call of a batch runs concurrently
                serial       one call at a time, always
    order       results appended in `declared` order, or in `any` order
    dedup       the kernel has a replay guard (the dedup probe runs)
    interrupts  it takes interrupt-priority inputs
    stats       it answers a stats frame (kernel counters, the sampler's queue)
    sessions    it keeps a history per `session` of the input frames (protocol v1):
                the sessions scenario checks isolation only when true, and
                under false ends incomplete (exit 6), never PASS
    retries     how many times a failed LLM request is retried after its first
                attempt (the openai SDK's max_retries; default 2, the SDKs')
    retry_after it waits what Retry-After / retry-after-ms said before the next
                attempt (default true, as the openai and anthropic SDKs do)
    backoff     none|constant|exponential: its wait before a retry no header set
    llm_timeout seconds it waits on a silent LLM stream before it errors or
                retries (default 600, the SDKs'); `kstress resilience` stalls
                a stream past it (docs/resilience.md)

Declared in a target file's `[contract]` table and by `--contract KEY=VALUE`
(repeatable, later wins); recorded in state.json and run.json.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Iterable, Mapping

from ..errors import UsageError

BATCH_RULES = ("whole-batch", "barrier", "parallel", "serial")
ORDERS = ("declared", "any")
BACKOFFS = ("none", "constant", "exponential")
RETRIES_MAX = 63  # kstress resilience fails attempt retries+1 too: the mock schedules at most 64
LLM_TIMEOUT_MAX_S = 3600.0
BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


@dataclass(frozen=True)
class Contract:
    batch: str = "whole-batch"
    order: str = "declared"
    dedup: bool = True
    interrupts: bool = True
    stats: bool = True
    sessions: bool = True
    # issue 24: how it survives a misbehaving LLM (judge/resilience.py grades it)
    retries: int = 2
    retry_after: bool = True
    backoff: str = "exponential"
    llm_timeout: float = 600.0

    def __post_init__(self) -> None:
        if self.batch not in BATCH_RULES:
            raise UsageError(f"contract batch={self.batch!r} is unknown: use one of {', '.join(BATCH_RULES)} (docs/targets.md)")
        if self.order not in ORDERS:
            raise UsageError(f"contract order={self.order!r} is unknown: use one of {', '.join(ORDERS)}")
        for f in BOOL_KEYS:
            if not isinstance(getattr(self, f), bool):
                raise UsageError(f"contract {f}={getattr(self, f)!r} must be true or false")
        if self.backoff not in BACKOFFS:
            raise UsageError(f"contract backoff={self.backoff!r} is unknown: use one of {', '.join(BACKOFFS)} (docs/resilience.md)")
        if isinstance(self.retries, bool) or not isinstance(self.retries, int) or not 0 <= self.retries <= RETRIES_MAX:
            raise UsageError(f"contract retries={self.retries!r} is invalid: give a whole number of retries after the first attempt, "
                             f"0 to {RETRIES_MAX} (the openai SDK's default is 2), e.g. --contract retries=2")
        if isinstance(self.llm_timeout, bool) or not isinstance(self.llm_timeout, (int, float)) or not 0 < self.llm_timeout <= LLM_TIMEOUT_MAX_S:
            raise UsageError(f"contract llm_timeout={self.llm_timeout!r} is invalid: give the seconds the kernel waits on a silent LLM stream, "
                             f"above 0 and at most {LLM_TIMEOUT_MAX_S:.0f}, e.g. --contract llm_timeout=5")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in asdict(self).items())

    # --- what the contract says of one batch --------------------------------------------

    def runs_serially(self, calls_safe: tuple[bool, ...]) -> bool:
        """The whole batch one call at a time."""
        if self.batch == "serial":
            return True
        if self.batch == "whole-batch":
            return len(calls_safe) == 1 or not all(calls_safe)
        return False

    @property
    def serial_control(self) -> bool:
        """`!serialbatchN` (N sleeps + one unsafe call) runs serially: the
        kernel's own serial control for the concurrency A/B is valid."""
        return self.batch in ("whole-batch", "serial")


BOOL_KEYS = ("dedup", "interrupts", "stats", "sessions", "retry_after")
# the reference kernel has them all; another binary declares what it has. Its
# default is no LLM retries at all (--llm-retries 0) and a 60 s --llm-timeout
REFKERNEL = Contract(retries=0, retry_after=False, backoff="none", llm_timeout=60.0)
OTHER = Contract(dedup=False, interrupts=False, stats=False, sessions=False)
KEYS = tuple(f.name for f in fields(Contract))

# Each key's values and what it decides, for --contract's help (docs/targets.md
# has the long form); a key missing here fails at import, so none goes undocumented.
KEY_HELP = {
    "batch": "whole-batch|barrier|parallel|serial: how a batch holding a not-parallel-safe call is scheduled",
    "order": "declared|any: the order tool results go back in",
    "dedup": "true|false: a replay guard (stress's dedup probe runs)",
    "interrupts": "true|false: interrupt-priority inputs (stress --interrupts)",
    "stats": "true|false: it answers a stats frame (kernel counters, queue)",
    "sessions": "true|false: a history per `session` (the sessions scenario checks isolation only when true; false ends it incomplete, exit 6)",
    "retries": "N: retries of a failed LLM request after its first attempt (kstress resilience)",
    "retry_after": "true|false: it waits what Retry-After said before retrying",
    "backoff": "none|constant|exponential: its wait before a retry no Retry-After set",
    "llm_timeout": "SECONDS: how long it waits on a silent LLM stream before it errors or retries",
}
assert tuple(KEY_HELP) == KEYS, "every contract key needs its help"
CONTRACT_HELP = (
    "The kernel's contract (repeatable; over the target file's [contract]): "
    + "; ".join(f"{k}={v}" for k, v in KEY_HELP.items())
    + ". Defaults: the reference kernel's all true, whole-batch, declared, and no LLM retries (retries=0 retry_after=false backoff=none llm_timeout=60); any other kernel's dedup, interrupts, stats and sessions false and the SDKs' retries=2 retry_after=true backoff=exponential llm_timeout=600 (docs/targets.md)."
)


def _value(key: str, raw: Any, where: str) -> Any:
    if key in BOOL_KEYS:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.lower() in BOOLS:
            return BOOLS[raw.lower()]
        raise UsageError(f"{where}: contract {key}={raw!r} must be true or false")
    if key in ("retries", "llm_timeout"):
        num = raw
        if isinstance(raw, str):
            try:
                num = int(raw) if key == "retries" else float(raw.removesuffix("s"))
            except ValueError:
                num = None
        if isinstance(num, bool) or not isinstance(num, (int, float)) or (key == "retries" and not isinstance(num, int)):
            rule = "a whole number of retries, e.g. retries=2" if key == "retries" else "seconds, e.g. llm_timeout=5"
            raise UsageError(f"{where}: contract {key}={raw!r} must be {rule}")
        return num
    if not isinstance(raw, str):
        raise UsageError(f"{where}: contract {key}={raw!r} must be a string")
    return raw


def merged(base: Contract, table: Mapping[str, Any] | None = None, pairs: Iterable[str] = (), where: str = "--contract") -> Contract:
    """``base`` with a target file's [contract] table, then KEY=VALUE pairs."""
    updates: dict[str, Any] = {}
    for k, v in (table or {}).items():
        if k not in KEYS:
            raise UsageError(f"{where}: unknown contract key {k!r}; keys: {', '.join(KEYS)}")
        updates[k] = _value(k, v, where)
    for pair in pairs:
        k, sep, v = pair.partition("=")
        k = k.strip()
        if not sep or not k:
            raise UsageError(f"--contract {pair!r}: expected KEY=VALUE, e.g. --contract batch=barrier; keys: {', '.join(KEYS)}")
        if k not in KEYS:
            raise UsageError(f"--contract {pair!r}: unknown key {k!r}; keys: {', '.join(KEYS)}")
        updates[k] = _value(k, v.strip(), f"--contract {pair!r}")
    return replace(base, **updates)


def from_json(data: Any) -> Contract | None:
    if not isinstance(data, dict):
        return None
    try:
        return merged(Contract(), {k: v for k, v in data.items() if k in KEYS}, where="state contract")
    except UsageError:
        return None
