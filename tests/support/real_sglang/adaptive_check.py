"""The dynamic-spec-disable patch set on a real SGLang server on this CPU.

    python -m tests.support.real_sglang.adaptive_check [--version 0.5.10.post1] [--spec-v2 | --both-workers]
        [--threshold 1] [--skip-off-extend] [--patch-set NAME|PATH] [--overlay DIR] [--workdir DIR]

Three servers get the same requests: `plain` (no speculation), `eagle3` (EAGLE-3 on the
release's own tree, unpatched) and `adaptive` (EAGLE-3 on a patched copy, launched with
`--speculative-disable-batch-threshold T`). Two phases: WIDE = T+2 concurrent greedy
requests (ignore_eos), one of them longer, so the running batch starts above T (drafting
off) and drops to 1 while the long one still decodes (drafting resumes mid-request on the
draft state the trivial steps kept); then NARROW = one request (drafting on).

Checks: every `output_ids` of adaptive and eagle3 equals plain's, token for token; the
adaptive log has transition lines only (off first, then alternating, each on the right side
of T, never one per step) and no crash; its `Decode batch` lines logged while drafting was
off say so in place of the accept figures (eagle3's carry no note); in NARROW adaptive drafts exactly as eagle3 does
(same spec_verify_ct and accepted draft tokens). Both EAGLE servers run the tier's trained
head (make_models.py), whose drafts the target accepts: in NARROW each EAGLE arm's accept
length (1 + accepted / verify steps, from meta_info) is at least MIN_ACCEPT, and the
adaptive arm's `Decode batch` lines logged right after drafting resumed in WIDE (the long
request, on the draft KV cache the one-token steps kept) show an accept length at least
RESUME_FLOOR times its NARROW one: a draft cache left stale while drafting was off shows
here as acceptance that does not come back. `--skip-off-extend` sets SGLang's switch
(SKIP_ZERO_STEP_EXTEND) on the adaptive arm: its drafting-off steps skip the draft extend,
which leaves that cache stale by design, so the resumed acceptance is reported, not checked;
every other check holds as without it.

The release's cached wheel tree is copied (never patched in place). Prints one JSON summary;
exit 0 when every check holds, 1 when one fails, 2 when the environment lacks something.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specops.bench.running import RESUMED_STEPS, off_stretches
from specops.decide.verify import RESUME_FLOOR
from specops.sglang.adaptive import ALL_OFF_NOTE, MIXED_RE, SKIP_ZERO_STEP_EXTEND, parse_transitions
from specops.sim.testing import free_ports
from tests.support.real_sglang import server as real
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import RuntimeBuildError, runtime_python
from tests.support.sglang_trees import apply_set, copy_tree

PATCH_SET = "dynamic-spec-disable"
PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model", "Hello there", "Once upon a time"]
SHORT, LONG, NARROW = 6, 20, 10  # max_new_tokens (LONG: RESUMED_STEPS whole steps left after the resume)
READY_TIMEOUT_S = 300.0
REQUEST_TIMEOUT_S = 900.0
#: SGLang logs "Decode batch" every 40 decode steps by default; these requests make at most 14
LOG_EVERY_STEP = ["--decode-log-interval", "1"]
#: what 0.5.x logs when SGLANG_ENABLE_SPEC_V2 turns the overlap scheduler on (the v2 worker
#: runs exactly then: speculative/spec_info.py picks it on `enable_overlap`)
OVERLAP_ON_LINE = "overlap schedule is turned on"
#: the CPU stand-ins for EAGLE's CUDA-only kernels say they were put in place (an EAGLE server
#: that ran without them would not be this tier's proof)
STANDIN_LINES = tuple(f"{real.STANDIN_LINE} sglang.srt.speculative.eagle_utils: {name} = CPU stand-in"
                      for name in ("sgl_build_tree_kernel_efficient", "verify_tree_greedy_func"))
#: accept length (of 1 + num_steps = 3) the trained head must show, and the share of it the
#: adaptive arm must show again right after drafting resumes (issue 37)
MIN_ACCEPT = 2.0
#: servers alive at once: the plain one beside the first pair, then the next pair as each ends
SERVERS_AT_ONCE = 3
FAILURE_MARKERS = ("Traceback (most recent call last)", "Scheduler hit an exception", "malloc", "core dumped",
                   "Segmentation fault")


def patched_tree(version: str, dest: Path, python: Path, patch_set: str) -> Path:
    """A copy of the release's cached tree with the patch set applied (its verify included)."""
    apply_set(patch_set, copy_tree(version, dest), python=str(python), tree=str(dest), run_verify_cmds=True)
    return dest


