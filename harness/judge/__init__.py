"""Judging a turn: the kernel's declared contract, the verdict of one turn
(the mock's verdict line, or its record of the nonce), the failure names, and
a failed turn's whole story (forensics). Uses the wire below it."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "cancel": ("CANCEL_BOUND_S", "cancel_window_s", "judge_cancel", "ran_on"),
    "contract": ("CONTRACT_HELP", "Contract", "KEYS", "OTHER", "REFKERNEL", "from_json", "merged"),
    "forensics": ("Bounds", "Forensics", "entry_of", "story"),
    "mockjoin": ("MockJoin", "check_mock_address"),
    "resilience": ("BREAKS", "KEEPS", "STALL_SLACK_S", "expected", "grade", "stall_ms", "tally", "timeline"),
    "verdict": ("SCHEDULE_FAILURES", "TurnVerdict", "failure_counts", "failure_name", "is_timing_sample", "judge"),
})
