"""`python -m specops.sim --sglang-tree TREE <launch_server flags>`: a stand-in for SGLang.

Simulator knobs are stripped before SGLang's own parsing, so the rest of argv is judged by
the flags the tree declares. Each knob also reads an environment variable (the flag wins):

  --sglang-tree TREE        SPECOPS_SIM_TREE         repo-shaped checkout: TREE/python/sglang/...
  --vllm-tree TREE          SPECOPS_SIM_VLLM_TREE    vLLM's face instead (sim.vllm_program): TREE/vllm/...
  --sim-time-scale F        SPECOPS_SIM_TIME_SCALE   wall = model time * F (0.05: 20x faster)
  --sim-fail-at-start       SPECOPS_SIM_FAIL_AT_START  die after loading, traceback in the log, exit 1
  --sim-crash-after N       SPECOPS_SIM_CRASH_AFTER  after N finished requests, scheduler traceback, SIGKILL
  --sim-slow-start S        SPECOPS_SIM_SLOW_START   S more wall seconds of loading (/health 503)
  --sim-slow-health S       SPECOPS_SIM_SLOW_HEALTH  once ready, /health answers 200 after S wall seconds (SGLang's
                                                     runs a one-token generation: seconds on a busy host)
  --sim-seed N              SPECOPS_SIM_SEED         noise and token seed
  --sim-noise F             SPECOPS_SIM_NOISE        relative step-time drift (0: none; default the model's 3%)
  --sim-accept-length F     SPECOPS_SIM_ACCEPT_LENGTH  a speculative arm's accept length at batch 1 (a real
                                                     head's, measured; default the model's calibrated one)
  --sim-model FILE          SPECOPS_SIM_MODEL        the performance model's knobs (sim/modelfile.py: one
                                                     `specops calibrate` fitted to a real run); default the demo's

Exit codes: 2 for argparse errors (as SGLang), 1 for a source that does not compile or a
start-up failure, -9 (killed) after an injected crash.
"""

from __future__ import annotations

import asyncio
import os
import sys
import traceback
from pathlib import Path
from typing import Mapping

from specops.errors import ConfigError
from specops.sglang.flags import tree_flags
from specops.sim import modelfile, vllm_program
from specops.sim.knobs import UsageError, split_knobs
from specops.sim.logs import SimLog, import_failure_traceback
from specops.sim.server import SimOptions, SimServer, bind_socket, resolve_args

_ENV = {"tree": "SPECOPS_SIM_TREE", "vllm_tree": "SPECOPS_SIM_VLLM_TREE", "time_scale": "SPECOPS_SIM_TIME_SCALE", "crash_after": "SPECOPS_SIM_CRASH_AFTER",
        "slow_start": "SPECOPS_SIM_SLOW_START", "slow_health": "SPECOPS_SIM_SLOW_HEALTH", "seed": "SPECOPS_SIM_SEED",
        "fail_at_start": "SPECOPS_SIM_FAIL_AT_START", "noise": "SPECOPS_SIM_NOISE",
        "accept_length": "SPECOPS_SIM_ACCEPT_LENGTH", "model": "SPECOPS_SIM_MODEL"}


def split_argv(argv: list[str], env: Mapping[str, str] | None = None) -> tuple[dict[str, str], list[str]]:
    """Separate simulator knobs (flags, then env as fallback) from SGLang's argv."""
    environ: Mapping[str, str] = os.environ if env is None else env
    knobs, rest = split_knobs(argv)
    for key, var in _ENV.items():
        if key not in knobs and environ.get(var):
            knobs[key] = environ[var]
    return knobs, rest


def options(knobs: dict[str, str]) -> SimOptions:
    if knobs.get("vllm_tree"):  # vLLM's face (sim.vllm_program): the tree is a vLLM one
        knobs = {**knobs, "tree": knobs["vllm_tree"]}
    if not knobs.get("tree"):
        raise UsageError("--sglang-tree TREE (or SPECOPS_SIM_TREE) is required: the SGLang checkout whose flags to accept")
    try:
        opts = SimOptions(
            tree=Path(knobs["tree"]).expanduser(),
            time_scale=float(knobs.get("time_scale", 1.0)),
            fail_at_start=knobs.get("fail_at_start", "").lower() not in ("", "0", "false", "no"),
            crash_after=int(knobs["crash_after"]) if knobs.get("crash_after") not in (None, "") else None,
            slow_start=float(knobs.get("slow_start", 0) or 0),
            slow_health=float(knobs.get("slow_health", 0) or 0),
            seed=int(knobs.get("seed", 0) or 0),
            noise=float(knobs["noise"]) if knobs.get("noise") not in (None, "") else None,
            accept_length=float(knobs["accept_length"]) if knobs.get("accept_length") not in (None, "") else None,
        )
    except ValueError as e:
        raise UsageError(f"bad simulator option: {e}") from None
    if knobs.get("model"):
        try:
            opts.params = modelfile.load(knobs["model"])
        except ConfigError as e:
            raise UsageError(str(e)) from None
    if opts.time_scale <= 0:
        raise UsageError("--sim-time-scale must be > 0")
    if opts.accept_length is not None and not opts.accept_length >= 1:
        raise UsageError(f"--sim-accept-length must be at least 1 (tokens a step), got {opts.accept_length}")
    return opts


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        opts = options(split_argv(argv)[0])
        rest = split_argv(argv)[1]
    except UsageError as e:
        print(f"specops.sim: error: {e}", file=sys.stderr)
        return 2
    if split_argv(argv)[0].get("vllm_tree"):  # vLLM's face
        return vllm_program.main(opts.tree, opts, rest)
    try:
        flags = tree_flags(opts.tree)
    except SyntaxError as e:
        sys.stderr.write(import_failure_traceback(opts.tree.resolve(), traceback.format_exception_only(type(e), e)))
        return 1
    except FileNotFoundError as e:
        print(f"specops.sim: error: {e}", file=sys.stderr)
        return 2
    args = flags.parse(rest)  # argparse prints usage + "unrecognized arguments" and exits 2 itself
    args.setdefault("host", "127.0.0.1")
    args["host"] = args.get("host") or "127.0.0.1"
    args["port"] = args.get("port") or 30000
    args["_cuda_graph_max_bs"] = args.get("cuda_graph_max_bs") or args.get("cuda_graph_max_bs_decode")
    log = SimLog()
    resolve_args(args, log)
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items() if not k.startswith("_"))
    log.info(f"server_args=ServerArgs({shown})")
    try:
        sock = bind_socket(args["host"], int(args["port"]))
    except OSError as e:
        log.info(f"ERROR:    [Errno {e.errno}] error while attempting to bind on address "
                 f"{(args['host'], int(args['port']))!r}: {e.strerror.lower() if e.strerror else e}")
        return 1
    server = SimServer(flags, args, opts, log)
    try:
        asyncio.run(server.start(sock))
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
