"""The command line: `kstress` and its commands (main; built from the
scenario registry and the flags their settings declare), `kcli`, `status`,
scenario files (`kstress run FILE.toml`), and the process's signal edge. The
top room: it may use every room below; nothing imports it but the entry
points (harness/__main__.py, scripts/)."""

from .. import surface

__all__, __getattr__ = surface(__name__, {
    "edge": ("EDGE", "Interrupt", "interrupted"),
    "commands": ("cli", "main", "main_with"),
})
