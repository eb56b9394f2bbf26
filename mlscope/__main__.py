"""`python -m mlscope` is the `mlscope` command."""

from mlscope.cli import main

if __name__ == "__main__":
    main()
