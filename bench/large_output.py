"""Large command output: 10 MB of base64 text from one command on a loopback SSH host,
through specops's session helper, through a channel per command, and through fabric's
`Connection.run` (1000-byte reads). Prints seconds and ratios.

    python bench/large_output.py [--mb 10]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import fabric
import paramiko

from specops.transport.ssh import SSHTransport
from tests.support.sshd import start_sshd, stop_sshd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=float, default=10.0, help="random megabytes the command prints as base64")
    args = ap.parse_args()
    cmd = f"head -c {int(args.mb * 1e6)} /dev/urandom | base64 -w 100"
    server, proc = start_sshd(Path(tempfile.mkdtemp(prefix="specops-large-")))
    figures: dict[str, tuple[float, int]] = {}
    try:
        for label, session in (("specops, session helper", True), ("specops, channel per command", False)):
            t = SSHTransport("h", server.address(0), port=server.port, user=server.user,
                             key_filename=server.key_path, known_hosts=server.known_hosts, use_session=session)
            t.run(["true"], timeout=30)  # connect (and start the helper) outside the timing
            t0 = time.perf_counter()
            r = t.run(cmd, timeout=120)
            figures[label] = (time.perf_counter() - t0, len(r.stdout))
            t.close()
        c = fabric.Connection(server.address(0), port=server.port, user=server.user,
                              connect_kwargs={"key_filename": server.key_path})
        c.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())  # a throwaway loopback sshd
        c.run("true", hide=True)
        t0 = time.perf_counter()
        r = c.run(cmd, hide=True)
        figures["fabric Connection.run"] = (time.perf_counter() - t0, len(r.stdout))
        c.close()
    finally:
        stop_sshd(proc)
    base = figures["fabric Connection.run"][0]
    print(f"one command printing ~{args.mb * 1.35:.1f} MB ({args.mb:g} MB random bytes as base64), loopback sshd")
    for label, (secs, size) in figures.items():
        print(f"  {label:30s} {secs:6.2f} s  {size / 1e6:5.1f} MB  {size / 1e6 / secs:6.1f} MB/s  x{base / secs:5.1f} vs fabric")


if __name__ == "__main__":
    main()
