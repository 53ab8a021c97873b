import sys


def main() -> None:
    sys.exit("refkernel: not built yet (see issue 3)")


if __name__ == "__main__":
    main()
