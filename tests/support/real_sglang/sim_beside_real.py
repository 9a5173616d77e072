"""The simulator's accept model beside the real engine's figures (issue 37): the same greedy
requests to one real SGLang EAGLE-3 server of the tier (the trained tiny head) and to the
simulator set to the measured accept length, 1, 2 and 4 at once; per level the tokens per
verify step (SGLang's accept length) and verify steps per token, from each server's own
`meta_info`, and the mean accept length of its `Decode batch` lines.

    python -m tests.support.real_sglang.sim_beside_real [--accept-length 3.0] [--tokens 32]

Prints one JSON document: {"real": {...}, "sim": {...}}. A diagnostic, not a test: it
starts a real server (a minute or two here).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path
from typing import Any

from specops.bench.running import parse_decode_lines
from specops.sglang.source import ensure_tree
from specops.sim.testing import run_sim
from tests.support.real_sglang import server as real
from tests.support.real_sglang.adaptive_check import LOG_EVERY_STEP, PROMPTS, _free_ports, concurrent
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import runtime_python

VERSION = "0.5.10.post1"
LEVELS = (1, 2, 4)
READY_TIMEOUT_S = 600.0


def measure(url: str, tokens: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for level in LEVELS:
        answers = concurrent(url, [(PROMPTS[i % len(PROMPTS)], tokens) for i in range(level)])
        made = sum(a["meta_info"]["completion_tokens"] for a in answers)
        verified = sum(a["meta_info"]["spec_verify_ct"] for a in answers)
        out[str(level)] = {"tokens": made, "verify_steps": verified, "accept_length": round(made / verified, 3),
                           "steps_per_token": round(verified / made, 3)}
    return out


def with_log_mean(figures: dict[str, Any], log: str) -> dict[str, Any]:
    accepts = parse_decode_lines(log).accept
    return {**figures, "decode_line_accept_mean": round(statistics.fmean(accepts), 3) if accepts else None}


def real_figures(tokens: int, work: Path) -> dict[str, Any]:
    models = ensure_models()
    port, nccl_port = _free_ports(2)
    with real.serve(runtime_python(), ensure_tree(VERSION), models.target, port, work / "real.log",
                    draft=models.draft, extra_args=LOG_EVERY_STEP, nccl_port=nccl_port) as server:
        server.wait_ready(READY_TIMEOUT_S)
        figures = measure(server.url, tokens)
        return with_log_mean(figures, server.log_text())


def sim_figures(tokens: int, accept_length: float, work: Path) -> dict[str, Any]:
    s = real.EAGLE3_SETTINGS
    args = ["--model-path", "target", "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "draft",
            "--speculative-num-steps", str(s["num_steps"]), "--speculative-eagle-topk", str(s["eagle_topk"]),
            "--speculative-num-draft-tokens", str(s["num_draft_tokens"]), *LOG_EVERY_STEP,
            "--sim-time-scale", "0.05", "--sim-accept-length", str(accept_length)]
    log = work / "sim.log"
    with run_sim(ensure_tree(VERSION), args, log_path=log) as sim:
        figures = measure(sim.url, tokens)
    return with_log_mean(figures, log.read_text())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accept-length", type=float, default=3.0, help="the simulator's accept length at batch 1")
    ap.add_argument("--tokens", type=int, default=32, help="greedy tokens per request")
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="specops-sim-beside-real-"))
    doc = {"real": real_figures(args.tokens, work), "sim": sim_figures(args.tokens, args.accept_length, work),
           "logs": str(work)}
    print(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
