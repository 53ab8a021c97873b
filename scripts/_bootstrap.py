"""Make `python scripts/X.py` work with any python: re-exec with the
project's .venv interpreter when it exists and is not the one running."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def ensure() -> None:
    venv = ROOT / ".venv"
    py = venv / "bin" / "python"
    if py.exists() and Path(sys.prefix).resolve() != venv.resolve() and not os.environ.get("KSTRESS_NO_REEXEC"):
        os.execv(str(py), [str(py), *sys.argv])
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
