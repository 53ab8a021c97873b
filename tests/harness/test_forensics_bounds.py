"""The bounds of failures.jsonl (harness/judge/forensics.py): the first N of each
failure name, a cap on names, and on frames per turn, per frame and per entry."""

from __future__ import annotations

import json


from harness.judge import forensics as fx
from harness.judge.forensics import Bounds, bounded_frames



def test_the_first_n_of_each_name_are_kept_and_the_rest_counted():
    b = Bounds(per_name=20, names_max=3)
    took = [b.take("count") for _ in range(25)]
    assert took == [True] * 20 + [False] * 5
    assert b.take("timeout") and b.take("closed")
    assert not b.take("error_frame:x")  # a fourth name: over names_max, only counted
    assert b.kept == {"count": 20, "timeout": 1, "closed": 1}
    assert b.skipped == {"count": 5, "error_frame:x": 1}


def test_frames_are_capped_in_count():
    frames = [(1.0 + k / 1000, {"type": "delta", "text": "x"}) for k in range(fx.FRAMES_KEPT + 50)]
    kept, dropped = bounded_frames(frames, 1.0)
    assert len(kept) == fx.FRAMES_KEPT and dropped == 50
    assert kept[0] == {"t_ms": 0.0, "frame": {"type": "delta", "text": "x"}} and kept[1]["t_ms"] == 1.0


def test_a_long_frame_keeps_only_its_head():
    big = {"type": "response", "text": "y" * (fx.FRAME_CHARS * 3)}
    [kept], dropped = bounded_frames([(0.0, big)], 0.0)
    assert dropped == 0 and "frame" not in kept
    assert len(kept["head"]) == fx.FRAME_CHARS and kept["chars"] == len(json.dumps(big, separators=(",", ":")))


def test_an_entry_holds_at_most_turn_chars_of_frames():
    frame = {"type": "delta", "text": "z" * (fx.FRAME_CHARS - 100)}
    kept, dropped = bounded_frames([(0.0, frame)] * fx.FRAMES_KEPT, 0.0)
    used = sum(len(json.dumps(k.get("frame"), separators=(",", ":"))) if "frame" in k else len(k["head"]) for k in kept)
    assert used <= fx.TURN_CHARS + fx.FRAME_CHARS and dropped == fx.FRAMES_KEPT - len(kept) > 0


def test_the_log_is_read_only_for_the_wanted_nonces(tmp_path):
    log = tmp_path / "mock.jsonl"
    log.write_text('{"nonce":"a1","n":1}\n{not json "nonce":"a1"\n{"nonce":"b2","n":2}\n{"path":"/v1/models"}\n{"nonce":"a1","n":3}\n')
    assert [r["n"] for r in fx.mock_lines(log, {"a1"})] == [1, 3]
