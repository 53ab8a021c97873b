"""The sandbox and what runs in it: a private network namespace holding only
`lo` (namespace; its helper process, the guardian; the connector that hands
TCP connections out of it), a target spec and its launch beside the mock, the
sandbox's state file, the detached supervisor, and ``sut``: the system under
test however a run reaches it. Uses ``wire`` and ``judge``."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "launcher": ("LaunchSettings", "copy_logs", "read_line", "tree_rss_mb"),
    "namespace": ("Sandbox", "processes_in"),
    "state": ("SandboxState", "read_state"),
    "supervisor": ("require_running", "start_detached", "stop_running", "supervise"),
    "sut": ("Access", "Target", "kernel_targets"),
    "target": ("TargetSpec", "load_catalog_file", "load_target", "redact", "scrub", "spec_from_command", "spec_from_flags"),
})
