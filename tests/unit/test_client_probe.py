"""The builtin runner's probe for "can this host run the client beside the server": the
client's module and every library it imports are found, without importing them (importing
aiohttp costs 0.3-0.5 s of CPU; a sweep probes once per host)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from specops.bench.runners import CLIENT_FOUND

REPO = Path(__file__).resolve().parents[2]


def _probe(*flags: str, prelude: str = "") -> int:
    return subprocess.run([sys.executable, *flags, "-c", prelude + CLIENT_FOUND], cwd="/", timeout=60).returncode


def test_a_python_with_specops_and_its_libraries_passes() -> None:
    assert _probe() == 0


def test_specops_without_aiohttp_fails_the_probe() -> None:
    """-S: no site-packages (no aiohttp, no yaml), specops put on the path by hand."""
    assert _probe("-S", prelude=f"import sys; sys.path.insert(0, {str(REPO)!r}); ") == 1


def test_no_specops_fails_the_probe() -> None:
    assert _probe("-S") == 1
