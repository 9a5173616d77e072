"""SGLang's native adaptive speculation (0.5.14+) on a real server on this CPU, launched as
specops launches it.

    python -m tests.support.real_sglang.native_check [--version 0.5.14] [--threshold 1] [--workdir DIR]

specops' adaptive arm on a release with zero-step tiers does not patch: it launches
`--speculative-adaptive --speculative-adaptive-config cfg.json` with a tier config it
generates (specops/sglang/adaptive.py `adaptive_config`), whose tier above the threshold has
`"candidate_steps": [0]`. Here both servers come from specops' own planning
(`specops.servers.plans.plan_arms`, what `specops deploy` / `launch` run: the tree's layout,
its CUDA-graph bucket sources, `build_launch`), on the release's cached wheel tree with the
runtime that release pins (runtime.py, "0.5.14"): `plain` (no speculation) and `adaptive`
(EAGLE-3 with the trained tiny head, num_steps 2, topk 1, threshold T, `--decode-log-interval 1`).

Both get the same greedy requests as adaptive_check's (same phases): WIDE = T+2 at once,
one longer, so the running batch starts above T (the zero-step tier) and drops to 1 while
the long one still decodes (drafting resumes mid-request); then NARROW = one request.

Checks: the plan is the native route (mechanism `native-adaptive`, a zero-step tier in the
written config); every `output_ids` of adaptive equals plain's, token for token; SGLang's own
switch lines (`Switch adaptive runtime state: steps N -> 0` and back, read by specops'
`parse_step_switches`) show drafting went off under WIDE and came back, changes only; the
adaptive log shows a decode step with more than T running requests; in NARROW the accept
length (1 + accepted / verify steps, from the server's meta_info) is at least MIN_ACCEPT;
the CPU stand-ins were in place; no crash.

Prints one JSON summary; exit 0 when every check holds, 1 when one fails, 2 when the
environment lacks something.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specops.bench.running import RESUMED_STEPS
from specops.config.inventory import Host
from specops.decide.verify import RESUME_FLOOR
from specops.servers.launch import LaunchPlan
from specops.servers.plans import plan_arms
from specops.sglang.adaptive import STEP_SWITCH_RE, parse_step_switches, parse_transitions
from specops.sglang.serving import ALL_FINISHED_RE, DECODE_RE
from specops.sglang.source import ensure_tree
from specops.transport.local import LocalTransport
from tests.support.real_sglang import server as real
from tests.support.real_sglang.adaptive_check import (
    FAILURE_MARKERS,
    LOG_EVERY_STEP,
    LONG,
    MIN_ACCEPT,
    NARROW,
    PROMPTS,
    SHORT,
    _free_ports,
    accept_length,
    drive,
    ids_differ,
    plain_incomplete,
    report,
)
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import RuntimeBuildError, ensure_runtime

VERSION = "0.5.14"
#: what 0.5.14 logs once its tiers are read (steps of the first tier, then its candidates)
INITIALIZED_LINE = "AdaptiveSpeculativeParams initialized: steps={steps}, candidate_steps=[{steps}]"
#: the CPU stand-ins an EAGLE server of 0.5.14 needs (its verify and its v2 cache locations)
STANDIN_LINES = tuple(f"{real.STANDIN_LINE} {module}: {name} = CPU stand-in" for module, name in (
    ("sglang.srt.speculative.eagle_utils", "verify_tree_greedy_func"),
    ("sglang.srt.speculative.triton_ops.cache_locs", "assign_extend_cache_locs_func")))
#: 0.5.14's servers got ready here in 56 s (both at once, cold byte-code cache) and 21 s (warm);
#: 101-125 s were measured for the EAGLE one before. Two start at once, beside whatever else the
#: machine runs: a deadline, not an expectation
READY_TIMEOUT_S = 1200.0
#: faults a run can be told to make, to show its checks catch them: `no-zero-tier` launches the
#: adaptive arm with the generated config's zero-step tiers given the arm's num_steps (SGLang
#: then drafts at every batch: no switch line); `break-accept` breaks the adaptive arm's
#: accept path (the stand-in verify commits a wrong token: specops_cpu_spec_kernels)
FAULTS = ("no-zero-tier", "break-accept")


def plans(tree: Path, python_venv: Path, models: Any, work: Path, threshold: int,
          faults: tuple[str, ...] = ()) -> dict[str, LaunchPlan]:
    """specops' launch plans for a plain and an adaptive arm on `tree`, as deploy makes them
    (then the `faults` asked for, made on the adaptive arm's plan)."""
    (port, nccl), (aport, anccl) = _free_ports(2), _free_ports(2)
    adaptive = real.arm_profile("adaptive", models.target, port=aport, draft=models.draft, tree=tree, nccl_port=anccl)
    adaptive["threshold"] = threshold
    adaptive["extra_args"] = [*adaptive["extra_args"], *LOG_EVERY_STEP]  # type: ignore[list-item]
    if "break-accept" in faults:
        flag = work / "break-accept"
        flag.parent.mkdir(parents=True, exist_ok=True)
        flag.touch()
        adaptive["env"] = {**adaptive["env"], real.BREAK_ACCEPT_ENV: str(flag)}  # type: ignore[dict-item]
    arms = {"plain": real.arm_profile("baseline", models.target, port=port, tree=tree, nccl_port=nccl),
            "adaptive": adaptive}
    host = Host(name="cpu", connection="local", workdir=str(work), device="cpu")
    variables = {"arms": arms, "workdir": str(work), "sglang_venv": str(python_venv)}
    planned = {p.arm: p for p in plan_arms(LocalTransport(), host, variables, list(arms), str(tree))}
    if "no-zero-tier" in faults and planned["adaptive"].config_json:
        config = json.loads(planned["adaptive"].config_json)
        for tier in config.values():
            tier["candidate_steps"] = [s or real.EAGLE3_SETTINGS["num_steps"] for s in tier["candidate_steps"]]
        planned["adaptive"].config_json = json.dumps(config, indent=2, sort_keys=True) + "\n"
    return planned


def check_plan(plan: LaunchPlan, threshold: int) -> list[str]:
    """The adaptive arm takes the native route with a zero-step tier above `threshold`."""
    problems = []
    if plan.mechanism != "native-adaptive" or not plan.config_json:
        return [f"adaptive arm planned as {plan.mechanism!r}, not native-adaptive with a config"]
    tiers = {int(k): v["candidate_steps"] for k, v in json.loads(plan.config_json).items()}
    if not any(steps == [0] for key, steps in tiers.items() if key > threshold):
        problems.append(f"the generated config has no zero-step tier above threshold {threshold}: {tiers}")
    if plan.effective_threshold != threshold:
        problems.append(f"effective threshold {plan.effective_threshold}, asked {threshold}")
    return problems


def check_switches(log: str, num_steps: int, threshold: int) -> list[str]:
    """SGLang's native switch lines: `steps N -> 0` first, `0 -> N` after it, each a change
    (alternating, never one per step); a decode step ran more than `threshold` requests (the
    batch really was above it); none of the patch route's transition lines."""
    switches = parse_step_switches(log)
    problems = []
    if not switches or switches[0].old != num_steps or switches[0].new != 0:
        problems.append(f"expected a 'steps {num_steps} -> 0' switch line first, got {switches}")
    if not any(s.old == 0 and s.new == num_steps for s in switches):
        problems.append(f"no 'steps 0 -> {num_steps}' switch line (drafting never came back): {switches}")
    for a, b in zip(switches, switches[1:], strict=False):
        if a.new != b.old or a.drafting == b.drafting:
            problems.append(f"switch lines do not alternate: {a}, {b}")
    if not any(int(m[1]) > threshold for m in DECODE_RE.finditer(log)):
        problems.append(f"no decode step ran more than {threshold} requests (WIDE never went wide)")
    if parse_transitions(log):
        problems.append("the native arm logged the patch route's transition lines")
    return problems


def resumed_accept_lengths(log: str, num_steps: int, threshold: int, steps: int = RESUMED_STEPS) -> list[float]:
    """The accept lengths of the first `steps` decode lines after the first `steps 0 -> N`
    switch that ran at most `threshold` requests and did not finish them all (`#token: 0`:
    max_new_tokens cut that step), as specops verify reads the patch route's
    (bench.running.off_stretches): a draft cache left stale while the zero-step tier ran shows
    here as acceptance that does not come back."""
    back = next((m for m in STEP_SWITCH_RE.finditer(log) if int(m["old"]) == 0 and int(m["new"]) == num_steps), None)
    if back is None:
        return []
    out = []
    for line in log[back.end():].splitlines():
        m = DECODE_RE.search(line)
        if m and m[2] and int(m[1]) <= threshold and not ALL_FINISHED_RE.search(line):
            out.append(float(m[2]))
            if len(out) == steps:
                break
    return out


def compare(plain: dict[str, Any], adaptive: dict[str, Any], phases: dict[str, list[tuple[str, int]]]) -> list[str]:
    """adaptive's output_ids equal plain's, phase by phase, request by request; plain answered all."""
    return plain_incomplete(plain, phases) + ids_differ(plain, adaptive, phases, "adaptive")


def run_native_check(version: str = VERSION, threshold: int = 1, work: Path | None = None,
                     faults: tuple[str, ...] = ()) -> dict[str, Any]:
    """The two servers' run (see the module's docstring), with the `faults` asked for; a
    summary whose `problems` lists every check that failed (`ok` when none)."""
    runtime = ensure_runtime(version)
    models = ensure_models()
    tree = ensure_tree(version)
    work = work or Path(tempfile.mkdtemp(prefix="specops-native-check-"))
    work.mkdir(parents=True, exist_ok=True)
    phases = {"wide": [(p, LONG if i == 0 else SHORT) for i, p in enumerate(PROMPTS[:threshold + 2])],
              "narrow": [(PROMPTS[0], NARROW)]}
    summary: dict[str, Any] = {"version": version, "threshold": threshold, "phases": phases, "workdir": str(work),
                               "runtime": str(runtime.root), "faults": list(faults)}
    problems: list[str] = []
    try:
        planned = plans(tree, runtime.root, models, work, threshold, faults)
        summary["adaptive_argv"] = planned["adaptive"].argv
        summary["adaptive_config"] = json.loads(planned["adaptive"].config_json or "null")
        problems += check_plan(planned["adaptive"], threshold)
        # both at once (each its own process; 2 cores): neither's answers depend on the other's
        with ThreadPoolExecutor(2) as pool:
            jobs = {name: pool.submit(drive, real.start_plan(plan, tree), phases, READY_TIMEOUT_S) for name, plan in planned.items()}
            arms = {name: job.result() for name, job in jobs.items()}
        plain, adaptive = arms["plain"], arms["adaptive"]
        plain.pop("log")
        log = adaptive.pop("log")
        summary["plain"], summary["adaptive"] = plain, adaptive
        for name, arm in arms.items():
            if "error" in arm or not arm.get("alive_after"):
                problems.append(f"{name}: {arm.get('error', 'server died')}")
        adaptive["switch_lines"] = [ln.strip() for ln in log.splitlines() if "Switch adaptive runtime state" in ln]
        num_steps = real.EAGLE3_SETTINGS["num_steps"]
        adaptive["initialized"] = INITIALIZED_LINE.format(steps=num_steps) in log
        if not adaptive["initialized"]:
            problems.append(f"adaptive log lacks {INITIALIZED_LINE.format(steps=num_steps)!r}")
        problems += [f"adaptive log lacks {line!r}" for line in STANDIN_LINES if line not in log]
        problems += [f"adaptive log has {m!r}" for m in FAILURE_MARKERS if m in log]
        problems += check_switches(log, num_steps, threshold)
        problems += compare(plain, adaptive, phases)
        adaptive["accept_len"] = accept_length(adaptive.get("narrow", []))
        if adaptive["accept_len"] is None or adaptive["accept_len"] < MIN_ACCEPT:
            problems.append(f"adaptive: accept length {adaptive['accept_len']} below {MIN_ACCEPT} while drafting "
                            "alone (NARROW)")
        resumed = adaptive["resumed_accept_lens"] = resumed_accept_lengths(log, num_steps, threshold)
        if not resumed or sum(resumed) / len(resumed) < RESUME_FLOOR * (adaptive["accept_len"] or 0.0):
            problems.append(f"adaptive: accept length right after drafting resumed {resumed}, "
                            f"below {RESUME_FLOOR} x its NARROW {adaptive['accept_len']}")
    except Exception as exc:  # noqa: BLE001 - one summary, whatever broke
        problems.append(f"{type(exc).__name__}: {exc}")
    summary["problems"] = problems
    summary["ok"] = not problems
    return summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--version", default=VERSION)
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--workdir", type=Path, help="keep configs and logs here (default: a temp dir, removed on success)")
    ap.add_argument("--fault", action="append", choices=FAULTS, default=[],
                    help="make this fault on the adaptive arm (the run must then fail)")
    args = ap.parse_args(argv)
    try:
        summary = run_native_check(args.version, args.threshold, args.workdir, tuple(args.fault))
    except RuntimeBuildError as exc:
        print(f"native_check: {exc}", file=sys.stderr)
        return 2
    return report(summary, keep=bool(args.workdir))


if __name__ == "__main__":
    sys.exit(main())
