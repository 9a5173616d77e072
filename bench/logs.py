"""`specops logs` on a 1 GB server log over SSH: last lines and follow, without pulling the file.

Starts a loopback sshd (tests/support/sshd.py) with one host whose workdir holds
`.specops/logs/baseline.log`, 1 GiB of real log lines (a 1 MiB block of numbered lines
written 1024 times, then a unique last line). Then, each as a whole `python -m
specops logs` process:

(a) `logs --host h --server baseline -n 1000`: time to the first output line, total
    time, whether the 1000th line is the file's last line, and the bytes the host's sshd
    processes wrote (wchar from /proc/<pid>/io of every sshd under the listener, sampled
    every 10 ms: the encrypted stream to the client, whatever the client reads with);
(b) `logs --host h --server baseline -f -n 1` while this script appends 10 MiB of
    numbered lines as fast as it can: time to the first output, the time until the last
    appended line appears (from the start and from the end of the append), how many of
    the appended lines came out (all, in order, is the goal), and the bytes sshd sent.

Goals (issue 6): first output in under a second, no whole-file transfer. Needs 5 GB free
in the temp directory (else it says so and exits 0); the 1 GB file is deleted at the end.

    python bench/logs.py [--size-mb 1024] [--append-mb 10]
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from tests.support.sshd import start_sshd, stop_sshd

LAST_LINE = "BENCH-LAST-LINE-OF-BASELINE"
MIB = 1 << 20


def write_log(path: Path, size_mb: int) -> float:
    """Write `size_mb` MiB of log lines in 1 MiB writes plus a unique last line; seconds taken."""
    line = "2025-01-01 00:00:00 INFO scheduler: decode batch. #running-req: 64, #token: 81234, gen throughput (token/s): 4321.00 line {:08d}\n"
    block = bytearray()
    i = 0
    while len(block) < MIB:
        block += line.format(i).encode()
        i += 1
    block = bytes(block[:block.rfind(b"\n", 0, MIB) + 1])
    t0 = time.perf_counter()
    with open(path, "wb", buffering=0) as fh:
        written = 0
        while written < size_mb * MIB:
            written += fh.write(block)
        fh.write(f"{LAST_LINE}\n".encode())
        os.fsync(fh.fileno())
    return time.perf_counter() - t0


class SshdBytes:
    """Bytes written by the sshd processes under a listener (wchar of each, the highest
    seen while it lived), sampled every 10 ms in a thread: what went to clients."""

    def __init__(self, listener: int) -> None:
        self.listener = listener
        self.seen: dict[int, int] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._loop, daemon=True).start()

    def _descendants(self) -> list[int]:
        out, todo = [], [self.listener]
        while todo:
            pid = todo.pop()
            try:
                kids = [int(k) for t in os.listdir(f"/proc/{pid}/task")
                        for k in Path(f"/proc/{pid}/task/{t}/children").read_text().split()]
            except OSError:
                continue
            out += kids
            todo += kids
        return out

    def _loop(self) -> None:
        while not self._stop.wait(0.01):
            for pid in self._descendants():
                try:
                    if not Path(f"/proc/{pid}/comm").read_text().startswith("sshd"):
                        continue
                    io = Path(f"/proc/{pid}/io").read_text().split()
                    wchar = int(io[io.index("wchar:") + 1])
                except (OSError, ValueError):
                    continue
                self.seen[pid] = max(self.seen.get(pid, 0), wchar)

    def total(self) -> int:
        time.sleep(0.05)
        return sum(self.seen.values())

    def close(self) -> None:
        self._stop.set()


@dataclass
class Watched:
    """A specops process whose output lines are timestamped as they arrive."""

    proc: subprocess.Popen
    started: float
    lines: list[tuple[float, str]] = field(default_factory=list)
    _new: threading.Condition = field(default_factory=threading.Condition)

    def first_output_s(self) -> float | None:
        return self.lines[0][0] - self.started if self.lines else None

    def wait_for(self, pred, timeout: float) -> float | None:
        """Monotonic time of the first line matching pred, waiting up to timeout."""
        deadline = time.perf_counter() + timeout
        seen = 0
        with self._new:
            while True:
                for t, ln in self.lines[seen:]:
                    if pred(ln):
                        return t
                seen = len(self.lines)
                left = deadline - time.perf_counter()
                if left <= 0 or self.proc.poll() is not None and seen == len(self.lines):
                    return None
                self._new.wait(min(left, 0.2))


def watch(cmd: list[str]) -> Watched:
    w = Watched(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=dict(os.environ, COLUMNS="400")), time.perf_counter())

    def reader() -> None:
        assert w.proc.stdout is not None
        for raw in w.proc.stdout:
            now = time.perf_counter()
            with w._new:
                w.lines.append((now, raw.decode(errors="replace").rstrip("\n")))
                w._new.notify_all()
        with w._new:
            w._new.notify_all()

    threading.Thread(target=reader, daemon=True).start()
    return w


def logs_cmd(inv: Path, host: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "specops", "logs", "--host", host, "-i", str(inv), "--server", "baseline",
            *extra]


def run_tail(inv: Path, host: str, n: int, sshd_io: SshdBytes) -> tuple[Watched, float, int]:
    """One `logs -n` process: (watched output, total s, bytes sshd sent meanwhile)."""
    before = sshd_io.total()
    w = watch(logs_cmd(inv, host, "-n", str(n)))
    w.proc.wait(timeout=300)
    total = time.perf_counter() - w.started
    sent = sshd_io.total() - before  # also lets the reader thread take the last lines
    if w.proc.returncode != 0:
        raise SystemExit(f"specops logs failed (rc {w.proc.returncode}): {w.proc.stderr.read().decode()[-2000:]}")
    return w, total, sent


def append_lines(path: Path, mb: int) -> tuple[int, float, float]:
    """Append `mb` MiB of numbered lines in 64 KiB writes; (lines, start, end) times."""
    line = "2025-01-01 00:00:01 INFO appended line {:08d} " + "x" * 60 + "\n"
    per = len(line.format(0))
    count = mb * MIB // per
    chunk_lines = max(1, 64 * 1024 // per)
    t0 = time.perf_counter()
    with open(path, "ab", buffering=0) as fh:
        for start in range(0, count, chunk_lines):
            fh.write("".join(line.format(i) for i in range(start, min(count, start + chunk_lines))).encode())
    return count, t0, time.perf_counter()


def stop(w: Watched) -> None:
    """Ctrl-C the follow process (the way a user ends it), then by pid if it lingers."""
    if w.proc.poll() is None:
        w.proc.send_signal(signal.SIGINT)
        try:
            w.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait(timeout=10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=int, default=1024, help="size of the log, MiB")
    ap.add_argument("--append-mb", type=int, default=10, help="appended while following, MiB")
    ap.add_argument("--tmp", default=tempfile.gettempdir(), help="where the host's workdir goes")
    args = ap.parse_args()
    free = shutil.disk_usage(args.tmp).free
    if free < 5 * 10**9:
        print(f"skipped: {free / 1e9:.1f} GB free in {args.tmp}, the benchmark needs 5 GB")
        return
    root = Path(tempfile.mkdtemp(prefix="specops-logs-", dir=args.tmp))
    server, proc = start_sshd(root / "sshd", hosts=2)
    sshd_io = SshdBytes(proc.pid)
    try:
        Path(server.known_hosts).write_text(server.known_hosts_line(0) + server.known_hosts_line(1))
        big_wd, small_wd = root / "big", root / "small"
        inv = root / "hosts.yaml"
        inv.write_text(yaml.safe_dump({"hosts": {"big": server.host_entry(0, workdir=str(big_wd)),
                                                 "small": server.host_entry(1, workdir=str(small_wd))}}))
        logdir = big_wd / ".specops" / "logs"
        logdir.mkdir(parents=True)
        log = logdir / "baseline.log"
        write_s = write_log(log, args.size_mb)
        (small_wd / ".specops" / "logs").mkdir(parents=True)
        write_log_small = small_wd / ".specops" / "logs" / "baseline.log"
        write_log_small.write_text("".join(f"small line {i}\n" for i in range(80)) + f"{LAST_LINE}\n")
        size = log.stat().st_size
        print(f"log: {size / MIB:.0f} MiB of lines on loopback host 'big' (written in {write_s:.1f} s), "
              f"client: python -m specops logs")

        # (a) last 1000 lines
        run_tail(inv, "small", 1000, sshd_io)  # warm-up: page cache for Python's imports
        _small, small_total, small_sent = run_tail(inv, "small", 1000, sshd_io)
        big, big_total, big_sent = run_tail(inv, "big", 1000, sshd_io)
        last_ok = bool(big.lines) and big.lines[-1][1].endswith(LAST_LINE)
        print("(a) logs -n 1000")
        print(f"    first output {big.first_output_s():6.3f} s   total {big_total:6.3f} s   lines {len(big.lines)}   "
              f"last line is the file's last: {last_ok}")
        shown = sum(len(ln) + 1 for _, ln in big.lines)
        print(f"    sshd sent {big_sent / 1024:8.1f} KiB for {shown / 1024:.1f} KiB of lines shown  (same command on "
              f"an 81-line log: {small_sent / 1024:.1f} KiB, {small_total:.3f} s; the log is {size / MIB:.0f} MiB)")

        # (b) follow while 10 MiB are appended
        w = watch(logs_cmd(inv, "big", "-f", "-n", "1"))
        first = w.wait_for(lambda ln: ln.endswith(LAST_LINE), timeout=60)
        if first is None:
            stop(w)
            raise SystemExit(f"follow printed nothing: {w.proc.stderr.read().decode()[-2000:]}")
        time.sleep(1.0)  # follow takes the file's size as its start right after the tail
        sent_before = sshd_io.total()
        count, a0, a1 = append_lines(log, args.append_mb)
        last = f"appended line {count - 1:08d} "
        seen_last = w.wait_for(lambda ln: last in ln, timeout=120)
        sent = sshd_io.total() - sent_before
        stop(w)
        appended = [ln for _, ln in w.lines if "appended line" in ln]
        in_order = appended == [f"2025-01-01 00:00:01 INFO appended line {i:08d} " + "x" * 60
                                for i in range(len(appended))]
        print(f"(b) logs -f while {args.append_mb} MiB ({count} lines) are appended "
              f"(append took {a1 - a0:.3f} s)")
        print(f"    first output {first - w.started:6.3f} s")
        if seen_last is None:
            print(f"    last appended line NOT seen within 120 s of the append; lines seen {len(appended)}/{count}")
        else:
            print(f"    last appended line shown {seen_last - a0:6.3f} s after the append began "
                  f"({seen_last - a1:6.3f} s after it ended)")
        print(f"    appended lines shown {len(appended)}/{count}, all in order: {in_order and len(appended) == count}")
        print(f"    sshd sent {sent / MIB:7.2f} MiB while following (appended {args.append_mb} MiB; "
              f"the base64 framing adds a third)")
    finally:
        sshd_io.close()
        stop_sshd(proc)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
