"""The marker grammar and the Plan: what the mock replies and what the harness expects."""

from __future__ import annotations

import json

import pytest

from mock import MarkerError
from mock.catalog import DEFAULT_CATALOG
from mock.markers import (
    DEFAULT_QUIRK_N,
    ERR_KINDS,
    CHAT_QUIRKS,
    DIALECTS,
    MARKERS,
    QUIRK_DIALECTS,
    QUIRKS,
    VerdictLine,
    build_plan,
    compose,
    find_nonce,
    nonce_for,
    parse_marker,
    parse_text_verdict,
    parse_timestamps,
    parse_verdict,
    peak_overlap,
    parse_call_id,
    quirks_for,
    slow_durations,
    wire_id,
    item_id,
)

# --- nonces -------------------------------------------------------------------------


def test_nonce_is_the_last_hash_token() -> None:
    assert find_nonce("a #first b #second") == "second"
    assert find_nonce("x #A-z_09") == "A-z_09"


@pytest.mark.parametrize("text", ["no nonce", "x#glued", "#bad!chars", "# spaced", "a #"])
def test_not_a_nonce(text: str) -> None:
    assert find_nonce(text) is None


def test_nonce_for_falls_back_to_a_stable_hash() -> None:
    a = nonce_for("same text")
    assert a == nonce_for("same text") != nonce_for("other text")
    assert a.startswith("h") and len(a) == 13


def test_compose_round_trips_and_rejects_bad_nonces() -> None:
    text = compose("!batch4", "n-1_a")
    assert text == "kstress !batch4 #n-1_a"
    assert find_nonce(text) == "n-1_a" and parse_marker(text).token == "!batch4"
    assert compose(None, "t1", prefix="hi") == "hi #t1"
    for bad in ("", "a b", "semi;colon", "$(x)"):
        with pytest.raises(ValueError, match=r"must match \[A-Za-z0-9_-\]\+"):
            compose("!batch1", bad)


# --- the grammar ---------------------------------------------------------------------


def test_no_marker() -> None:
    assert parse_marker("just text #n") is None
    assert parse_marker("an!batch4 glued to a word") is None
    assert build_plan("hello #n1").kind == "text" and build_plan("hello #n1").calls == ()


@pytest.mark.parametrize(
    ("text", "name", "count", "args"),
    [
        ("!batch1", "batch", 1, ()),
        ("go !batch64 now", "batch", 64, ()),
        ("!slowbatch4:150", "slowbatch", 4, ("150",)),
        ("!serialbatch2", "serialbatch", 2, ()),
        ("!mixed3:10", "mixed", 3, ("10",)),
        ("!err", "err", None, ()),
        ("!err:midstream", "err", None, ("midstream",)),
        ("!hang:20", "hang", None, ("20",)),
        ("!quirk:noindex:5", "quirk", None, ("noindex", "5")),
        ("!img", "img", None, ()),
    ],
)
def test_markers_parse(text: str, name: str, count, args) -> None:
    m = parse_marker(text + " #n")
    assert (m.name, m.count, m.args) == (name, count, args)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("!bogus", "unknown marker '!bogus'"),
        ("!batch", "needs a count"),
        ("!batch0", "count 0 is out of range; N must be from 1 to 64"),
        ("!batch65", "count 65 is out of range"),
        ("!img2", "takes no count"),
        ("!batch2:5", "!batch2 takes no ':' arguments; write !batch2"),
        ("!slowbatch2:5:6:7", "takes at most 2"),
        ("!slowbatch2:5:6", "step '6' must be whole milliseconds from 0 to MS (5)"),
        ("!slowbatch2:", "empty ':' argument"),
        ("!batch2 !batch3", "holds 2 markers (!batch2, !batch3)"),
        ("!slowbatch2:0", "duration '0' must be whole milliseconds from 1 to 600000"),
        ("!slowbatch2:600001", "duration '600001'"),
        ("!hang:soon", "duration 'soon'"),
        ("!mixed1", "a mixed batch needs N >= 2"),
        ("!err:418", "unknown fault '418'"),
        ("!quirk", "needs a quirk name"),
        ("!quirk:sideways", "unknown quirk 'sideways'"),
        ("!quirk:noindex:0", "count '0' must be from 1 to 64"),
        ("!quirk:noindex:x", "count 'x'"),
    ],
)
def test_bad_markers_name_the_problem(text: str, words: str) -> None:
    with pytest.raises(MarkerError) as info:
        build_plan(text + " #n")
    assert words in str(info.value)


def test_marker_table_covers_the_design() -> None:
    plan_markers = {"batch", "mixed", "slowbatch", "serialbatch", "img", "ocr", "resident", "notify", "err", "hang", "quirk", "loop"}
    # issue 24: the fault schedules, which may ride beside one plan marker
    assert set(MARKERS) == plan_markers | {"flaky", "stall", "truncate"}
    assert ERR_KINDS == ("500", "429", "503", "midstream", "disconnect", "malformed")
    assert len(CHAT_QUIRKS) == 17
    assert len(QUIRKS) == len(set(QUIRKS))
    assert QUIRKS[: len(CHAT_QUIRKS)] == CHAT_QUIRKS, "chat's quirks keep their names and order"


