"""The `specops` command: one module per command group; `main` is the entry point."""

from specops.cli.main import main

__all__ = ["main"]
