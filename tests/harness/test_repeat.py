"""`make test-repeat` (tests/repeat.py): a test green in every run passes, a
test that fails in any one run is named with the run, and the exit is 1."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import repeat  # noqa: E402

FLAKY = '''
from pathlib import Path

COUNT = Path(__file__).with_name("count")


def test_steady():
    assert True


def test_flaky_on_the_second_run():
    n = int(COUNT.read_text()) + 1 if COUNT.exists() else 1
    COUNT.write_text(str(n))
    assert n != 2
'''


def test_a_test_red_in_one_run_is_named_and_fails_the_repeat(tmp_path, capsys):
    (tmp_path / "test_sample.py").write_text(FLAKY)
    rc = repeat.main(["--runs", "3", "--", "-q", "-p", "no:cacheprovider", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 1
    # the JUnit class name is the module's path from pytest's rootdir (which differs under xdist)
    flagged = [line for line in out.splitlines() if line.startswith("NOT GREEN ")]
    assert len(flagged) == 1 and flagged[0].endswith("test_sample::test_flaky_on_the_second_run: run 2 failed"), flagged
    assert "1 of 2 tests green in all 3 runs; 1 not" in out


def test_all_green_three_times_exits_0(tmp_path, capsys):
    (tmp_path / "test_sample.py").write_text("def test_ok():\n    assert True\n")
    assert repeat.main(["--runs", "3", "--", "-q", "-p", "no:cacheprovider", str(tmp_path)]) == 0
    assert "1 of 1 tests green in all 3 runs" in capsys.readouterr().out