def test_every_quirk_applies_to_a_known_dialect() -> None:
    assert set(QUIRK_DIALECTS) == set(QUIRKS)
    assert all(ds and ds <= set(DIALECTS) for ds in QUIRK_DIALECTS.values())
    assert quirks_for("chat") == CHAT_QUIRKS
    assert "index1_first" in quirks_for("anthropic") and "index1_first" in quirks_for("responses")
    assert "delta_before_start" in quirks_for("anthropic") and "delta_before_start" not in quirks_for("chat")
    with pytest.raises(ValueError, match="unknown dialect"):
        quirks_for("gemini")


@pytest.mark.parametrize("nonce", ["n1", "run7-0042", "a_b_c", "Z9_-"])
def test_wire_ids_keep_the_nonce_and_index(nonce: str) -> None:
    call = build_plan(f"!batch3 #{nonce}").calls[2]
    ids = {d: wire_id(call.id, d) for d in DIALECTS}
    assert ids == {"chat": f"call_{nonce}_2", "anthropic": f"toolu_{nonce}_2", "responses": f"call_{nonce}_2"}
    assert item_id(call.id) == f"fc_{nonce}_2"
    for wire in [*ids.values(), item_id(call.id)]:
        assert parse_call_id(wire) == (nonce, 2)
    assert parse_call_id("call_forged") is None and parse_call_id(None) is None


# --- plans -----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 4, 64])
def test_batch_plan(n: int) -> None:
    plan = build_plan(f"!batch{n} #bn")
    assert plan.kind == "batch" and plan.marker == f"!batch{n}" and plan.nonce == "bn"
    assert [c.index for c in plan.calls] == list(range(n))
    assert [c.id for c in plan.calls] == [f"call_bn_{i}" for i in range(n)]
    assert {c.name for c in plan.calls} == {"lookup"} and all(c.parallel_safe for c in plan.calls)
    for c in plan.calls:
        assert json.loads(c.arguments)["key"] == f"bn/{c.index}" and "bn" in c.arguments
        assert c.sleep_ms is None and c.expect == (f"bn/{c.index}",)
    assert plan.serial_required == (n == 1)
    assert plan.serial_ms == 0 and plan.ideal_speedup == 1.0


def test_slow_durations_decrease_with_the_index() -> None:
    assert slow_durations(4, 200) == [275, 250, 225, 200]  # default step: MS/8, at least 25 ms
    assert slow_durations(3, 50) == [100, 75, 50]
    assert slow_durations(2, 4) == [8, 4]  # ... but never more than MS
    assert slow_durations(1, 999) == [999]
    assert slow_durations(2, 1000) == [1125, 1000]
    assert slow_durations(3, 200, 0) == [200, 200, 200]  # STEP 0: equal sleeps, ideal speedup N


def test_slowbatch_plan() -> None:
    plan = build_plan("!slowbatch4:100 #sb")
    assert [c.sleep_ms for c in plan.calls] == [175, 150, 125, 100]
    assert {c.name for c in plan.calls} == {"cmd_run"}
    cmd = json.loads(plan.calls[1].arguments)["command"]
    assert cmd == "printf 'KST-S sb 1 %s\\n' \"$(date +%s%N)\"; sleep 0.150; printf 'KST-E sb 1 %s\\n' \"$(date +%s%N)\""
    assert not plan.serial_required
    assert plan.concurrent_ms == 175 and plan.serial_ms == 550
    assert plan.ideal_speedup == pytest.approx(550 / 175)
    # an explicit STEP; 0 gives equal sleeps and an ideal speedup of exactly N
    assert [c.sleep_ms for c in build_plan("!slowbatch3:100:2 #s").calls] == [104, 102, 100]
    assert build_plan("!slowbatch4:100:0 #s").ideal_speedup == 4.0
    assert plan.timed_calls == plan.calls
    # default base sleep, and the tool_ms argument of build_plan
    assert build_plan("!slowbatch2 #d").calls[1].sleep_ms == 200
    assert build_plan("!slowbatch2 #d", tool_ms=40).calls[1].sleep_ms == 40


