"""The dynamic-spec-disable patch set on a real SGLang server on this CPU.

    python -m tests.support.real_sglang.adaptive_check [--version 0.5.10.post1] [--spec-v2]
        [--threshold 1] [--patch-set NAME|PATH] [--overlay DIR] [--workdir DIR]

Three servers get the same requests: `plain` (no speculation), `eagle3` (EAGLE-3 on the
release's own tree, unpatched) and `adaptive` (EAGLE-3 on a patched copy, launched with
`--speculative-disable-batch-threshold T`). Two phases: WIDE = T+2 concurrent greedy
requests (ignore_eos), one of them longer, so the running batch starts above T (drafting
off) and drops to 1 while the long one still decodes (drafting resumes mid-request on the
draft state the trivial steps kept); then NARROW = one request (drafting on).

Checks: every `output_ids` of adaptive and eagle3 equals plain's, token for token; the
adaptive log has transition lines only (off first, then alternating, each on the right side
of T, never one per step) and no crash; in NARROW adaptive drafts exactly as eagle3 does
(same spec_verify_ct and accepted draft tokens). So that drafting is visible in those
counts, both EAGLE servers use an "echo" draft: the tiny EAGLE-3 head rewired to always
propose the token the plain server repeats most, so drafting accepts tokens wherever the
target repeats it and a trivial step accepts none.

The release's cached wheel tree is copied (never patched in place). Prints one JSON summary;
exit 0 when every check holds, 1 when one fails, 2 when the environment lacks something.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from specops.patching import apply, load_patchset
from specops.servers.adaptive import parse_transitions
from specops.sglang.source import ensure_tree
from specops.sglang.treefiles import LocalTreeFiles
from tests.support.real_sglang import server as real
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import RuntimeBuildError, runtime_python

PATCH_SET = "dynamic-spec-disable"
PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model", "Hello there", "Once upon a time"]
SHORT, LONG, NARROW = 6, 14, 10  # max_new_tokens
READY_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 900.0
FAILURE_MARKERS = ("Traceback (most recent call last)", "Scheduler hit an exception", "malloc", "core dumped",
                   "Segmentation fault")

#: Rewire the tiny EAGLE-3 head (argv: src dir, dest dir, target token) so that it always
#: proposes that token: the final norm keeps one channel, lm_head rows 0/1 read it with
#: opposite signs (so one of them wins whatever its sign), and d2t maps both to the token.
ECHO_DRAFT = r"""
import shutil, sys, torch
from safetensors.torch import load_file, save_file
src, dest, token = sys.argv[1], sys.argv[2], int(sys.argv[3])
shutil.copytree(src, dest)
sd = load_file(f"{src}/model.safetensors")
norm = torch.zeros_like(sd["norm.weight"]); norm[0] = 1.0
head = torch.zeros_like(sd["lm_head.weight"]); head[0, 0] = 100.0; head[1, 0] = -100.0
d2t = torch.zeros_like(sd["d2t"]); d2t[0] = token; d2t[1] = token - 1
sd.update({"norm.weight": norm, "lm_head.weight": head, "d2t": d2t})
save_file(sd, f"{dest}/model.safetensors")
"""


def copy_tree(version: str, dest: Path) -> Path:
    shutil.copytree(ensure_tree(version), dest, symlinks=True)
    return dest


def patched_tree(version: str, dest: Path, python: Path, patch_set: str) -> Path:
    """A copy of the release's cached tree with the patch set applied (its verify included)."""
    copy_tree(version, dest)
    apply(load_patchset(patch_set), LocalTreeFiles(dest), python=str(python), tree=str(dest))
    return dest


def echo_draft(python: Path, src: Path, dest: Path, token: int) -> Path:
    subprocess.run([str(python), "-c", ECHO_DRAFT, str(src), str(dest), str(token)], check=True, timeout=300,
                   capture_output=True)
    return dest


