#!/usr/bin/env python3
"""kstress resilience (see `--help`)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bootstrap  # noqa: E402

_bootstrap.ensure()

from harness.cli.edge import EDGE, Interrupt, interrupted  # noqa: E402

EDGE.install()  # signals handled from here on, before the heavier imports

if __name__ == "__main__":
    try:
        from harness.cli.commands import main_with

        main_with(sys.argv[1:], "resilience.py", "resilience")
    except Interrupt as exc:  # a signal during the imports
        interrupted(exc)
