"""Several kernels at once: their names and how a run's load is split
between them (docs/targets.md, "Several kernels at once").

Pure functions, no I/O: the CLI names the kernels and checks the weights,
the scenarios split their connections, inputs or sessions with them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from ..errors import UsageError


def unique_names(names: Sequence[str]) -> list[str]:
    """The first of a name keeps it, the later ones get #2, #3, ...:
    `refkernel`, `refkernel#2`."""
    seen: dict[str, int] = {}
    taken = set(names)
    out = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        if seen[n] == 1:
            out.append(n)
            continue
        k = seen[n]
        while f"{n}#{k}" in taken:  # a kernel literally named `x#2` keeps its name
            k += 1
        taken.add(f"{n}#{k}")
        out.append(f"{n}#{k}")
    return out


def check_kernel_names(names: Sequence[str], sources: Sequence[str]) -> None:
    """With several kernels each name names files in the run directory
    (logs-NAME/, resources-NAME.jsonl): it must be one path part, or a name
    like ``x/../../elsewhere`` writes outside the run (issue 22, item 10)."""
    for name, source in zip(names, sources):
        if "/" in name or "\0" in name:
            raise UsageError(
                f"kernel name {name!r} ({source}) cannot name its files in the run directory (logs-NAME/, resources-NAME.jsonl): "
                "a kernel's name is one path part, with no '/'; "
                "give the target file a name = \"...\" without '/'"
            )


def command_name(command: str) -> str:
    """A --bin command line's kernel name: its binary's basename."""
    first = command.split()[0] if command.split() else command
    return Path(first).name or first


def check_weights(weights: Sequence[float], names: Sequence[str]) -> tuple[float, ...]:
    """--weight: one per kernel, in the order the kernels were given, each a
    positive finite number; none given is an even split."""
    if not weights:
        return tuple(1.0 for _ in names)
    if len(weights) != len(names):
        raise UsageError(
            f"--weight was given {len(weights)} time(s) for {len(names)} kernel(s) ({', '.join(names)}): "
            "give one --weight per kernel, in the order of the kernels, or none for an even split"
        )
    for w, n in zip(weights, names):
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not math.isfinite(w) or w <= 0:
            raise UsageError(f"--weight {w!r} (kernel {n}) is invalid: a weight is a positive number, e.g. --weight 3 --weight 1")
    return tuple(float(w) for w in weights)


def split(n: int, weights: Sequence[float]) -> list[int]:
    """``n`` items shared by weight, largest remainder (Hamilton): every
    share is its exact quota rounded down or up, and the shares sum to n;
    ties go to the earlier kernel."""
    total = sum(weights)
    quotas = [n * w / total for w in weights]
    shares = [math.floor(q) for q in quotas]
    left = n - sum(shares)
    by_remainder = sorted(range(len(weights)), key=lambda i: (-(quotas[i] - shares[i]), i))
    for i in by_remainder[:left]:
        shares[i] += 1
    return shares


def schedule(n: int, weights: Sequence[float]) -> list[int]:
    """The kernel of each of ``n`` items in turn: exactly ``split(n,
    weights)`` items each, interleaved as evenly as the shares allow (item i
    goes to the kernel furthest behind its share), so an open-model rate
    reaches every kernel at its share all along the run, not one after another."""
    shares = split(n, weights)
    given = [0] * len(shares)
    out = []
    for i in range(n):
        k = max((k for k in range(len(shares)) if given[k] < shares[k]), key=lambda k: ((i + 1) * shares[k] / n - given[k], -k))
        given[k] += 1
        out.append(k)
    return out


def check_split(what: str, n: int, weights: Sequence[float], names: Sequence[str], flag: str) -> list[int]:
    """split() where every kernel must get at least one: a kernel without
    load would be a row of nothing."""
    shares = split(n, weights)
    empty = [nm for nm, s in zip(names, shares) if s == 0]
    if empty:
        need = next((m for m in range(max(n, len(names)), 100_001) if min(split(m, weights)) > 0), None)
        at_least = f" to at least {need}" if need is not None else ""
        raise UsageError(
            f"{flag} {n}: split by weight over {len(names)} kernels, {', '.join(empty)} would get no {what}; "
            f"raise {flag}{at_least} or the weight of {', '.join(empty)}"
        )
    return shares
