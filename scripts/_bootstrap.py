"""Make `python scripts/X.py` work with any python: re-exec with the
project's .venv interpreter when it exists and is not the one running.

Only the standard library here: this runs before the venv is found, under
whatever python the user typed (issue 22, item 16: `--help` before
`make venv` was a traceback from `import click`)."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXIT_USAGE = 2  # docs/results.md: a usage or configuration error


def ensure() -> None:
    venv = ROOT / ".venv"
    py = venv / "bin" / "python"
    if py.exists() and Path(sys.prefix).resolve() != venv.resolve() and not os.environ.get("KSTRESS_NO_REEXEC"):
        os.execv(str(py), [str(py), *sys.argv])
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if Path(sys.prefix).resolve() == venv.resolve() and (venv / ".installed-stamp").exists():
        return  # `make venv` finished here: no need to look (it costs ~10 ms a start)
    missing = missing_dependencies()
    if missing:
        without_venv(missing, py.exists())


def dependencies() -> list[str]:
    """The import names of pyproject's [project] dependencies (each of ours
    imports under its distribution name)."""
    try:
        text = (ROOT / "pyproject.toml").read_text()
    except OSError:
        return ["click"]
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.S | re.M)
    if not block:
        return ["click"]
    return [re.split(r"[<>=!~\[; ]", spec, maxsplit=1)[0].replace("-", "_") for spec in re.findall(r'^\s*"([^"]+)"', block.group(1), re.M)]


def missing_dependencies() -> list[str]:
    # find_spec only looks for the module: nothing third-party is imported yet
    return [name for name in dependencies() if importlib.util.find_spec(name) is None]


def without_venv(missing: list[str], venv_exists: bool, prog: str | None = None, help_exit: int = 0) -> None:
    """No venv with kstress's dependencies: `--help` says how to get one
    (exit 0, as help does), anything else is a configuration error (exit 2)."""
    prog = prog or Path(sys.argv[0]).name
    where = (f"{ROOT / '.venv'} exists but lacks them (an interrupted install?)" if venv_exists
             else f"{ROOT / '.venv'} does not exist yet")
    fix = f"run `make venv` in {ROOT} once (it creates .venv with them; needs Python >= 3.11), then run {prog} again"
    why = f"kstress's dependencies ({', '.join(missing)}) are not installed for {sys.executable} and {where}"
    if any(a in ("--help", "-h") for a in sys.argv[1:]):
        print(f"Usage: {prog} [OPTIONS] ...\n\n  {why}.\n\n  To list every option: {fix}.\n  README.md and docs/ describe the same options.")
        sys.exit(help_exit)
    print(f"{prog}: {why}; {fix}", file=sys.stderr)
    sys.exit(EXIT_USAGE)


HELP_SHOWN = 10  # for launch.sh: the help was printed, exit 0 without running anything

if __name__ == "__main__":
    # `python3 scripts/_bootstrap.py launch.sh ARGS...`: launch.sh's check when
    # it has no .venv; exit 0 when this python has the dependencies
    gone = missing_dependencies()
    if gone:
        without_venv(gone, (ROOT / ".venv" / "bin" / "python").exists(), sys.argv[1] if len(sys.argv) > 1 else "launch.sh", HELP_SHOWN)