def _free_ports(n: int) -> list[int]:
    """n distinct ports that bind now, below 50000: 0.5.12 refuses an HTTP port whose gRPC
    port (+10000) passes 65535, and the nccl port keeps the scheduler off the OS's pick."""
    out: list[int] = []
    while len(out) < n:
        port = random.randrange(20000, 50000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        if port not in out:
            out.append(port)
    return out


def generate(url: str, prompt: str, max_new_tokens: int) -> dict[str, Any]:
    body = json.dumps({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": max_new_tokens,
                                                           "ignore_eos": True}}).encode()
    req = urllib.request.Request(f"{url}/generate", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=REQUEST_TIMEOUT_S) as resp:
        return json.loads(resp.read())


def concurrent(url: str, jobs: list[tuple[str, int]]) -> list[dict[str, Any]]:
    """Send every (prompt, max_new_tokens) at once, one thread each; answers in job order."""
    out: list[Any] = [None] * len(jobs)
    barrier = threading.Barrier(len(jobs))

    def one(i: int) -> None:
        barrier.wait()
        try:
            out[i] = generate(url, *jobs[i])
        except Exception as exc:  # noqa: BLE001 - reported in the summary
            out[i] = {"error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _brief(answer: dict[str, Any]) -> dict[str, Any]:
    if "error" in answer:
        return {"error": answer["error"]}
    meta = answer.get("meta_info", {})
    return {"ids": answer.get("output_ids"), "verify_ct": meta.get("spec_verify_ct"),
            "accepted": meta.get("spec_accept_token_num")}


def run_arm(name: str, python: Path, tree: Path, model: Path, draft: Path | None, extra: list[str],
            phases: dict[str, list[tuple[str, int]]], work: Path, spec_v2: bool,
            overlay: Path | None = None) -> dict[str, Any]:
    """Start one server, send each phase, stop it; what it answered and logged. `overlay`:
    a folder of packages a newer release imports that the runtime lacks (put last on the path)."""
    port, nccl_port = _free_ports(2)
    env = {"SGLANG_ENABLE_SPEC_V2": "1"} if spec_v2 and draft is not None else {}
    if overlay is not None:
        env["PYTHONPATH"] = real.arm_env(tree)["PYTHONPATH"] + os.pathsep + str(overlay)
    server = real.start(python, tree, model, port, work / f"{name}.log", draft=draft, extra_args=extra,
                        extra_env=env, nccl_port=nccl_port)
    out: dict[str, Any] = {}
    try:
        out["ready_s"] = round(server.wait_ready(READY_TIMEOUT_S), 1)
        for phase, jobs in phases.items():
            t0 = time.monotonic()
            out[phase] = [_brief(a) for a in concurrent(server.url, jobs)]
            out[f"{phase}_s"] = round(time.monotonic() - t0, 1)
        out["alive_after"] = server.proc.poll() is None
    except Exception as exc:  # noqa: BLE001 - reported in the summary
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        server.stop()
        out["log"] = server.log_text()
    return out


def check_transitions(log: str, threshold: int) -> list[str]:
    """An `off` line first, an `on` line among them, strictly alternating (a line per step
    would repeat a state), each on its side of the threshold."""
    found = parse_transitions(log)
    problems = []
    if not found or found[0].drafting or all(not t.drafting for t in found):
        problems.append(f"expected a drafting-off line first and a drafting-on line after it, got {found}")
    for a, b in zip(found, found[1:], strict=False):
        if a.drafting == b.drafting:
            problems.append(f"two {'on' if a.drafting else 'off'} lines in a row (not transitions only): {a}, {b}")
    for t in found:
        if (t.batch > threshold) == t.drafting or t.threshold != threshold:
            problems.append(f"line on the wrong side of threshold {threshold}: {t}")
    return problems


def _repeated_token(plain: dict[str, Any], phases: list[str]) -> int:
    counts: collections.Counter[int] = collections.Counter()
    for phase in phases:
        for answer in plain.get(phase, []):
            counts.update(answer.get("ids") or [])
    if not counts:
        raise RuntimeError("the plain server returned no output ids")
    return counts.most_common(1)[0][0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="0.5.10.post1")
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--spec-v2", action="store_true", help="EAGLE v2 worker (SGLANG_ENABLE_SPEC_V2=1)")
    ap.add_argument("--patch-set", default=PATCH_SET, help="a set name or YAML path (to reproduce an old set)")
    ap.add_argument("--overlay", type=Path, help="extra packages for a newer release (pip install --target DIR)")
    ap.add_argument("--workdir", type=Path, help="keep trees and logs here (default: a temp dir, removed on success)")
    args = ap.parse_args(argv)
    try:
        python = runtime_python()
        models = ensure_models()
    except RuntimeBuildError as exc:
        print(f"adaptive_check: {exc}", file=sys.stderr)
        return 2
    work = args.workdir or Path(tempfile.mkdtemp(prefix="specops-adaptive-check-"))
    work.mkdir(parents=True, exist_ok=True)
    n = args.threshold + 2
    phases = {"wide": [(p, LONG if i == 0 else SHORT) for i, p in enumerate(PROMPTS[:n])],
              "narrow": [(PROMPTS[0], NARROW)]}
    summary: dict[str, Any] = {"version": args.version, "threshold": args.threshold, "spec_v2": args.spec_v2,
                               "patch_set": args.patch_set, "phases": phases, "workdir": str(work)}
    problems: list[str] = []
    try:
        pristine = copy_tree(args.version, work / f"sglang-{args.version}-pristine")
        patched = patched_tree(args.version, work / f"sglang-{args.version}-patched", python, args.patch_set)
        arms: dict[str, dict[str, Any]] = {}
        arms["plain"] = run_arm("plain", python, pristine, models.target, None, [], phases, work, args.spec_v2,
                                 args.overlay)
        if "error" in arms["plain"]:
            raise RuntimeError(f"the plain server failed: {arms['plain']['error']}")
        token = _repeated_token(arms["plain"], list(phases))
        draft = echo_draft(python, models.draft, work / "echo-draft", token)
        summary["echo_token"] = token
        arms["eagle3"] = run_arm("eagle3", python, pristine, models.target, draft, [], phases, work, args.spec_v2,
                                  args.overlay)
        arms["adaptive"] = run_arm("adaptive", python, patched, models.target, draft,
                                   ["--speculative-disable-batch-threshold", str(args.threshold)], phases, work,
                                   args.spec_v2, args.overlay)
        for name, arm in arms.items():
            log = arm.pop("log")
            summary[name] = arm
            if "error" in arm or not arm.get("alive_after"):
                problems.append(f"{name}: {arm.get('error', 'server died')}")
            if name == "adaptive":
                summary["transition_lines"] = [ln.strip() for ln in log.splitlines() if "specops adaptive:" in ln]
                problems += [f"adaptive log has {m!r}" for m in FAILURE_MARKERS if m in log]
                problems += check_transitions(log, args.threshold)
            elif parse_transitions(log):
                problems.append(f"{name} logged transition lines")
        for phase in phases:
            want = [a.get("ids") for a in arms["plain"].get(phase, [])]
            if len(want) != len(phases[phase]) or not all(isinstance(x, list) and x for x in want):
                problems.append(f"plain answered {phase} incompletely: {want}")
            for name in ("eagle3", "adaptive"):
                if [a.get("ids") for a in arms[name].get(phase, [])] != want:
                    problems.append(f"{name} output_ids differ from plain's in phase {phase}")
        spec = [(a.get("verify_ct"), a.get("accepted")) for a in arms["eagle3"].get("narrow", [])]
        if [(a.get("verify_ct"), a.get("accepted")) for a in arms["adaptive"].get("narrow", [])] != spec:
            problems.append("below the threshold adaptive did not draft as eagle3 does (verify_ct, accepted differ)")
    except Exception as exc:  # noqa: BLE001 - one summary, whatever broke
        problems.append(f"{type(exc).__name__}: {exc}")
    summary["problems"] = problems
    summary["ok"] = not problems
    print(json.dumps(summary, indent=1))
    if not (args.workdir or problems):
        shutil.rmtree(work, ignore_errors=True)
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
