"""Do the tier's tiny EAGLE-3 drafts get accepted on a real SGLang server? (issue 37, part 1)

    python -m tests.support.real_sglang.accept_check [--version 0.5.10.post1] [--max-new-tokens 16]
        [--no-sequential] [--spec-v2] [--workdir DIR]

Starts, one after the other, with the tier's launcher (server.start: cpu_flags, eagle3_flags):
`plain` (no speculation, torch_native attention) and `eagle3` (the tiny EAGLE-3 head, Triton
attention under its interpreter, num_steps 2, topk 1, 3 draft tokens), both with
`--decode-log-interval 1`. Each gets the same greedy requests (temperature 0, ignore_eos):
the tier's prompts (adaptive_check.PROMPTS) and sentence-like ones, first all at once (one
batch), then one at a time (batch size 1), unless --no-sequential. --spec-v2: the EAGLE
server runs the v2 worker (SGLANG_ENABLE_SPEC_V2=1, the overlap scheduler on).

Prints one JSON summary: per request the accept length from meta_info
(1 + spec_accept_token_num / spec_verify_ct: drafted tokens accepted per verify, plus the
target's own token) and SGLang's `spec_accept_length` (completion tokens / verifies); the
overall accept length; the `accept len` of every EAGLE `Decode batch` line and their mean;
and whether every output equals plain's (concurrent and sequential, both servers), with the
first differing position when one does not. Exit 0 when outputs are identical and the overall
accept length is at least --min-accept (default 2.0), 1 otherwise, 2 when the runtime is
missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from specops.bench.running import parse_decode_lines
from specops.sglang.source import ensure_tree
from tests.support.real_sglang import server as real
from tests.support.real_sglang.adaptive_check import (
    LOG_EVERY_STEP,
    PROMPTS,
    _free_ports,
    accept_length,
    concurrent,
    generate,
)
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import RuntimeBuildError, runtime_python

#: sentence-like prompts the head was not trained on word for word (make_models.HEAD_PROMPTS
#: holds the tier's prompts, some openings and random windows of the text)
SENTENCE_PROMPTS = ["The server answers requests", "Benchmarks measure throughput", "A tree of draft tokens",
                    "Every experiment records", "Greedy decoding always picks", "The quick brown fox jumps over",
                    # the last word (Alice or Bob) depends on the day, ~15 tokens back
                    "On Monday the first server", "On Friday the second server"]
READY_TIMEOUT_S = 300.0


def first_difference(a: list[int] | None, b: list[int] | None) -> int | None:
    """The first position where two id lists differ (or where one ends), None when equal."""
    a, b = a or [], b or []
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _answers(url: str, prompts: list[str], max_new: int, sequential: bool) -> dict[str, list[dict[str, Any]]]:
    out = {"concurrent": concurrent(url, [(p, max_new) for p in prompts])}
    if sequential:
        out["sequential"] = []
        for p in prompts:
            try:
                out["sequential"].append(generate(url, p, max_new))
            except Exception as exc:  # noqa: BLE001 - reported in the summary
                out["sequential"].append({"error": f"{type(exc).__name__}: {exc}"})
    return out


def run_server(name: str, python: Path, tree: Path, model: Path, draft: Path | None, prompts: list[str],
               max_new: int, sequential: bool, work: Path, spec_v2: bool = False) -> dict[str, Any]:
    port, nccl_port = _free_ports(2)
    env = {"SGLANG_ENABLE_SPEC_V2": "1"} if spec_v2 and draft is not None else {}
    server = real.start(python, tree, model, port, work / f"{name}.log", draft=draft, extra_args=LOG_EVERY_STEP,
                        extra_env=env, nccl_port=nccl_port)
    out: dict[str, Any] = {}
    try:
        out["ready_s"] = round(server.wait_ready(READY_TIMEOUT_S), 1)
        t0 = time.monotonic()
        out["answers"] = _answers(server.url, prompts, max_new, sequential)
        out["requests_s"] = round(time.monotonic() - t0, 1)
    except Exception as exc:  # noqa: BLE001 - reported in the summary
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        server.stop()
        out["log"] = server.log_text()
    return out


def accept_of(answer: dict[str, Any]) -> dict[str, Any]:
    meta = answer.get("meta_info", {})
    verify, accepted = meta.get("spec_verify_ct"), meta.get("spec_accept_token_num")
    return {"verify_ct": verify, "accepted": accepted,
            "accept_len": accept_length([{"verify_ct": verify, "accepted": accepted}]),
            "sglang_spec_accept_length": meta.get("spec_accept_length")}


def run_check(version: str, max_new: int, sequential: bool, min_accept: float, work: Path,
              spec_v2: bool = False) -> dict[str, Any]:
    python = runtime_python()
    models = ensure_models()
    build = models.root / "build.json"
    tree = ensure_tree(version)
    prompts = PROMPTS + SENTENCE_PROMPTS
    summary: dict[str, Any] = {"version": version, "worker": "v2" if spec_v2 else "v1", "max_new_tokens": max_new, "prompts": prompts,
                               "settings": real.EAGLE3_SETTINGS, "workdir": str(work),
                               "models": str(models.root),
                               "build": json.loads(build.read_text()) if build.is_file() else None}
    problems: list[str] = []
    servers = {}
    for name, draft in (("plain", None), ("eagle3", models.draft)):
        arm = run_server(name, python, tree, models.target, draft, prompts, max_new, sequential, work, spec_v2)
        log = arm.pop("log")
        if "error" in arm:
            problems.append(f"{name}: {arm['error']}")
        servers[name] = arm
        summary[f"{name}_ready_s"] = arm.get("ready_s")
        summary[f"{name}_requests_s"] = arm.get("requests_s")
        if name == "eagle3":
            lens = parse_decode_lines(log).accept
            summary["decode_line_accept_len"] = lens
            summary["decode_line_accept_len_mean"] = round(sum(lens) / len(lens), 3) if lens else None
    plain, eagle = servers["plain"].get("answers", {}), servers["eagle3"].get("answers", {})
    want = plain.get("concurrent", [])
    texts, identity, differs = {}, True, []
    for mode in ("concurrent", "sequential"):
        for server_name, answers in (("plain", plain), ("eagle3", eagle)):
            if (server_name, mode) == ("plain", "concurrent") or mode not in answers:
                continue
            for prompt, got, ref in zip(prompts, answers[mode], want, strict=False):
                pos = first_difference(got.get("output_ids"), ref.get("output_ids"))
                if pos is not None or "error" in got:
                    identity = False
                    differs.append({"server": server_name, "mode": mode, "prompt": prompt, "first_diff": pos,
                                    "error": got.get("error")})
    for prompt, ref in zip(prompts, want, strict=False):
        texts[prompt] = ref.get("text")
    per_request = {mode: [{"prompt": p, **accept_of(a)} for p, a in zip(prompts, answers, strict=False)]
                   for mode, answers in eagle.items()}
    overall = accept_length([r for rows in per_request.values() for r in rows])
    summary.update({"plain_texts": texts, "accept_per_request": per_request, "accept_len_overall": overall,
                    "identical": identity and bool(want), "differences": differs})
    if not want or not all(isinstance(a.get("output_ids"), list) for a in want):
        problems.append("plain answered incompletely")
    if not identity:
        problems.append(f"outputs differ from plain's: {differs[:3]}")
    if overall is None or overall < min_accept:
        problems.append(f"overall accept length {overall} < {min_accept}")
    summary["problems"] = problems
    summary["ok"] = not problems
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="0.5.10.post1")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--min-accept", type=float, default=2.0)
    ap.add_argument("--no-sequential", action="store_true", help="only the concurrent batch")
    ap.add_argument("--spec-v2", action="store_true", help="the EAGLE v2 worker (SGLANG_ENABLE_SPEC_V2=1)")
    ap.add_argument("--workdir", type=Path, help="keep logs here (default: a temp dir, removed on success)")
    args = ap.parse_args(argv)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="specops-accept-check-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        summary = run_check(args.version, args.max_new_tokens, not args.no_sequential, args.min_accept, work,
                            args.spec_v2)
    except RuntimeBuildError as exc:
        print(f"accept_check: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(summary, indent=1))
    if not (args.workdir or summary["problems"]):
        shutil.rmtree(work, ignore_errors=True)
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
