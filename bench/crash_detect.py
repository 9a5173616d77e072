"""How fast specops reports a server that crashes at start.

Launches the simulator with `--sim-fail-at-start` (it loads, writes a traceback and
exits 1) through the real launch + wait_ready path on the `local` host, 10 times, and
measures the time from the crash (the log's last write, just before exit) to the
StepError. Compared with the 10 s health-polling loop of SGLang's and vLLM's own launch
harnesses (the figure given in issue 4), which notice a dead server only at their next
poll or at the timeout.

    python bench/crash_detect.py [--runs 10] [--poll 0.5] [--version 0.5.10.post1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from specops.errors import StepError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers import arms_from_vars, build_launch, launch_arm, stop_arms, wait_ready
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from specops.sim.testing import free_port
from specops.transport.local import LocalTransport

HARNESS_POLL_S = 10.0  # SGLang's and vLLM's launch harnesses poll health every 10 s


def one_run(t: LocalTransport, tree: Path, wd: str, poll_s: float) -> tuple[float, float]:
    """(crash -> report, launch -> report) seconds for one simulated crash at start."""
    vars_ = {"model": "m", "arms": {"baseline": {"port": free_port(),
                                                 "extra_args": ["--sim-fail-at-start"]}}}
    layout = detect_layout(LocalTreeFiles(tree))
    plan = build_launch(arms_from_vars(vars_)["baseline"], layout, workdir=wd, python=sys.executable,
                        engine="sim", sglang_tree=str(tree), sim_options=["--sim-time-scale", "0.02"])
    t_launch = time.time()
    state = launch_arm(t, plan).state
    try:
        wait_ready(t, state, timeout_s=120, poll_s=poll_s)
    except StepError as exc:
        t_report = time.time()
        if "Traceback" not in str(exc):
            raise RuntimeError(f"unexpected failure: {exc}") from exc
    else:
        raise RuntimeError("the simulated crash was not reported")
    t_crash = os.stat(state.log_path).st_mtime
    return t_report - t_crash, t_report - t_launch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--poll", type=float, nargs="+", default=[0.5, 1.0], help="poll intervals to try (<= 1 s)")
    ap.add_argument("--version", default="0.5.10.post1")
    args = ap.parse_args()
    tree = ensure_tree(args.version)
    t = LocalTransport()
    print(f"simulated crash at start (--sim-fail-at-start), SGLang tree {args.version}, {args.runs} runs each")
    print(f"{'poller':<34} {'median crash->report':>21} {'max':>7} {'median launch->report':>22}")
    with tempfile.TemporaryDirectory() as wd:
        for poll in args.poll:
            det, tot = [], []
            for _ in range(args.runs):
                d, total = one_run(t, tree, wd, poll)
                det.append(d)
                tot.append(total)
            stop_arms(t, wd, grace_s=2)
            print(f"{f'specops wait_ready, poll {poll:g} s':<34} {statistics.median(det):>20.3f}s "
                  f"{max(det):>6.2f}s {statistics.median(tot):>21.3f}s")
    print(f"{'SGLang / vLLM launch harness':<34} {'up to ' + format(HARNESS_POLL_S, 'g') + ' s':>21} "
          f"{'(10 s health poll; mean ~5 s, or the full timeout if the poll only checks health)'}")


if __name__ == "__main__":
    main()
