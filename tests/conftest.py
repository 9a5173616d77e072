"""Shared fixtures live in tests/support; each module registers here."""

pytest_plugins = [
    "tests.support.sglang_trees",
]
