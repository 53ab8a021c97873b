"""The mock tags every verdict line it writes when it has a verdict key
(issue 22 item 1): on every dialect, streamed or not, on the templated
fast path and the general one; without a key, the line of before."""

from __future__ import annotations

import re

import pytest

from mock.markers import build_plan, compose, tag_ok, text_verdict, verdict_key
from mockhelpers import PATHS, first_body, followup_body

KEY = verdict_key("0123456789abcdef" * 2)
TAG = re.compile(r"(KST nonce=\S+ plan=\S+ [^\\\"]*?) tag=([0-9a-f]{16})")


def _tags(raw: bytes) -> list[tuple[str, str]]:
    return TAG.findall(raw.decode())


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "nonstream"])
@pytest.mark.parametrize("dialect", list(PATHS))
@pytest.mark.parametrize("nonce", ["tg1", "t" * 50], ids=["templated", "long"])
def test_every_verdict_line_is_tagged_under_the_key(start_mock, dialect, stream, nonce):
    m = start_mock(verdict_key=KEY, text_chunks=1)  # one piece: the line is whole in the body
    text = compose(None, nonce)
    r = m.request("POST", PATHS[dialect], first_body(dialect, text, stream))
    assert r.status == 200, r.body
    assert _tags(r.body) and all(body == text_verdict(nonce) and tag_ok(body, tag, KEY) for body, tag in _tags(r.body)), r.body[-600:]
    text = compose("!batch2", nonce + "b")
    plan = build_plan(text)
    assert m.request("POST", PATHS[dialect], first_body(dialect, text, stream)).status == 200
    r = m.request("POST", PATHS[dialect], followup_body(dialect, plan, text, stream))
    tags = _tags(r.body)
    assert tags and all(body.startswith(f"KST nonce={plan.nonce} plan=batch ") and tag_ok(body, tag, KEY) for body, tag in tags), r.body[-600:]


@pytest.mark.parametrize("dialect", list(PATHS))
def test_without_a_key_no_line_is_tagged(start_mock, dialect):
    m = start_mock(text_chunks=1)
    r = m.request("POST", PATHS[dialect], first_body(dialect, compose(None, "nk1"), True))
    assert r.status == 200 and b"KST nonce=nk1 plan=text ok" in r.body and b" tag=" not in r.body
