"""Shared fixtures live in tests/support; each module registers here."""

import os
import signal

# Wide, plain terminal output so messages are asserted whole, not wrapped.
os.environ["COLUMNS"] = "250"
os.environ.setdefault("NO_COLOR", "1")


pytest_plugins = [
    "tests.support.sglang_trees",
    "tests.support.sshd",
    "tests.support.slurm",
    "tests.support.faults",
]


# A suite started in the background of a non-interactive shell inherits SIGINT ignored, and so
# would every CLI it starts: the Ctrl-C tests would then wait for an interrupt that never
# comes. Ctrl-C means what a user's terminal makes it mean, wherever the suite was started.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
