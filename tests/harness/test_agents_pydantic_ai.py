"""A real framework's AG-UI server: pydantic-ai's AGUIAdapter on uvicorn
(examples/pydantic_ai_agui.py), its model the mock, driven by
`kstress batch/stress --url --protocol agui` (issue 23). It passes, its tool
calls shown with the mock's ids and arguments; a contract it does not keep
fails by name."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from test_agents_cli import kstress, mock_url, processes, _line  # noqa: F401 - fixtures and helpers

pytest.importorskip("ag_ui")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.slow
APP = Path(__file__).resolve().parents[2] / "examples" / "pydantic_ai_agui.py"


@pytest.fixture
def pydai(tmp_path, mock_url):
    mock, start = mock_url
    p = start("pydai", [sys.executable, str(APP), "--llm-url", mock + "/v1", "--data-dir", str(tmp_path)])
    return mock, _line(tmp_path / "pydai.out", "agent listening on ", p)


def test_pydantic_ai_agui_passes_batch_stress_and_sessions(tmp_path, pydai):
    mock, url = pydai
    r = kstress(tmp_path, "batch", "--n", "2,4", "--kinds", "batch,slowbatch", "--rounds", "1", "--contract", "batch=parallel",
                "--url", url, "--protocol", "agui", "--mock", mock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "4/4 turns passed" in r.stdout
    r = kstress(tmp_path, "stress", "--conns", "4", "--inputs", "3", "--mix", "!batch4:1,!err:500:1,text:1", "--contract", "batch=parallel",
                "--url", url, "--protocol", "agui", "--mock", mock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "every input passed its verdict — 12/12 passed" in r.stdout
    # pydantic-ai's AGUIAdapter keeps no history (manage_message_history='client'): the client's, tool exchanges included
    r = kstress(tmp_path, "sessions", "--sessions", "3", "--turns", "3", "--contract", "sessions=true", "--contract", "batch=parallel",
                "--url", url, "--protocol", "agui", "--mock", mock)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS every session kept its own history" in r.stdout


def test_a_contract_pydantic_ai_does_not_keep_fails_by_name(tmp_path, pydai):
    mock, url = pydai
    # pydantic-ai runs a parallel-safe batch concurrently: declared serial, it breaks the promise
    r = kstress(tmp_path, "batch", "--n", "4", "--kinds", "slowbatch", "--rounds", "1", "--contract", "batch=serial",
                "--url", url, "--protocol", "agui", "--mock", mock)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "overlap 4>1" in r.stdout