def test_serialbatch_plan_is_slowbatch_plus_one_writer() -> None:
    slow = build_plan("!slowbatch3:50 #s")
    plan = build_plan("!serialbatch3:50 #s")
    assert plan.calls[:3] == slow.calls
    writer = plan.calls[3]
    assert (writer.index, writer.name, writer.parallel_safe, writer.sleep_ms) == (3, "knowledge_create", False, None)
    assert json.loads(writer.arguments)["title"] == "kst-s-3"
    assert plan.serial_required and plan.serial_ms == slow.serial_ms


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_mixed_plan(n: int) -> None:
    plan = build_plan(f"!mixed{n} #mx")
    writers = [c.index for c in plan.calls if c.name == "knowledge_create"]
    assert writers == [n // 2]
    sleeps = [c for c in plan.calls if c.name == "cmd_run"]
    assert len(sleeps) == n - 1 and {c.sleep_ms for c in sleeps} == {50}
    assert plan.serial_required
    assert {c.sleep_ms for c in build_plan(f"!mixed{n}:7 #mx").calls if c.sleep_ms} == {7}
    assert {c.sleep_ms for c in build_plan(f"!mixed{n} #mx", mixed_ms=9).calls if c.sleep_ms} == {9}


@pytest.mark.parametrize(
    ("marker", "name", "expect_error"),
    [("img", "img_describe", True), ("ocr", "ocr", True), ("resident", "resident_start", False), ("notify", "notify", False)],
)
def test_single_call_plans(marker: str, name: str, expect_error: bool) -> None:
    plan = build_plan(f"!{marker} #one")
    (call,) = plan.calls
    assert (plan.kind, call.name, call.id, call.expect_error) == (marker, name, "call_one_0", expect_error)
    assert plan.expected_errors == int(expect_error)
    assert "one" in call.arguments


def test_err_plans() -> None:
    assert build_plan("!err #e").err == "500"
    for kind in ERR_KINDS:
        plan = build_plan(f"!err:{kind} #e")
        assert plan.kind == "err" and plan.err == kind and plan.expects_error_frame
        assert len(plan.calls) == (1 if kind in ("midstream", "disconnect") else 0)


def test_hang_plans() -> None:
    assert build_plan("!hang #h").hang_ms is None
    assert build_plan("!hang:250 #h").hang_ms == 250


def test_quirk_plans() -> None:
    plan = build_plan("!quirk:noindex #q")
    assert (plan.kind, plan.quirk, len(plan.calls)) == ("quirk", "noindex", DEFAULT_QUIRK_N)
    assert len(build_plan("!quirk:onechunk:9 #q").calls) == 9
    assert {c.name for c in plan.calls} == {"lookup"}


def test_plans_are_deterministic() -> None:
    for marker in ("!batch8", "!mixed5", "!slowbatch3:70", "!serialbatch2", "!quirk:cont_first:4"):
        assert build_plan(f"x {marker} #d") == build_plan(f"x {marker} #d")


# --- the verdict line --------------------------------------------------------------------


def test_verdict_line_round_trip() -> None:
    line = VerdictLine("n1", "slowbatch", 4, 3, True, False, True, 2, 212)
    text = line.format()
    assert text == "KST nonce=n1 plan=slowbatch expected=4 got=3 ids=ok args=bad order=ok errors=2 tool_ms=212"
    assert parse_verdict("prefix\n" + text + "\n--- call_x\nout") == line
    assert not line.all_ok
    na = VerdictLine("n2", "batch", 2, 2, True, True, True, 0, None)
    assert na.format().endswith("tool_ms=na") and parse_verdict(na.format()) == na and na.all_ok


def test_all_ok_ignores_errors_but_not_counts() -> None:
    # errors are reported separately: a kernel may legitimately return tool errors (img/ocr)
    assert VerdictLine("n", "img", 1, 1, True, True, True, 1, 5).all_ok
    assert not VerdictLine("n", "batch", 2, 1, True, True, True, 0, 5).all_ok


def test_parse_verdict_rejects_lookalikes() -> None:
    assert parse_verdict("KST nonce=n plan=batch expected=1 got=1 ids=ok args=ok order=ok errors=0") is None
    assert parse_verdict("say KST nonce=n plan=batch expected=1 got=1 ids=ok args=ok order=ok errors=0 tool_ms=1") is None
    assert parse_text_verdict("text\nKST nonce=abc plan=text ok\n") == "abc"
    assert parse_text_verdict("KST nonce=abc plan=text bad") is None


def test_parse_timestamps_keeps_only_this_nonce() -> None:
    out = "KST-S n 0 100\nnoise\nKST-S other 0 5\nKST-E n 0 300\nKST-S n 1 150  \nKST-E n 1 250\nKST-E n 2 9\n"
    assert parse_timestamps(out, "n") == {0: (100, 300), 1: (150, 250), 2: (None, 9)}
    assert parse_timestamps(out, "absent") == {}


def test_peak_overlap() -> None:
    assert peak_overlap([]) == 0
    assert peak_overlap([(0, 10), (10, 20), (20, 30)]) == 1  # touching is not overlapping
    assert peak_overlap([(0, 10), (1, 11), (2, 12)]) == 3
    assert peak_overlap([(0, 100), (10, 20), (30, 40), (35, 36)]) == 3
    assert peak_overlap([(5, 6), (0, 10)]) == 2


def test_default_catalog_is_used_by_default() -> None:
    assert build_plan("!batch1 #c").calls[0].name == DEFAULT_CATALOG["fast"].name
