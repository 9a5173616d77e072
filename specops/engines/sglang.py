"""SGLang as a `ServingEngine`, and the simulator that speaks its face.

Every seam delegates to what knows SGLang (`specops.sglang`: the flag reader, the layout, the
crash messages, the serving face, the adaptive mechanism) or the simulator (`specops.sim`:
its knobs). `Simulator` is a subclass: it shares SGLang's face (ready line, crash lines,
metrics, flags checked against a real tree's parser) and differs where it starts (`python -m
specops.sim --sglang-tree TREE`, the host's python, its own `--sim-*` options) and in what
`--runner auto` means (the builtin client: no SGLang is installed beside it).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence, cast

from specops.config.engine_registry import BUILTIN
from specops.engines.base import ArmFlags, CrashMessage, EngineLayout, ServingEngine
from specops.engines.metrics import SGLANG as SGLANG_METRICS
from specops.engines.schedule import Schedule, ScheduleForm
from specops.engines.sglang_flags import LayoutLike, word_arm
from specops.engines.simulated import Simulated
from specops.hostfiles.treefiles import TreeFiles
from specops.launchargs import arg_name, args_from_argv
from specops.sglang import adaptive, serving
from specops.sglang.adaptive import SKIP_ZERO_STEP_EXTEND, AdaptivePlan, TierPlan
from specops.sglang.crashdata import MESSAGES
from specops.sglang.layout import ADAPTIVE_FLAGS, DISABLE_FLAG, SGLangLayout, bench_module, detect_layout
from specops.sglang.paths import SERVER_ARGS
from specops.sglang.venv import venv_dir, venv_python

if TYPE_CHECKING:
    from specops.servers.arms import ArmSpec

#: what makes SGLang serve on the CPU: its `is_cpu()` reads this variable (without it, false)
CPU_ENGINE_ENV = {"SGLANG_USE_CPU_ENGINE": "1"}
#: the file name `schedule_forms` gives the native tier config
NATIVE_CONFIG_FILE = "adaptive.json"


class SGLang(ServingEngine):
    """A real SGLang server: `python -m sglang.launch_server` from the tree's environment."""

    spec = BUILTIN["sglang"]
    ready_line = serving.READY_LINE
    crash_messages: tuple[CrashMessage, ...] = MESSAGES
    metrics = SGLANG_METRICS
    patch_threshold_flag = DISABLE_FLAG
    off_extend_switch: str | None = SKIP_ZERO_STEP_EXTEND
    model_flags: tuple[str, ...] = ("--model-path", "--speculative-draft-model-path")
    tree_marker = SERVER_ARGS
    tree_name = "an SGLang checkout"
    client_api = "generate"
    title = "SGLang"
    launch_module = serving.LAUNCH_MODULE
    cpu_env = CPU_ENGINE_ENV

    def layout(self, files: TreeFiles) -> SGLangLayout:
        return detect_layout(files)

    def arm_flags(self, arm: ArmSpec, layout: EngineLayout, *, workdir: str,
                  bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
        return word_arm(self, arm, cast(LayoutLike, layout), workdir=workdir, bucket_sources=bucket_sources,
                        where=where)

    def server_python(self, host_python: str, variables: Mapping[str, Any], expand: Callable[[str], str]) -> str:
        # the environment the install step put the tree into, never a bare python3
        return venv_python(expand(venv_dir(dict(variables))))

    def eagle_flags(self, draft_model: str, num_steps: int, topk: int, draft_tokens: int) -> list[str]:
        return ["--speculative-algorithm", "EAGLE3",
                "--speculative-draft-model-path", draft_model,
                "--speculative-num-steps", str(num_steps),
                "--speculative-eagle-topk", str(topk),
                "--speculative-num-draft-tokens", str(draft_tokens)]

    def serves_metrics(self, argv: Sequence[str]) -> bool:
        return serving.METRICS_FLAG in argv

    def cpu_memory_fixed(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        return arg_name(serving.MAX_TOTAL_TOKENS_FLAG) in args_from_argv(argv)

    def adaptive_config(self, threshold: int, num_steps: int, max_bs: int,
                        bucket_sources: Mapping[str, str] | None = None, *, graphs: bool = True) -> AdaptivePlan:
        return adaptive.adaptive_config(threshold, num_steps, max_bs, bucket_sources, graphs=graphs)

    def tier_config(self, tiers: dict[int, list[int]], max_bs: int,
                    bucket_sources: Mapping[str, str] | None = None, *,
                    launch_steps: int | None = None, max_batch: int | None = None, graphs: bool = True) -> TierPlan:
        return adaptive.tier_config(tiers, max_bs, bucket_sources, launch_steps=launch_steps, max_batch=max_batch,
                                    graphs=graphs)

    def adaptive_flags(self, config_path: str) -> list[str]:
        switch, config = ADAPTIVE_FLAGS
        return [switch, config, config_path]

    def runner_name(self, choice: str) -> str:
        return choice if choice != "auto" else "sglang"

    def schedule_forms(self, schedule: Schedule, *, draft_model: str, max_batch: int) -> list[ScheduleForm]:
        return [_patch_form(schedule), _native_form(schedule, max_batch)]

    def benchmark_module(self, files: TreeFiles) -> str | None:
        return bench_module(files)


def _patch_form(schedule: Schedule) -> ScheduleForm:
    """The dynamic-spec-disable patch: one draft-step count up to a threshold, none above."""
    route = "SGLang <= 0.5.13 (dynamic-spec-disable patch)"
    starts = schedule.starts
    if len(starts) == 1 and starts[0][1] > 0:   # drafting at every batch: threshold 0 says "always"
        return ScheduleForm(route, ["--speculative-num-steps", str(starts[0][1]), DISABLE_FLAG, "0"],
                            "0 = always speculate")
    if len(starts) == 1:   # never drafting (a spec-off server): threshold -1
        return ScheduleForm(route, [DISABLE_FLAG, "-1"], "-1 = never speculate")
    if schedule.threshold is None:
        return ScheduleForm(route, None, f"not expressible: the patch drafts one step count up to its threshold "
                                         f"and none above; this schedule is {schedule.text()}")
    return ScheduleForm(route, ["--speculative-num-steps", str(starts[0][1]), DISABLE_FLAG, str(schedule.threshold)])


def _native_form(schedule: Schedule, max_batch: int) -> ScheduleForm:
    """SGLang's native tiers (`candidate_steps`, 0 allowed from 0.5.14 on), keyed by the padded
    batch SGLang routes by: the default capture list for `max_batch` (a tree's own list can
    differ; specops reads it from the tree when it launches the arm)."""
    steps = max(k for _, k in schedule.starts) or 1   # a schedule that never drafts still launches with steps
    tiers = {s: [k] for s, k in schedule.starts}

    def keyed(graphs: bool) -> str:
        """The config's JSON as a server with (padded) or without (unpadded) CUDA graphs routes it."""
        plan = adaptive.tier_config(tiers, max_batch, launch_steps=steps, max_batch=max_batch, graphs=graphs)
        return json.dumps(plan.config, sort_keys=True, separators=(",", ":"))

    config, unpadded = keyed(True), keyed(False)
    graphs = f"SGLang's default CUDA-graph capture list up to {max_batch}"
    note = (f"tier keys are the batches where each tier starts, each also a bucket of {graphs}: the same with or "
            f"without --disable-cuda-graph" if unpadded == config else
            f"tier keys are padded batch sizes of {graphs}; a server with --disable-cuda-graph routes by the batch "
            f"itself, so there the keys are the tiers' first batches: {unpadded}")
    return ScheduleForm("SGLang >= 0.5.14 (native adaptive tiers)",
                        ["--speculative-num-steps", str(steps), *ADAPTIVE_FLAGS, NATIVE_CONFIG_FILE], note,
                        config_file=NATIVE_CONFIG_FILE, config=config)


class Simulator(Simulated, SGLang):
    """specops' simulated server (`specops.sim`): SGLang's face over a model clock. Its flags are
    checked against a real tree's parser once its own `--sim-*` knobs are set aside."""

    spec = BUILTIN["sim"]
    tree_flag = "--sglang-tree"
