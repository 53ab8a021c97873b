#!/usr/bin/env python3
"""Run the kstress mock LLM: `scripts/mockllm.py --port 8000` (see `--help`);
the same program as `python -m mock`."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _bootstrap  # noqa: E402

_bootstrap.ensure()

from mock.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:], prog="mockllm.py"))
