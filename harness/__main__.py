"""`python -m harness` and the `kstress` console script. The signal edge is
installed before anything else is imported (harness/edge.py)."""

from .edge import EDGE

EDGE.install()


def main() -> None:
    from .cli import main as cli_main

    cli_main()


if __name__ == "__main__":
    main()
