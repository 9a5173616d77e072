"""specops's builtin client beside SGLang's own `bench_serving`, on one real SGLang server.

Issue 54, point 1 ("client truth first"): on a real SGLang 0.5.10.post1 server on this CPU
(the real tier's cached runtime and tiny target, the baseline arm: no speculation), run
both clients at the same loads, one right after the other and in both orders (builtin then
bench_serving, bench_serving then builtin), and print output tok/s, mean TTFT, mean TPOT
and median ITL of each, with the ratio bench_serving / builtin. Both clients run as
specops runs them: the builtin one as `python -m specops.bench` (its own process, as the
builtin runner starts it beside a server), bench_serving from the runtime's python with
the tree on its path and the argv specops's sglang runner builds
(specops/bench/bench_serving.py: `--dataset random` -> random-ids, warm-up, --flush-cache).

The server is started here (its own process group, stopped at the end) unless --url names
one. Its KV cache is given --max-total-tokens 8192 (the tier's 2048 holds 8 requests of
128 + 128 tokens), so concurrency 16 runs without retractions. Figures are timings of this
machine: nothing asserts them (tests/real_sglang/test_client_agreement.py checks only the
structure). The last line is one JSON object: per load, each client's figures (median over
its runs), the ratios, the worst ratio's distance from 1 and whether all four agree within
5%.

    python bench/client_agreement.py [--concurrency 1 4 16] [--rate 4] [--repeats 1]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specops.bench.bench_serving import bench_command, parse_bench_serving_output  # noqa: E402
from specops.bench.client import default_num_prompts  # noqa: E402
from specops.bench.running import parse_metrics  # noqa: E402
from specops.hostfiles.treefiles import LocalTreeFiles  # noqa: E402
from specops.sglang.source import ensure_tree  # noqa: E402
from specops.sim.testing import free_ports  # noqa: E402
from tests.support.real_sglang import server as srv  # noqa: E402
from tests.support.real_sglang.models import ensure_models  # noqa: E402
from tests.support.real_sglang.runtime import DEFAULT, ensure_runtime  # noqa: E402

#: the figures compared, as the normalized record names them
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p50_itl_ms")
LABELS = {"output_throughput": "out tok/s", "mean_ttft_ms": "TTFT ms", "mean_tpot_ms": "TPOT ms",
          "p50_itl_ms": "med ITL ms"}
TOLERANCE = 0.05
ORDERS = {"both": (("builtin", "bench_serving"), ("bench_serving", "builtin")),
          "builtin-first": (("builtin", "bench_serving"),),
          "bench-serving-first": (("bench_serving", "builtin"),)}
#: after the tier's own flags (argparse keeps the last); --enable-metrics for the server's own figures
SERVER_ARGS = ["--max-total-tokens", "8192", "--enable-metrics"]
#: the server's own histograms (SGLang's tokenizer manager: TTFT from the request's arrival to
#: its first token, the inter-token latency per token, end to end): name -> (figure, to ms)
SERVER_HISTOGRAMS = {"time_to_first_token_seconds": "server_ttft_ms",
                     "inter_token_latency_seconds": "server_itl_ms",
                     "e2e_request_latency_seconds": "server_e2e_ms"}


def run_builtin(url: str, load: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """One point of the builtin client, in its own process as the builtin runner runs it."""
    traffic = ["--concurrency", str(load["concurrency"])] if load["rate"] is None else ["--rate", repr(load["rate"])]
    argv = [sys.executable, "-m", "specops.bench", "--url", url, *traffic, "--num-prompts", str(load["n"]),
            "--input-len", str(args.input_len), "--output-len", str(args.output_len), "--seed", str(args.seed),
            "--dataset", "random"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"builtin client failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    record: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return record


def run_bench_serving(url: str, load: dict[str, Any], args: argparse.Namespace, ctx: dict[str, Any],
                      out: Path) -> dict[str, Any]:
    """One point of SGLang's bench_serving, with the argv specops's sglang runner builds."""
    out.unlink(missing_ok=True)
    argv = ctx["command"].argv(str(ctx["python"]), base_url=url, dataset="random", input_len=args.input_len,
                               output_len=args.output_len, num_prompts=load["n"], concurrency=load["concurrency"] or 0,
                               rate=load["rate"], output_file=str(out), seed=args.seed,
                               model=str(ctx["model"]), tokenizer=str(ctx["model"]))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=ctx["env"], cwd=out.parent)
    if proc.returncode != 0 or not out.exists():
        raise SystemExit(f"bench_serving failed (rc {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return parse_bench_serving_output(out.read_text(), num_prompts=load["n"])


def figures(record: dict[str, Any]) -> dict[str, Any]:
    keep = (*METRICS, "completed", "total_input_tokens", "total_output_tokens", "duration_s", "request_throughput")
    return {k: record.get(k) for k in keep}


def server_counters(url: str) -> dict[str, float]:
    """The server's histograms' sums and counts now ({} where it keeps none: started without
    --enable-metrics)."""
    try:
        with urllib.request.urlopen(url + "/metrics", timeout=60) as resp:
            values = parse_metrics(resp.read().decode(errors="replace"))
    except OSError:
        return {}
    return {f"{h}_{part}": values[f"sglang:{h}_{part}"] for h in SERVER_HISTOGRAMS for part in ("sum", "count")
            if f"sglang:{h}_{part}" in values}


def server_figures(before: dict[str, float], after: dict[str, float]) -> dict[str, float | None]:
    """The server's own mean TTFT, inter-token latency and end-to-end latency (ms) over the
    requests between two reads: what it measured from each request's arrival in its tokenizer
    to each token's leaving it, with neither client's connections, sessions or parsing in it.
    A client's warm-up requests are in them too (the same count for both clients)."""
    out: dict[str, float | None] = {}
    for h, name in SERVER_HISTOGRAMS.items():
        n = after.get(f"{h}_count", 0.0) - before.get(f"{h}_count", 0.0)
        total = after.get(f"{h}_sum", 0.0) - before.get(f"{h}_sum", 0.0)
        out[name] = round(1000.0 * total / n, 4) if n > 0 else None
    return out


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    """The median over a client's runs: on a shared machine a run now and then stalls (the
    server's first chunk handed over at 6 ms and read at 64 ms, then the whole stream at
    once), which a mean would carry into the comparison."""
    values = [r[key] for r in runs if isinstance(r.get(key), (int, float))]
    return statistics.median(values) if values else None


