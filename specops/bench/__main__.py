"""`python -m specops.bench --url URL --concurrency C|--rate R ...`: one builtin-client point, run on
the host next to the server (so no tunnel latency enters the measurement); prints the
normalized record as one JSON line."""

from __future__ import annotations

import argparse
import json
import sys

from specops.errors import SpecopsError
from specops.plainhttp import without_tls


def main(argv: list[str] | None = None, *, as_program: bool = False) -> int:
    ap = argparse.ArgumentParser(prog="python -m specops.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    load = ap.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int)
    load.add_argument("--rate", type=float, help="requests per second, an open loop")
    load.add_argument("--trace", help="a trace file to replay (bench/trace.py): its arrivals and lengths")
    load.add_argument("--phases", help="RATE[/s]:DUR[s|m],... rates one after another (bench/phases.py)")
    ap.add_argument("--arrival", default="poisson", help="poisson, constant or gamma:CV (with --rate)")
    ap.add_argument("--num-prompts", type=int)
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dataset", default="random")
    ap.add_argument("--api", default="generate", choices=["generate", "completions"])
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args(argv)
    if as_program and args.url.startswith("http://"):
        without_tls()  # plain HTTP only: aiohttp then builds no TLS contexts (specops/plainhttp.py)
    from specops.bench.client import measure_point  # imported after without_tls()

    try:
        record = measure_point(args.url, concurrency=args.concurrency or 0, rate=args.rate, arrival=args.arrival,
                               trace=args.trace, phases=args.phases,
                               num_prompts=args.num_prompts,
                           input_len=args.input_len, output_len=args.output_len, seed=args.seed,
                           dataset=args.dataset, api=args.api, timeout_s=args.timeout)
    except SpecopsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(record.to_dict(), default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(as_program=True))
