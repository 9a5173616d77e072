"""Fan-out: the same 20-step no-op playbook on 1, 8, 16 and 32 hosts at once.

One OpenSSH server is started by the script on 127.0.0.1 and 33 host addresses
(127.0.0.2 ...; MaxSessions 64, MaxStartups 64:30:128; as one sshd binds at most 16
addresses, tests/support/sshd.py runs one listener per 16 with the same port, keys and
config), and each address is a separate inventory host with its own workdir. For each host count N, times the whole
`python -m specops deploy --host gN --forks N` process (wall time, imports included)
and prints the median, per-host cost, and T(N)/T(1); the goal is T(32)/T(1) <= 2. It
also prints the CPU seconds the specops process used and the rest of the machine's busy
CPU during the run (sshd, the host shells and the commands, plus any other load): the
"hosts" share this machine's CPUs with the client, so on a small machine the host side's
CPU, not specops, can bound the fan-out; busy CPU / cores is that floor. For
scale it also times a plain sequential fabric loop (one Connection per host, `c.run` per
step, all in one interpreter) over the largest host count; `--no-fabric` skips it.

    python bench/fanout.py [--steps 20] [--repeats 3] [--counts 1,8,16,32] [--forks N] [--no-fabric]

`--forks 0` leaves --forks off, so specops sizes the pool itself.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from tests.support.sshd import start_sshd, stop_sshd


def machine_busy_cpu() -> float:
    """CPU seconds the whole machine has been busy (all but idle and iowait), /proc/stat."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def children_cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def write_inventory(server, root: Path, counts: list[int]) -> Path:
    """hosts h0..h{max-1}, each on its own address and workdir, and a group gN per count.
    known_hosts is filled in advance so every run is a steady-state run (no first contact)."""
    n = max(counts)
    Path(server.known_hosts).write_text("".join(server.known_hosts_line(i) for i in range(n)))
    hosts = {f"h{i}": server.host_entry(i) for i in range(n)}
    groups = {f"g{c}": {"hosts": [f"h{i}" for i in range(c)]} for c in counts}
    inv = root / "hosts.yaml"
    inv.write_text(yaml.safe_dump({"hosts": hosts, "groups": groups}, sort_keys=False))
    return inv


def write_playbook(root: Path, steps: int) -> Path:
    pb = root / "noop.yaml"
    pb.write_text(yaml.safe_dump({"name": "noop", "steps": [{"name": f"s{i}", "shell": ["true"]}
                                                            for i in range(steps)]}))
    return pb


def time_specops(inv: Path, pb: Path, runs: Path, count: int, forks: int) -> tuple[float, float, float]:
    """(wall s, specops CPU s, rest of the machine's busy CPU s) of one whole deploy process."""
    cmd = [sys.executable, "-m", "specops", "deploy", "--host", f"g{count}", "-p", str(pb), "-i", str(inv),
           "--runs-dir", str(runs)]
    if forks:
        cmd += ["--forks", str(forks if forks > 0 else count)]
    c0, h0 = children_cpu(), machine_busy_cpu()
    t0 = time.perf_counter()
    res = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"specops deploy on g{count} failed (rc {res.returncode}):\n{res.stderr[-3000:]}")
    client = children_cpu() - c0
    return elapsed, client, max(0.0, machine_busy_cpu() - h0 - client)


def time_fabric_sequential(server, count: int, steps: int) -> float:
    """A plain fabric loop: host after host, one connection each, `c.run` per step."""
    code = (
        "import sys,fabric,paramiko\n"
        "port,user,key,n,steps=int(sys.argv[1]),sys.argv[2],sys.argv[3],int(sys.argv[4]),int(sys.argv[5])\n"
        "for i in range(n):\n"
        "    c=fabric.Connection(f'127.0.0.{i+2}',port=port,user=user,connect_kwargs={'key_filename':key})\n"
        "    c.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())\n"
        "    [c.run('true',hide=True) for _ in range(steps)]\n"
        "    c.close()\n"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, str(server.port), server.user, server.key_path, str(count),
                    str(steps)], check=True, stdout=subprocess.DEVNULL, timeout=900)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--counts", default="1,8,16,32", help="host counts, comma separated")
    ap.add_argument("--forks", type=int, default=-1,
                    help="--forks passed to specops (default: the host count; 0: leave it off)")
    ap.add_argument("--no-fabric", action="store_true", help="skip the sequential fabric loop")
    args = ap.parse_args()
    counts = sorted({int(c) for c in args.counts.split(",") if c.strip()})
    if counts[0] < 1 or counts[-1] > 252:
        raise SystemExit("host counts must be in 1..252")
    root = Path(tempfile.mkdtemp(prefix="specops-fanout-"))
    server, proc = start_sshd(root / "sshd", hosts=max(counts) + 1)
    results: dict[int, list[tuple[float, float, float]]] = {c: [] for c in counts}
    fabric_s: float | None = None
    try:
        inv = write_inventory(server, root, counts)
        pb = write_playbook(root, args.steps)
        # One untimed warm-up so the first timed run does not pay for cold caches alone.
        time_specops(inv, pb, root / "runs", counts[0], args.forks)
        for _ in range(args.repeats):
            for c in counts:
                results[c].append(time_specops(inv, pb, root / "runs", c, args.forks))
        if not args.no_fabric:
            fabric_s = time_fabric_sequential(server, counts[-1], args.steps)
    finally:
        stop_sshd(proc)
        shutil.rmtree(root, ignore_errors=True)
    forks = "host count" if args.forks < 0 else ("specops default" if args.forks == 0 else str(args.forks))
    cores = os.cpu_count() or 1
    print(f"{args.steps}-step no-op playbook on N loopback hosts of one sshd, median of {args.repeats} "
          f"(whole process, wall s; --forks = {forks}; {cores} CPUs shared by client and hosts)")
    med = {c: statistics.median(r[0] for r in v) for c, v in results.items()}
    cpu = {c: (statistics.median(r[1] for r in v), statistics.median(r[2] for r in v)) for c, v in results.items()}
    base = med[counts[0]]
    for c in counts:
        client, host = cpu[c]
        print(f"  N={c:<3d} {med[c]:7.3f} s  {1000 * med[c] / (c * args.steps):5.1f} ms/host-step  "
              f"T(N)/T({counts[0]}) = {med[c] / base:5.2f}  | CPU s: specops {client:5.2f}, rest {host:6.2f}, "
              f"floor {(client + host) / cores:5.2f} s  (runs: {', '.join(f'{r[0]:.2f}' for r in results[c])})")
    top = counts[-1]
    verdict = "meets" if med[top] / base <= 2 else "misses"
    print(f"  T({top})/T({counts[0]}) = {med[top] / base:.2f} ({verdict} the goal of <= 2)")
    if fabric_s is not None:
        print(f"  plain sequential fabric loop, {top} hosts: {fabric_s:7.3f} s   "
              f"specops/fabric = {med[top] / fabric_s:.2f}")


if __name__ == "__main__":
    main()