_PORTS_LOCK = threading.Lock()


def _free_ports(n: int) -> list[int]:
    """n distinct ports that bind now, from the tests' one picker (`specops.sim.testing.free_ports`):
    below the kernel's ephemeral range, where a port could be taken between this check and the
    server's bind by any outgoing connection or bind(0) of the servers running beside it (a
    0.5.9 server once lost port 40675 that way), walked in order so no port is handed out twice,
    and below 50000 (0.5.12 refuses an HTTP port whose gRPC port, +10000, passes 65535).
    Servers started side by side each ask for their own, one thread at a time."""
    with _PORTS_LOCK:
        return free_ports(n)


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
    # accepted draft tokens: `spec_accept_token_num` up to 0.5.10.x, `spec_num_correct_drafts` in 0.5.14
    accepted = meta.get("spec_accept_token_num", meta.get("spec_num_correct_drafts"))
    return {"ids": answer.get("output_ids"), "verify_ct": meta.get("spec_verify_ct"), "accepted": accepted}


def run_arm(name: str, python: Path, tree: Path, model: Path, draft: Path | None, extra: list[str],
            phases: dict[str, list[tuple[str, int]]], work: Path, spec_v2: bool,
            overlay: Path | None = None, more_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start one server, send each phase, stop it; what it answered and logged. `overlay`:
    a folder of packages a newer release imports that the runtime lacks (put last on the path)."""
    port, nccl_port = _free_ports(2)
    env = {"SGLANG_ENABLE_SPEC_V2": "1"} if spec_v2 and draft is not None else {}
    env.update(more_env or {})
    if overlay is not None:
        env["PYTHONPATH"] = real.arm_env(tree)["PYTHONPATH"] + os.pathsep + str(overlay)
    server = real.start(python, tree, model, port, work / f"{name}.log", draft=draft, extra_args=extra,
                        extra_env=env, nccl_port=nccl_port)
    return drive(server, phases)


def drive(server: real.Server, phases: dict[str, list[tuple[str, int]]],
          ready_timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
    """Wait for a started server, send each phase, stop it; what it answered and logged."""
    out: dict[str, Any] = {}
    try:
        out["ready_s"] = round(server.wait_ready(ready_timeout), 1)
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


def accept_length(answers: list[dict[str, Any]]) -> float | None:
    """Tokens per verify step over `answers` (each verify commits its accepted drafts + 1),
    from the server's own meta_info; None when none was verified."""
    verifies = sum(a.get("verify_ct") or 0 for a in answers)
    accepted = sum(a.get("accepted") or 0 for a in answers)
    return round((verifies + accepted) / verifies, 3) if verifies else None


def resumed_accept_lengths(log: str, threshold: int, steps: int = RESUMED_STEPS) -> list[float]:
    """The `accept len` of the first `steps` decode lines after drafting first resumed that ran
    at most `threshold` requests (specops verify's reading: bench.running.off_stretches)."""
    return next((list(s.after) for s in off_stretches(log, threshold, steps) if s.on_batch is not None), [])


def check_acceptance(arms: dict[str, dict[str, Any]], worker: str, resumed_warm: bool = True) -> list[str]:
    """Each EAGLE arm's NARROW accept length is at least MIN_ACCEPT (noted in the arm's
    summary); the adaptive arm's right after drafting resumed, at least RESUME_FLOOR of it
    (`resumed_warm`: its drafting-off steps kept the draft cache current)."""
    problems = []
    for name, arm in arms.items():
        arm["accept_len"] = accept_length(arm.get("narrow", []))
        if arm["accept_len"] is None or arm["accept_len"] < MIN_ACCEPT:
            problems.append(f"{name} ({worker}): accept length {arm['accept_len']} below {MIN_ACCEPT} "
                            "while drafting alone (NARROW)")
    adaptive = arms["adaptive"]
    resumed = adaptive.get("resumed_accept_lens") or []
    if not resumed_warm:
        return problems
    if not resumed or sum(resumed) / len(resumed) < RESUME_FLOOR * (adaptive["accept_len"] or 0.0):
        problems.append(f"adaptive ({worker}): accept length right after drafting resumed {resumed}, "
                        f"below {RESUME_FLOOR} x its NARROW {adaptive['accept_len']}")
    return problems


def check_decode_notes(log: str, name: str) -> list[str]:
    """The adaptive log's `Decode batch` lines logged while drafting was off (between an off
    transition and the next on) say so, in place of the accept figures (`--decode-log-interval 1`:
    one step a line); an unpatched arm's lines carry no note."""
    lines = [ln for ln in log.splitlines() if "Decode batch" in ln or "specops adaptive:" in ln]
    noted = [ln for ln in lines if ALL_OFF_NOTE in ln or MIXED_RE.search(ln)]
    if name != "adaptive":
        return [f"{name}: a decode line carries specops's note: {noted[0]}"] if noted else []
    problems, drafting, off_lines = [], True, 0
    for ln in lines:
        found = parse_transitions(ln)
        if found:
            drafting = found[0].drafting
            continue
        if not drafting:
            off_lines += 1
            if ALL_OFF_NOTE not in ln and not MIXED_RE.search(ln):
                problems.append(f"adaptive: a decode line logged while drafting was off has no note: {ln.strip()}")
        elif ALL_OFF_NOTE in ln:
            problems.append(f"adaptive: a decode line logged while drafting was on says all steps were off: {ln.strip()}")
    if not off_lines:
        problems.append("adaptive: no decode line was logged while drafting was off")
    return problems


def plain_incomplete(plain: dict[str, Any], phases: dict[str, list[tuple[str, int]]]) -> list[str]:
    """The plain server answered every request of every phase with tokens (what the others are held to)."""
    problems = []
    for phase, jobs in phases.items():
        want = [a.get("ids") for a in plain.get(phase, [])]
        if len(want) != len(jobs) or not all(isinstance(x, list) and x for x in want):
            problems.append(f"plain answered {phase} incompletely: {want}")
    return problems


def ids_differ(plain: dict[str, Any], arm: dict[str, Any], phases: dict[str, list[tuple[str, int]]],
               label: str) -> list[str]:
    """Each phase where `arm`'s output_ids are not plain's, request for request, token for token."""
    return [f"{label} output_ids differ from plain's in phase {phase}" for phase in phases
            if [a.get("ids") for a in arm.get(phase, [])] != [a.get("ids") for a in plain.get(phase, [])]]


def report(summary: dict[str, Any], keep: bool) -> int:
    """Print a check's summary; remove its workdir when every check held and `keep` is off;
    the exit status (0 ok, 1 a check failed)."""
    print(json.dumps(summary, indent=1))
    if not (keep or summary["problems"]):
        shutil.rmtree(summary["workdir"], ignore_errors=True)
    return 0 if summary["ok"] else 1


def run_check(version: str, threshold: int = 1, workers: tuple[bool, ...] = (False,), patch_set: str = PATCH_SET,
              overlay: Path | None = None, work: Path | None = None, skip_off_extend: bool = False) -> dict[str, Any]:
    """The three servers' run (see the module's docstring) for each EAGLE worker in `workers`
    (False: v1, True: the v2 worker with the overlap scheduler), sharing one plain server;
    a summary whose `problems` lists every check that failed (`ok` when none). `skip_off_extend`:
    the adaptive arm's drafting-off steps skip the draft extend (SGLang's switch)."""
    adaptive_env = {SKIP_ZERO_STEP_EXTEND: "1"} if skip_off_extend else {}
    python = runtime_python()
    models = ensure_models()
    work = work or Path(tempfile.mkdtemp(prefix="specops-adaptive-check-"))
    work.mkdir(parents=True, exist_ok=True)
    n = threshold + 2
    phases = {"wide": [(p, LONG if i == 0 else SHORT) for i, p in enumerate(PROMPTS[:n])],
              "narrow": [(PROMPTS[0], NARROW)]}
    summary: dict[str, Any] = {"version": version, "threshold": threshold, "patch_set": patch_set,
                               "phases": phases, "workdir": str(work), "adaptive_env": adaptive_env}
    problems: list[str] = []
    try:
        pristine = copy_tree(version, work / f"sglang-{version}-pristine")
        patched = patched_tree(version, work / f"sglang-{version}-patched", python, patch_set)
        draft = models.draft
        # every server of the run through one pool, at most SERVERS_AT_ONCE alive (each its own
        # process): on 2 cores a server's start and its interpreted Triton steps leave room for
        # others, so the plain server starts beside the first pair and the second worker's pair
        # as soon as the plain one is done. Each server answers its own requests, so nothing
        # they check depends on another.
        with ThreadPoolExecutor(SERVERS_AT_ONCE) as pool:
            plain_job = pool.submit(run_arm, "plain", python, pristine, models.target, None, LOG_EVERY_STEP, phases,
                                    work, False, overlay)
            jobs = {}
            for spec_v2 in workers:
                worker = "v2" if spec_v2 else "v1"
                jobs[worker] = {
                    "eagle3": pool.submit(run_arm, f"eagle3-{worker}", python, pristine, models.target, draft,
                                          LOG_EVERY_STEP, phases, work, spec_v2, overlay),
                    "adaptive": pool.submit(run_arm, f"adaptive-{worker}", python, patched, models.target, draft,
                                            [*LOG_EVERY_STEP, "--speculative-disable-batch-threshold", str(threshold)],
                                            phases, work, spec_v2, overlay, adaptive_env)}
            plain = plain_job.result()
            plain.pop("log")
            summary["plain"] = plain
            if "error" in plain:
                raise RuntimeError(f"the plain server failed: {plain['error']}")
            done = {worker: {name: job.result() for name, job in arms.items()} for worker, arms in jobs.items()}
        for worker, arms in done.items():
            for name, arm in arms.items():
                log = arm.pop("log")
                problems += [f"{name} ({worker}) log lacks {line!r}" for line in STANDIN_LINES if line not in log]
                summary[f"{name}-{worker}"] = arm
                if "error" in arm or not arm.get("alive_after"):
                    problems.append(f"{name} ({worker}): {arm.get('error', 'server died')}")
                arm["overlap"] = OVERLAP_ON_LINE in log
                if name == "adaptive":
                    arm["transition_lines"] = [ln.strip() for ln in log.splitlines() if "specops adaptive:" in ln]
                    arm["resumed_accept_lens"] = resumed_accept_lengths(log, threshold)
                    problems += [f"adaptive ({worker}) log has {m!r}" for m in FAILURE_MARKERS if m in log]
                    problems += [f"{p} ({worker})" for p in check_transitions(log, threshold)]
                elif parse_transitions(log):
                    problems.append(f"{name} ({worker}) logged transition lines")
                problems += [f"{p} ({worker})" for p in check_decode_notes(log, name)]
            problems += plain_incomplete(plain, phases)
            for name, arm in arms.items():
                problems += ids_differ(plain, arm, phases, f"{name} ({worker})")
            problems += check_acceptance(arms, worker, resumed_warm=not skip_off_extend)
            spec = [(a.get("verify_ct"), a.get("accepted")) for a in arms["eagle3"].get("narrow", [])]
            if [(a.get("verify_ct"), a.get("accepted")) for a in arms["adaptive"].get("narrow", [])] != spec:
                problems.append(f"below the threshold adaptive ({worker}) did not draft as eagle3 does "
                                "(verify_ct, accepted differ)")
    except Exception as exc:  # noqa: BLE001 - one summary, whatever broke
        problems.append(f"{type(exc).__name__}: {exc}")
    summary["problems"] = problems
    summary["ok"] = not problems
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--version", default="0.5.10.post1")
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--spec-v2", action="store_true", help="EAGLE v2 worker only (SGLANG_ENABLE_SPEC_V2=1)")
    ap.add_argument("--both-workers", action="store_true", help="v1, then the v2 worker, sharing the plain server")
    ap.add_argument("--skip-off-extend", action="store_true",
                    help=f"the adaptive arm's drafting-off steps skip the draft extend ({SKIP_ZERO_STEP_EXTEND}=1)")
    ap.add_argument("--patch-set", default=PATCH_SET, help="a set name or YAML path (to reproduce an old set)")
    ap.add_argument("--overlay", type=Path, help="extra packages for a newer release (pip install --target DIR)")
    ap.add_argument("--workdir", type=Path, help="keep trees and logs here (default: a temp dir, removed on success)")
    args = ap.parse_args(argv)
    workers = (False, True) if args.both_workers else (args.spec_v2,)
    try:
        summary = run_check(args.version, args.threshold, workers, args.patch_set, args.overlay, args.workdir,
                            args.skip_off_extend)
    except RuntimeBuildError as exc:
        print(f"adaptive_check: {exc}", file=sys.stderr)
        return 2
    return report(summary, keep=bool(args.workdir))


if __name__ == "__main__":
    sys.exit(main())
