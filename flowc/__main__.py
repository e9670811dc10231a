"""`python -m flowc` is the `flowc` command."""

from flowc.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
