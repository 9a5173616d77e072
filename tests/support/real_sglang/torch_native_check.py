"""EAGLE-3 on torch_native attention (the eagle-torch-native patch set; eagle-torch-native-v2 on
0.5.14, from its own runtime) on a real SGLang server on this CPU, against the plain server on
the same attention (issue 54, point 3).

    python -m tests.support.real_sglang.torch_native_check [--version 0.5.10.post1] [--requests 8]
        [--max-new-tokens 33] [--old-route] [--workdir DIR]

One server at a time, each from the tier's launcher (server.start): `plain` (torch_native) and
`eagle3` (torch_native, on a copy of the release's cached tree with the set applied, its verify
included); with --old-route also `eagle3-triton`, the route without the set: the release's
own tree, EAGLE on Triton's kernels under Triton's interpreter, 2 requests of 17 tokens (it
takes ~1 s a token with the tier's stand-ins on 2 cores). Each gets one warm-up request, then
sequential greedy requests (concurrency 1, ignore_eos) of the tier's prompts, each twice: one
token, then --max-new-tokens. TPOT = (time of the long one - time of the short one) /
(tokens - 1): the prefill and the HTTP round trip cancel. Figures come from this machine's wall
clock, so they move with its load (run it on a quiet machine to compare routes; nothing in
the tests reads them).

Checks: every eagle3 `output_ids` equals plain's, and the eagle3 server's own `Decode batch`
lines show an accept length above 1. Prints one JSON summary (median TPOT per server, the
ratio plain / eagle3, the accept lengths); exit 0 when the checks hold, 1 when one fails.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specops.bench.running import parse_decode_lines
from specops.sglang.source import ensure_tree
from tests.support.real_sglang import server as real
from tests.support.real_sglang.adaptive_check import LOG_EVERY_STEP, PROMPTS, _free_ports, generate, patched_tree
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import runtime_python

PATCH_SET = "eagle-torch-native"
#: the set each release takes where it is not PATCH_SET (0.5.14's only EAGLE worker is v2)
PATCH_SETS = {"0.5.14": "eagle-torch-native-v2"}
READY_TIMEOUT_S = 400.0
OLD_ROUTE = {"requests": 2, "max_new_tokens": 17}


def patch_set(version: str) -> str:
    return PATCH_SETS.get(version, PATCH_SET)


def measure(name: str, tree: Path, draft: Path | None, attention: str, requests: int, max_new: int,
            work: Path, version: str) -> dict[str, Any]:
    """Start one server, time `requests` sequential greedy requests, stop it."""
    python, models = runtime_python(version), ensure_models()
    port, nccl_port = _free_ports(2)
    server = real.start(python, tree, models.target, port, work / f"{name}.log", draft=draft,
                        extra_args=LOG_EVERY_STEP, attention=attention, nccl_port=nccl_port)
    tpots, outputs = [], []
    try:
        server.wait_ready(READY_TIMEOUT_S)
        generate(server.url, PROMPTS[0], 4)
        for i in range(requests):
            prompt = PROMPTS[i % len(PROMPTS)]
            t0 = time.monotonic()
            generate(server.url, prompt, 1)
            t1 = time.monotonic()
            outputs.append(generate(server.url, prompt, max_new)["output_ids"])
            t2 = time.monotonic()
            tpots.append(((t2 - t1) - (t1 - t0)) / (max_new - 1) * 1000.0)
    finally:
        server.stop()
    accept = parse_decode_lines(server.log_text()).accept
    return {"attention": attention, "tree": str(tree), "tpot_ms_median": round(statistics.median(tpots), 3),
            "tpot_ms": [round(t, 3) for t in tpots], "outputs": outputs,
            "decode_line_accept_len_mean": round(statistics.fmean(accept), 3) if accept else None}


def run_check(version: str, requests: int, max_new: int, old_route: bool, work: Path) -> dict[str, Any]:
    models = ensure_models()
    tree = patched_tree(version, work / "tree", runtime_python(version), patch_set(version))
    servers = {"plain": measure("plain", tree, None, "torch_native", requests, max_new, work, version),
               "eagle3": measure("eagle3", tree, models.draft, "torch_native", requests, max_new, work, version)}
    if old_route:
        servers["eagle3-triton"] = measure("eagle3-triton", ensure_tree(version), models.draft, "triton",
                                           OLD_ROUTE["requests"], OLD_ROUTE["max_new_tokens"], work, version)
    plain, eagle = servers["plain"], servers["eagle3"]
    problems = []
    if eagle["outputs"] != plain["outputs"]:
        problems.append("eagle3's greedy outputs differ from plain's")
    if not (eagle["decode_line_accept_len_mean"] or 0) > 1.0:
        problems.append(f"eagle3 accept length {eagle['decode_line_accept_len_mean']} is not above 1")
    summary: dict[str, Any] = {
        "version": version, "patch_set": patch_set(version), "settings": real.EAGLE3_SETTINGS, "requests": requests,
        "max_new_tokens": max_new, "workdir": str(work),
        "servers": {name: {k: v for k, v in s.items() if k != "outputs"} for name, s in servers.items()},
        "plain_over_eagle3_tpot": round(plain["tpot_ms_median"] / eagle["tpot_ms_median"], 3),
        "identical": eagle["outputs"] == plain["outputs"], "problems": problems, "ok": not problems}
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="0.5.10.post1")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=33)
    ap.add_argument("--old-route", action="store_true", help="also EAGLE on Triton's interpreter, unpatched")
    ap.add_argument("--workdir", type=Path, help="keep the tree and logs here (default: a temp dir)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="specops-torch-native-"))
    work.mkdir(parents=True, exist_ok=True)
    summary = run_check(args.version, args.requests, args.max_new_tokens, args.old_route, work)
    print(json.dumps(summary, indent=1))
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
