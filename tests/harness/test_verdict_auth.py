"""A verdict line must be authenticated (issue 22 item 1): by the mock's own
record of the input, or by its keyed tag. The judge's rules one by one, on
hand-made turns; tests/e2e/test_forged_verdict.py runs a forging kernel."""

from __future__ import annotations

import pytest

from harness.judge.verdict import judge
from harness.wire.client import Turn
from mock import DEFAULT_CATALOG
from mock.markers import build_plan, compose, parse_text_line, parse_verdict, sign, tag_ok, text_verdict, verdict_key
from mock.verdict import check, verdict_text

KEY = verdict_key("5eed" * 8)
OTHER = verdict_key("beef" * 8)


def _turn(text: str, reply: str) -> Turn:
    nonce = text.rsplit("#", 1)[1]
    t = Turn(input_id=nonce, text=text, nonce=nonce, outcome="response")
    t.t_sent, t.t_first, t.t_done = 1.0, 1.1, 1.5
    t.response_text = reply
    return t


def _batch_reply(text: str, key: bytes | None) -> tuple[str, str]:
    """The mock's real follow-up answer to a correct history, and its line's body."""
    plan = build_plan(text)
    calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in plan.calls]
    results = [{"role": "tool", "tool_call_id": c.id, "content": " ".join(c.expect) + " done"} for c in plan.calls]
    line, echoes = check(plan, [{"role": "user", "content": text}, {"role": "assistant", "content": None, "tool_calls": calls}, *results], 0, DEFAULT_CATALOG, 3)
    return verdict_text(line, echoes, key), line.format()


def _entry(text: str, body: str | None) -> dict:
    """The mock's record of the input, as /_mock/verdicts gives it."""
    plan = build_plan(text)
    if not plan.calls:
        return {"nonce": plan.nonce, "requests": 1, "text_verdict": body, "verdict": None}
    return {"nonce": plan.nonce, "requests": 2 if body else 1, "verdict": {"line": body} if body else None}


def test_a_tag_verifies_only_under_its_key_and_only_for_its_line():
    body = text_verdict("n1")
    line = parse_text_line("hello\n" + sign(body, KEY))
    assert line is not None and line.format() == body and tag_ok(body, line.tag, KEY)
    assert not tag_ok(body, line.tag, OTHER)
    assert not tag_ok(text_verdict("n2"), line.tag, KEY), "a tag is bound to its nonce: it cannot be moved to another turn"
    assert sign(body, None) == body, "a mock without a key writes the line of before"
    tool, _ = _batch_reply(compose("!batch2", "b1"), KEY)
    v = parse_verdict(tool)
    assert v is not None and v.tag is not None and tag_ok(v.format(), v.tag, KEY)


@pytest.mark.parametrize("marker", [None, "!batch2"], ids=["text", "batch"])
def test_a_line_the_mock_never_wrote_is_forged(marker):
    text = compose(marker, "f1")
    real, body = (("x\n" + text_verdict("f1")), text_verdict("f1")) if marker is None else _batch_reply(text, None)
    plan = build_plan(text)
    # the mock never saw the input (it answered null and has dropped nothing)
    v = judge(_turn(text, real), plan, mock={"nonce": "f1", "absent": True}, joined=True)
    assert v.failure.startswith("forged_verdict") and "never saw this input" in v.failure, v.failures
    # the mock saw it and wrote no verdict: the tools never came back
    if marker is not None:
        v = judge(_turn(text, real), plan, mock=_entry(text, None), joined=True)
        assert v.failure.startswith("forged_verdict") and "wrote no verdict" in v.failure, v.failures
    # the control: the mock's record holds the line
    v = judge(_turn(text, real), plan, mock=_entry(text, body), joined=True)
    assert v.passed, v.failures


@pytest.mark.parametrize("marker", [None, "!batch2"], ids=["text", "batch"])
def test_without_the_mocks_record_the_tag_decides(marker):
    text = compose(marker, "g1")
    plan = build_plan(text)
    signed = ("x\n" + sign(text_verdict("g1"), KEY)) if marker is None else _batch_reply(text, KEY)[0]
    unsigned = ("x\n" + text_verdict("g1")) if marker is None else _batch_reply(text, None)[0]
    # the mock could not say (it dropped entries, or was not reachable): None
    assert judge(_turn(text, signed), plan, mock=None, joined=True, key=KEY).passed
    v = judge(_turn(text, unsigned), plan, mock=None, joined=True, key=KEY)
    assert v.failure.startswith("forged_verdict") and "no tag" in v.failure, v.failures
    v = judge(_turn(text, signed), plan, mock=None, joined=True, key=OTHER)
    assert v.failure.startswith("forged_verdict") and "does not verify" in v.failure, v.failures
    # nothing to check by: never a pass
    v = judge(_turn(text, unsigned), plan, mock=None, joined=False, key=None)
    assert v.failure.startswith("forged_verdict") and "cannot be authenticated" in v.failure, v.failures


def test_a_terse_kernel_is_judged_by_the_record_and_a_reply_without_a_line_is_not_forged():
    text = compose("!batch2", "h1")
    _, body = _batch_reply(text, None)
    plan = build_plan(text)
    assert judge(_turn(text, "done"), plan, mock=_entry(text, body), joined=True, key=KEY).passed
    v = judge(_turn(text, "done"), plan, mock={"nonce": "h1", "absent": True}, joined=True, key=KEY)
    assert v.failure.startswith("missing_verdict"), v.failures


# --- with real processes: the tag path (a bare socket, no --mock) -------------------------

SAFE = "00112233445566778899aabbccddeeff"


@pytest.mark.slow
@pytest.mark.parametrize(
    "flags, listen",
    [((), None), (("--llm-api", "anthropic"), "tcp:127.0.0.1:0"), (("--llm-api", "responses"), "ws:127.0.0.1:0")],
    ids=["chat-unix", "anthropic-tcp", "responses-ws"],
)
async def test_a_bare_socket_with_the_key_authenticates_by_the_tag(kernel_factory, out_dir, monkeypatch, flags, listen):
    """The mock and kstress share KSTRESS_VERDICT_KEY and kstress is not told
    where the mock is: every line the reference kernel passes on verifies by
    its tag, on each dialect and wire; under another key none does."""
    from harness.results.rundir import read_jsonl
    from harness.scenarios import StressSettings, run_stress

    monkeypatch.setenv("KSTRESS_VERDICT_KEY", SAFE)  # the mock started below inherits it
    settings = dict(conns=2, inputs=3, mix="text:1,!batch4:1,!slowbatch2:1,!mixed3:1", dedup_probe=False, quiet=True)
    async with kernel_factory(*flags, tool_ms=100, listen=listen) as k:
        r = await run_stress(StressSettings(out=out_dir / "same", **settings), k.access(mock=False))
        assert r.exit_code == 0, r.report
        rows = [x for x in read_jsonl(r.dir / "turns.jsonl") if x.get("kind") == "load"]
        assert rows and {x["verdict_source"] for x in rows} == {"reply"}
        monkeypatch.setenv("KSTRESS_VERDICT_KEY", "ff" * 16)  # kstress's key only: the mock keeps its own
        r = await run_stress(StressSettings(out=out_dir / "other", **settings), k.access(mock=False))
    assert r.exit_code == 1
    assert set(r.summary["failures"]) == {"forged_verdict"}, r.summary["failures"]
