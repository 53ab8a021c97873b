"""`--fleet auto` with no Ray cluster to join: the run ends as the fleet's own
failure (exit 5) with a sentence that names the address form and the fix,
not Ray's traceback; the target the run launched is stopped and the run
directory written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


def test_fleet_auto_without_a_cluster_says_how_to_start_one(cli, tmp_path):
    pytest.importorskip("ray")
    empty = tmp_path / "no-ray"  # where `ray start` would leave its address: nothing is there
    empty.mkdir()
    cli.env.pop("RAY_ADDRESS", None)
    cli.env["RAY_TMPDIR"] = str(empty)
    r = cli.run("stress", "--launch", "--fleet", "auto", "--conns", "4", "--inputs", "2", "--quiet", "--out", str(cli.out))
    assert r.returncode == 5, r.stdout + r.stderr
    err = r.stderr
    assert "the fleet (auto) did not start: Could not find any running Ray instance" in err, err
    assert "ray start --head --node-ip-address 127.0.0.1" in err and "--fleet local:N" in err, err
    assert "Traceback" not in err, err
    [run] = list(Path(cli.out).glob("stress-*"))
    doc = json.loads((run / "run.json").read_text())
    assert doc["exit_code"] == 5 and "did not start" in doc["error"]
