"""Test modules are imported by basename (rootdir conftest, no packages): two
files of one name in different folders make the whole run a collection error,
which running either file alone never shows."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    names = Counter(p.name for p in TESTS.rglob("*.py") if "__pycache__" not in p.parts)
    assert not [n for n, k in names.items() if k > 1 and n != "__init__.py" and n != "conftest.py"], sorted(n for n, k in names.items() if k > 1)
