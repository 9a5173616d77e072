"""How fast can the builtin client stream, and how late does it send when pushed?

Runs the real simulator with a near-zero model clock (`--sim-time-scale` tiny), so the
server answers as fast as its event loop can and the client is the bottleneck, then runs
`specops.bench.client.measure_point` at rising concurrency. For each level it prints the
streamed token rate in wall-clock tokens/s (baseline arm: one token per chunk, the
client's worst case), request rate, client lag (how long after its slot came free each
request was sent) and event-loop lag. Client and simulator share this machine's CPUs, so
the figure is a floor on the client's capacity.

The ratios at the end compare that capacity with what a simulated sweep asks of the
client at a given time scale: baseline saturates near 773 model tok/s, i.e. 773 / scale
wall tok/s. A ratio well above 1 means the client is not what limits that demo.

    python bench/client_capacity.py [--levels 1,4,16,64,128] [--output-len 256] [--scale 0.0001]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specops.bench.client import measure_point
from specops.sglang.source import ensure_tree
from specops.sim.model import BASELINE_CEILING_TOK_S
from specops.sim.testing import run_sim


def _ms(value: float | None) -> str:
    """A lag in ms, or '-' where none was sampled (a point shorter than the loop probe's 5 ms
    period on a busy machine has no event-loop sample)."""
    return "-" if value is None else f"{value:.2f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,4,16,64,128")
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=16)
    ap.add_argument("--prompts-per-slot", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.0001, help="sim time scale (wall = model x scale)")
    ap.add_argument("--api", default="generate", choices=["generate", "completions"])
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        sim_args = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--sim-time-scale", str(args.scale),
                    "--max-running-requests", str(max(levels))]
        with run_sim(ensure_tree("0.5.10.post1"), sim_args, log_path=Path(tmp) / "sim.log") as sim:
            for c in levels:
                t0 = time.perf_counter()
                rec = measure_point(sim.url, concurrency=c, num_prompts=args.prompts_per_slot * c,
                                input_len=args.input_len, output_len=args.output_len, warmup=c,
                                api=args.api, timeout_s=120).to_dict()  # a ResultRecord, read as a dict
                wall = rec["extra"]["duration_wall_s"]
                tokens = rec["total_output_tokens"] or 0
                rows.append({
                    "c": c, "ok": rec["completed"], "failed": rec["failed"],
                    "tok_s": tokens / wall if wall else 0.0,
                    "req_s": rec["completed"] / wall if wall else 0.0,
                    "chunk_s": rec["extra"]["stream_chunks"] / wall if wall else 0.0,
                    "lag_mean": rec["client_lag_mean_ms"], "lag_p99": rec["client_lag_p99_ms"],
                    "lag_max": rec["client_lag_max_ms"], "loop_p99": rec["extra"]["loop_lag_p99_ms"],
                    "loop_max": rec["extra"]["loop_lag_max_ms"], "elapsed": time.perf_counter() - t0,
                })

    print(f"builtin client capacity: simulator at time scale {args.scale:g}, baseline arm, api={args.api}, "
          f"output {args.output_len} tokens, {os.cpu_count()} CPUs shared by client and simulator")
    print(f"{'conc':>5} {'ok':>5} {'fail':>4} {'wall tok/s':>11} {'chunks/s':>9} {'req/s':>8} {'lag mean':>9} {'lag p99':>8} "
          f"{'lag max':>8} {'loop p99':>9} {'loop max':>9}   (lags in wall ms)")
    for r in rows:
        print(f"{r['c']:>5} {r['ok']:>5} {r['failed']:>4} {r['tok_s']:>11.0f} {r['chunk_s']:>9.0f} {r['req_s']:>8.1f} "
              f"{_ms(r['lag_mean']):>9} {_ms(r['lag_p99']):>8} {_ms(r['lag_max']):>8} {_ms(r['loop_p99']):>9} "
              f"{_ms(r['loop_max']):>9}")
    best = max(rows, key=lambda r: r["tok_s"])
    print(f"\nhighest sustained streamed rate: {best['tok_s']:.0f} tok/s at concurrency {best['c']} "
          f"(client lag mean {_ms(best['lag_mean'])} ms, p99 {_ms(best['lag_p99'])} ms, "
          f"event-loop lag p99 {_ms(best['loop_p99'])} ms)")
    for scale in (1.0, 0.5, 0.25, 0.1):
        need = BASELINE_CEILING_TOK_S / scale
        print(f"  demo at time scale {scale:<5g}: baseline peak asks {need:>7.0f} wall tok/s -> "
              f"client headroom {best['tok_s'] / need:5.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
