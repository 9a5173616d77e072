"""`python -m specops` is the `specops` command."""

from specops.cli import main

main()
