"""Fixtures of the sandbox tests: the three variants every acceptance check runs
in — root with a named netns, root with a user namespace, and an unprivileged
user (nobody) with a user namespace, the last one in a subprocess."""

from __future__ import annotations

from pathlib import Path

import pytest

from sbx_runner import VARIANTS, Runner


@pytest.fixture
def lock_dir(tmp_path) -> Path:
    path = tmp_path / "locks"
    path.mkdir(mode=0o700)
    return path


@pytest.fixture(params=VARIANTS)
def variant(request) -> str:
    return request.param


@pytest.fixture
def runner(variant, tmp_path, lock_dir, request) -> Runner:
    return Runner(variant, tmp_path, lock_dir, request)
