"""`make test-repeat`: run a pytest selection N times in a row and fail on any
test that was not green every time, naming it and the runs it failed in.

    python tests/repeat.py --runs 3 -- -n 4 tests/e2e

Each run writes a JUnit XML report; a test counts as green in a run when it
passed there (a skip is not green: the suite skips nothing). Exit 0 when
every test was green in every run, 1 otherwise (2 on bad arguments)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path


def outcomes(report: Path) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from a JUnit XML report."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        out[name] = "failed" if "failure" in kinds else "error" if "error" in kinds else "skipped" if "skipped" in kinds else "passed"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("pytest_args", nargs=argparse.REMAINDER)
    a = ap.parse_args(argv)
    args = a.pytest_args[1:] if a.pytest_args[:1] == ["--"] else a.pytest_args
    if a.runs < 1:
        ap.error(f"--runs {a.runs}: give 1 or more")
    seen: dict[str, list[str]] = {}
    with tempfile.TemporaryDirectory(prefix="kst-repeat-") as tmp:
        for i in range(1, a.runs + 1):
            report = Path(tmp) / f"run{i}.xml"
            t0 = time.monotonic()
            print(f"== run {i} of {a.runs}: pytest {' '.join(args)}", flush=True)
            rc = subprocess.call([sys.executable, "-m", "pytest", *args, f"--junitxml={report}"])
            print(f"== run {i}: exit {rc} in {time.monotonic() - t0:.0f} s", flush=True)
            if not report.exists():
                print(f"repeat: run {i} wrote no report (pytest exit {rc}): the selection did not run", file=sys.stderr)
                return 1
            for name, outcome in outcomes(report).items():
                seen.setdefault(name, ["missing"] * (i - 1)).append(outcome)
            for runs in seen.values():  # a test absent from this run
                runs.extend(["missing"] * (i - len(runs)))
    bad = {name: runs for name, runs in sorted(seen.items()) if any(r != "passed" for r in runs)}
    for name, runs in bad.items():
        print(f"NOT GREEN {name}: " + ", ".join(f"run {i} {r}" for i, r in enumerate(runs, 1) if r != "passed"))
    print(f"repeat: {len(seen) - len(bad)} of {len(seen)} tests green in all {a.runs} runs" + ("" if not bad else f"; {len(bad)} not"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
