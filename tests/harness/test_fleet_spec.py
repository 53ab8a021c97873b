"""--fleet's forms, checked before anything starts (issue 25): each bad one
is a usage error naming the value and the fix; a cluster off loopback needs
--allow-remote naming its host; without Ray installed --fleet is exit 2
naming the extra to install."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.fleet import FLEET_EXTRA, FleetSpec, parse_fleet

REPO = Path(__file__).resolve().parents[2]


def test_the_forms():
    assert parse_fleet("local:2") == FleetSpec("local", 2)
    assert parse_fleet(" local:64 ").workers == 64
    assert parse_fleet("ray://127.0.0.1:10001") == FleetSpec("cluster", None, "ray://127.0.0.1:10001")
    assert parse_fleet("ray://localhost:10001", workers=4).workers == 4
    assert parse_fleet("ray://[::1]:10001").kind == "cluster"
    assert parse_fleet("auto").address == "auto"
    assert parse_fleet("ray://10.0.0.5:10001", allow_remote=("10.0.0.5",)).address == "ray://10.0.0.5:10001"


@pytest.mark.parametrize("text, workers, says", [
    ("local:0", None, "1 to 64"),
    ("local:65", None, "1 to 64"),
    ("local:two", None, "use local:N"),
    ("local:2", 3, "drop --fleet-workers"),
    ("ray://127.0.0.1", None, "ray://HOST:PORT"),
    ("ray://10.0.0.5:10001", None, "--allow-remote 10.0.0.5"),
    ("ray://example.com:10001", None, "--allow-remote example.com"),
    ("auto", 0, "1 to 4096"),
    ("cluster", None, "use local:N"),
])
def test_bad_forms_name_the_value_and_the_fix(text, workers, says):
    with pytest.raises(UsageError) as e:
        parse_fleet(text, workers)
    assert says in str(e.value) and "--fleet" in str(e.value)


BLOCKED = "import sys; sys.modules['ray'] = None; from harness.__main__ import main; sys.exit(main())"


def test_without_ray_fleet_is_exit_2_naming_the_extra(tmp_path):
    """Ray blocked from import, as good as not installed: nothing starts, no run directory."""
    r = subprocess.run([sys.executable, "-c", BLOCKED, "stress", "--fleet", "local:2", "--launch", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert FLEET_EXTRA in r.stderr and "optional extra" in r.stderr
    assert list(tmp_path.iterdir()) == []
    # the same process without --fleet is not affected
    ok = subprocess.run([sys.executable, "-c", BLOCKED, "stress", "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "--fleet" in ok.stdout


def test_a_host_off_loopback_is_allowed_only_when_named():
    """--allow-remote HOST opens that host, and only it, to --socket, --url
    and --mock (unit level: no test sends a byte off loopback)."""
    from harness.judge.mockjoin import check_mock_address
    from harness.wire.agents import check_agent_url
    from harness.wire.transport import parse_address

    for bad in (lambda a: parse_address("tcp:198.51.100.7:9", allow=a), lambda a: parse_address("ws://198.51.100.7:9/k", allow=a),
                lambda a: check_agent_url("http://198.51.100.7:8000/agui", allow=a)):
        with pytest.raises(UsageError, match=r"--allow-remote 198\.51\.100\.7"):
            bad(())
        with pytest.raises(UsageError, match=r"--allow-remote 198\.51\.100\.7"):
            bad(("198.51.100.8",))  # another host named does not open this one
        assert bad(("198.51.100.7",)).host == "198.51.100.7"
    with pytest.raises(UsageError, match="loopback"):
        check_mock_address("http://198.51.100.7:9")
    assert check_mock_address("http://198.51.100.7:9/", ("198.51.100.7",)) == "http://198.51.100.7:9"
    assert parse_fleet("ray://kernels.example:10001", allow_remote=("kernels.example",)).kind == "cluster"


def test_the_cli_refuses_a_remote_target_before_anything_starts(tmp_path):
    r = subprocess.run([sys.executable, "-m", "harness", "stress", "--socket", "tcp:198.51.100.7:9", "--mock", "http://127.0.0.1:1", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-remote 198.51.100.7" in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-m", "harness", "stress", "--fleet", "ray://198.51.100.7:10001", "--launch", "--out", str(tmp_path)],
                       cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--allow-remote 198.51.100.7" in r.stderr, r.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_worker_that_cannot_reach_a_unix_target_names_the_fix(tmp_path):
    """A fleet worker on another host than the head's sandbox: the unix
    socket is not there; the worker says so before any turn."""
    from harness.sandbox.sut import Target
    from harness.wire.transport import Address

    view = {"label": "", "kernel": "", "address": Address("unix", path=str(tmp_path / "gone.sock")), "token": None, "protocol": None,
            "driver": None, "catalog": None, "tool_ms": 100, "mixed_ms": 100, "contract": None, "mock_address": None, "verdict_key": None}
    with pytest.raises(UsageError, match=r"cannot reach the kernel's socket .*gone\.sock.*--socket tcp:HOST:PORT.*--allow-remote HOST"):
        Target.joined(view)
    (tmp_path / "gone.sock").touch()
    view["mock_address"] = f"unix:{tmp_path / 'mock.sock'}"
    with pytest.raises(UsageError, match=r"cannot reach the mock's socket"):
        Target.joined(view)
    (tmp_path / "mock.sock").touch()
    assert Target.joined(view).mock_address == view["mock_address"]
