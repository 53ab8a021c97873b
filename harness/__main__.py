"""`python -m harness` and the `kstress` console script. The signal edge is
installed before anything else is imported (harness/cli/edge.py)."""

from .cli.edge import EDGE, Interrupt, interrupted

EDGE.install()


def main() -> None:
    try:
        from .cli.commands import main as cli_main

        cli_main()
    except Interrupt as exc:  # a signal before a run started: during imports, or parsing
        interrupted(exc)


if __name__ == "__main__":
    main()
