"""Shared fixtures live in tests/support; each module registers here."""

import os

# Wide, plain terminal output so messages are asserted whole, not wrapped.
os.environ["COLUMNS"] = "250"
os.environ.setdefault("NO_COLOR", "1")


pytest_plugins = [
    "tests.support.sglang_trees",
    "tests.support.sshd",
    "tests.support.slurm",
    "tests.support.faults",
]
