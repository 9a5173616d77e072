"""What the fault-injection tier (tests/faults) shares: the CLI as a real process, short
sweeps on the simulator, polling with deadlines, reading results.jsonl strictly, and a
small filesystem that can be filled."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.support.arms import sim_inventory
from tests.support.waiting import wait_until  # noqa: F401 - the tier's tests import it from here

#: A sweep of 30 points that takes seconds: 3 arms x 5 levels x 2 repeats, tiny requests.
LEVELS = "1,2,4,8,16"
SHORT = ["--concurrency", LEVELS, "--repeats", "2", "--num-prompts", "4", "--input-len", "16", "--output-len", "8"]
MATRIX = {(a, c, r) for a in ("baseline", "eagle3", "adaptive") for c in (1, 2, 4, 8, 16) for r in (0, 1)}
#: The simulator's clock: fast enough for 30 points in seconds, slow enough to stay a model.
FAST = {"time_scale": 0.01}


@pytest.fixture(scope="session")
def fault_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One workdir for the tier's local host: its SGLang tree is made once (seconds), not
    per test. Each test stops the servers it leaves, so the next one starts clean."""
    return tmp_path_factory.mktemp("faults-host")


def inventory(tmp_path: Path, entry: dict[str, Any], name: str = "local") -> Path:
    """hosts.yaml in tmp_path with one simulated host, on fresh ports."""
    return sim_inventory(tmp_path, entry, name=name, sim=FAST)


def local_inventory(tmp_path: Path, workdir: Path) -> Path:
    return inventory(tmp_path, {"connection": "local", "workdir": str(workdir)})


def specops_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "specops", *args]


def _env() -> dict[str, str]:
    return dict(os.environ, COLUMNS="250", NO_COLOR="1")


@contextmanager
def spawn(*args: str) -> Iterator[subprocess.Popen]:
    """`specops ARGS` as a user's process (output to a pipe), not waited for; killed on the
    way out if the test left it running (a failed wait)."""
    proc = subprocess.Popen(specops_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=_env(), stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def specops(*args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    """`specops ARGS` run to its end; output is stdout and stderr together."""
    return subprocess.run(specops_argv(*args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=_env(), stdin=subprocess.DEVNULL, timeout=timeout)


def stop_leftovers(inv: Path, host: str, workdir: Path) -> None:
    """After a test: `specops stop` the servers a run left on the host (a killed run cannot
    stop its own; a failed assertion may leave some), and only then: it costs a CLI start."""
    if list((workdir / ".specops" / "servers").glob("*.json")):
        res = specops("stop", "--host", host, "-i", str(inv), timeout=60)
        assert res.returncode == 0, res.stdout


def count_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def whole_records(run_dir: Path) -> list[dict[str, Any]]:
    """results.jsonl, asserting it holds only whole lines (no torn tail, every line one JSON object)."""
    data = (run_dir / "results.jsonl").read_bytes()
    assert not data or data.endswith(b"\n"), f"torn last line: {data[-200:]!r}"
    records = [json.loads(line) for line in data.decode().splitlines()]
    assert all(isinstance(r, dict) for r in records)
    return records


def ok_points(records: list[dict[str, Any]]) -> list[tuple[str, int, int]]:
    return [(r["arm"], r["concurrency"], r["repeat"]) for r in records if r["status"] == "ok"]


def no_temp_files(run_dir: Path) -> list[Path]:
    """Leftovers of an atomic write that did not finish (there must be none)."""
    return sorted(run_dir.rglob("*.specops-tmp"))


@contextmanager
def small_filesystem(path: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `path` for the test, unmounted after. Needs root (CI
    runs as root); elsewhere the test skips and says so."""
    path.mkdir(parents=True, exist_ok=True)
    mount = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0755", "tmpfs", str(path)],
                           capture_output=True, text=True, timeout=30)
    if mount.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mount.stderr.strip() or mount.returncode}); "
                    f"the full-disk case needs root, as CI has")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


def fill(fs: Path) -> Path:
    """Write a file until the filesystem says it is full; the file is returned for freeing."""
    filler = fs / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(chunk)
        except OSError:
            pass
    # a page-sized write may still fit where a chunk did not: take that too
    with open(filler, "ab", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 512)
        except OSError:
            pass
    return filler


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
