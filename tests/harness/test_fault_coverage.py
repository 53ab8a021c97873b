"""Every fault of the reference kernel is switched on by a test of the
harness or the end-to-end tier, which must catch it by name (issue 22's
acceptance: each fault still caught). A fault added to refkernel without such
a test fails here; the tests themselves assert the failure's name."""

from __future__ import annotations

import re
from pathlib import Path

from refkernel.settings import FAULTS

TESTS = Path(__file__).resolve().parents[1]


def test_every_refkernel_fault_is_exercised_through_kstress():
    text = "\n".join(p.read_text() for d in ("harness", "e2e") for p in (TESTS / d).glob("test_*.py") if p.name != Path(__file__).name)
    quoted = set(re.findall(r"""["']([a-z]+(?:-[a-z]+)+)["']""", text))
    missing = sorted(set(FAULTS) - quoted)
    assert not missing, f"faults no harness or e2e test switches on: {missing}"
    assert len(FAULTS) >= 15, sorted(FAULTS)