BS_SCHEDULE = """
import sys, numpy as np
n, rate, seed, vocab, i, o = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
np.random.seed(seed)  # bench_serving 0.5.10.post1: run_benchmark seeds, random-ids draws lens and offsets, then gaps
np.random.randint(i, i + 1, size=n); np.random.randint(o, o + 1, size=n); np.random.randint(0, vocab, size=n)
print(sum(np.random.exponential(1.0 / rate) for _ in range(n - 1)))
"""


def schedule_ends(load: dict[str, Any], args: argparse.Namespace, ctx: dict[str, Any]) -> dict[str, float | None]:
    """When each client's last request is due at a rate point: the builtin client's drawn offsets,
    and bench_serving's exponential gaps replayed from its seed (its 0.5.10.post1 order of numpy
    draws). bench_serving sleeps each gap after the previous send, so on a loaded machine its
    sends drift later than this; the builtin client sends at the offsets themselves."""
    from specops.bench.arrivals import offsets, parse_arrival

    builtin = offsets(load["n"], load["rate"], parse_arrival("poisson", where="client_agreement"), args.seed)[-1]
    proc = subprocess.run([str(ctx["python"]), "-c", BS_SCHEDULE, str(load["n"]), repr(load["rate"]), str(args.seed),
                           str(ctx["vocab"]), str(args.input_len), str(args.output_len)],
                          capture_output=True, text=True, timeout=300)
    bs = float(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None
    return {"builtin": builtin, "bench_serving": bs}


def ratios(bs: dict[str, Any], bi: dict[str, Any], keys: Iterable[str] = METRICS) -> dict[str, float | None]:
    return {k: (bs[k] / bi[k] if isinstance(bs.get(k), (int, float)) and isinstance(bi.get(k), (int, float))
                and bi[k] else None) for k in keys}


def measure(url: str, loads: list[dict[str, Any]], args: argparse.Namespace, ctx: dict[str, Any],
            work: Path) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for load in loads:
        runs: dict[str, list[dict[str, Any]]] = {"builtin": [], "bench_serving": []}
        by_order: list[dict[str, Any]] = []
        for repeat in range(args.repeats):
            for order in ORDERS[args.order]:
                pair: dict[str, dict[str, Any]] = {}
                for client in order:
                    t0, before = time.monotonic(), server_counters(url)
                    rec = (run_builtin(url, load, args) if client == "builtin" else
                           run_bench_serving(url, load, args, ctx, work / f"bs-{load['key']}-{repeat}.jsonl"))
                    pair[client] = {**figures(rec), **server_figures(before, server_counters(url))}
                    runs[client].append(pair[client])
                    print(f"  {load['key']} repeat {repeat} {client:13s} {time.monotonic() - t0:5.1f} s: "
                          + ", ".join(f"{LABELS[k]} {pair[client][k]:.3f}" for k in METRICS
                                      if isinstance(pair[client][k], (int, float))), flush=True)
                by_order.append({"order": " then ".join(order), "repeat": repeat,
                                 "ratio": ratios(pair["bench_serving"], pair["builtin"])})
        means = {c: {k: median_of(rs, k) for k in (*METRICS, "total_input_tokens", "total_output_tokens",
                                                   "request_throughput", "duration_s", *SERVER_HISTOGRAMS.values())}
                 for c, rs in runs.items()}
        ratio = ratios(means["bench_serving"], means["builtin"])
        worst = max((abs(r - 1.0) for r in ratio.values() if r is not None), default=None)
        server = ratios({k: means["bench_serving"][k] for k in SERVER_HISTOGRAMS.values()},
                        {k: means["builtin"][k] for k in SERVER_HISTOGRAMS.values()}, SERVER_HISTOGRAMS.values())
        result[load["key"]] = {"concurrency": load["concurrency"], "rate": load["rate"], "num_prompts": load["n"],
                               "server_ratio": server,
                               "runs_each": len(runs["builtin"]), "builtin": means["builtin"],
                               "bench_serving": means["bench_serving"], "ratio": ratio, "orders": by_order,
                               "worst_deviation": worst,
                               "within_5pct": worst is not None and worst <= TOLERANCE}
        if load["rate"] is not None:
            result[load["key"]]["schedule_end_s"] = schedule_ends(load, args, ctx)
    return result


def print_table(result: dict[str, Any]) -> None:
    print("\nbs = sglang.bench_serving, bi = specops builtin; ratio = bs / bi (median over each client's runs)")
    head = f"{'load':>6} {'n':>4} | " + " | ".join(f"{LABELS[k] + ' bs':>14} {'bi':>9} {'ratio':>6}" for k in METRICS)
    print(head + " | in tok bs/bi")
    print("-" * (len(head) + 16))
    for key, row in result.items():
        cells = []
        for k in METRICS:
            bs, bi, r = row["bench_serving"][k], row["builtin"][k], row["ratio"][k]
            cells.append(f"{bs if bs is not None else float('nan'):14.3f} {bi if bi is not None else float('nan'):9.3f} "
                         f"{r if r is not None else float('nan'):6.3f}")
        print(f"{key:>6} {row['num_prompts']:>4} | " + " | ".join(cells)
              + f" | {row['bench_serving']['total_input_tokens']}/{row['builtin']['total_input_tokens']}")
        seen = {c: row[c] for c in ("bench_serving", "builtin")}
        if all(seen[c].get("server_ttft_ms") is not None for c in seen):
            print(f"{'':>13}the server's own means during each client's runs, bs / bi: "
                  + ", ".join(f"{k.removeprefix('server_').replace('_ms', '')} {seen['bench_serving'][k]:.3f} / "
                              f"{seen['builtin'][k]:.3f} ms" for k in SERVER_HISTOGRAMS.values()
                              if seen["bench_serving"].get(k) is not None and seen["builtin"].get(k) is not None)
                  + "; TTFT the client added: bs "
                  + f"{seen['bench_serving']['mean_ttft_ms'] - seen['bench_serving']['server_ttft_ms']:.3f}, bi "
                  + f"{seen['builtin']['mean_ttft_ms'] - seen['builtin']['server_ttft_ms']:.3f} ms")
        if "schedule_end_s" in row:
            ends = row["schedule_end_s"]
            print(f"{'':>13}last request due at (s): bs {ends['bench_serving']}, bi {ends['builtin']:.3f}; run took "
                  f"(s): bs {row['bench_serving']['duration_s']:.3f}, bi {row['builtin']['duration_s']:.3f}")
        for o in row["orders"]:
            print(f"{'':>13}{o['order']}: " + ", ".join(f"{LABELS[k]} {v:.3f}" for k, v in o["ratio"].items()
                                                       if v is not None))


def renice(target: int) -> int:
    """Set this process's niceness (children inherit it); the niceness it runs at."""
    current = os.nice(0)
    try:
        return os.nice(target - current)
    except PermissionError:
        print(f"note: cannot set niceness {target} (not root): running at {current}", file=sys.stderr)
        return current


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running SGLang server of the real tier's target (else one is started here)")
    ap.add_argument("--concurrency", type=int, nargs="*", default=[1, 4, 16])
    ap.add_argument("--rate", type=float, nargs="*", default=[4.0], help="request rates (Poisson arrivals)")
    ap.add_argument("--num-prompts", type=int, default=None,
                    help="requests a point (default max(8 x concurrency, 32); a rate: 16 x rate, at least 32)")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=1, help="rounds of the orders at each load")
    ap.add_argument("--order", choices=sorted(ORDERS), default="both")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "specops-client-agreement")
    ap.add_argument("--nice", type=int, default=-10,
                    help="niceness for this script, the server and both clients (they inherit it), so other "
                         "work on a shared machine takes less of their time; a negative value needs root (else "
                         "they run at the current one)")
    args = ap.parse_args()
    niceness = renice(args.nice)

    args.workdir.mkdir(parents=True, exist_ok=True)
    runtime, models, tree = ensure_runtime(), ensure_models(), ensure_tree(DEFAULT)
    ctx = {"command": bench_command(LocalTreeFiles(tree)), "python": runtime.python, "model": models.target,
           "env": srv.server_env(tree), "vocab": models.vocab}
    loads = [{"key": f"c{c}", "concurrency": c, "rate": None,
              "n": args.num_prompts or max(2 * default_num_prompts(c), 32)} for c in args.concurrency]
    loads += [{"key": f"r{r:g}", "concurrency": 0, "rate": r,
               "n": args.num_prompts or max(int(16 * r), 32)} for r in args.rate]
    server = None
    url = args.url
    if url is None:
        port, nccl = free_ports(2)
        server = srv.start(runtime.python, tree, models.target, port, args.workdir / "server.log", nccl_port=nccl,
                           extra_args=SERVER_ARGS)
    try:
        if server is not None:
            ready = server.wait_ready(600)
            url = server.url
            print(f"SGLang {DEFAULT} baseline (torch_native) ready in {ready:.1f} s at {url}", flush=True)
        assert url is not None
        print(f"load: input {args.input_len} tokens, output {args.output_len}, order {args.order}, "
              f"repeats {args.repeats}, cores {os.cpu_count()}, nice {niceness}, "
              f"loadavg {os.getloadavg()[0]:.2f}", flush=True)
        result = measure(url, loads, args, ctx, args.workdir)
    finally:
        if server is not None:
            server.stop()
    print_table(result)
    agree = all(row["within_5pct"] for row in result.values())
    print(f"\nall figures within {TOLERANCE:.0%}: {agree} (loadavg after {os.getloadavg()[0]:.2f})")
    print(json.dumps({"sglang": DEFAULT, "input_len": args.input_len, "output_len": args.output_len,
                      "order": args.order, "repeats": args.repeats, "nice": niceness, "loads": result, "agree_within_5pct": agree},
                     default=str))


if __name__ == "__main__":
    main()
