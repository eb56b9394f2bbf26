"""`python -m mlscope` is the `mlscope` command."""

from mlscope.cli import main

main()
