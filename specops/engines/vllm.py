"""vLLM as a `ServingEngine`, and the simulator that speaks its face.

Every seam delegates to `specops.vllm` (the tree reader, the schedule, the serving face, the
crash messages) or to the simulator's knobs. vLLM words an arm's flags itself (`arm_flags`):
`--model`, `--max-num-seqs` for the running limit, and one `--speculative-config` JSON for
EAGLE-3 and for the adaptive arm, whose schedule is vLLM's native
`num_speculative_tokens_per_batch_size`. There is no patch route: a release without the
schedule refuses the adaptive arm, naming the release.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from specops.config.engine_registry import BUILTIN, Feature
from specops.engines.base import ArmFlags, CrashMessage, EngineLayout, ServingEngine, model_on_host
from specops.engines.metrics import VLLM as VLLM_METRICS
from specops.engines.schedule import Schedule, ScheduleForm
from specops.engines.simulated import Simulated
from specops.errors import ConfigError
from specops.hostfiles.treefiles import TreeFiles
from specops.vllm import schedule, serving
from specops.vllm.crashdata import MESSAGES
from specops.vllm.install import venv_dir, venv_python
from specops.vllm.tree import MARKER, VLLMLayout, detect_layout

if TYPE_CHECKING:
    from specops.servers.arms import ArmSpec

#: GiB of KV cache a CPU server takes, fixed before it starts
KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"
#: what vLLM's CPU build needs to serve (REAL-ENGINES-ON-CPU.md): the device, a KV cache size in
#: GiB, no thread pinning (the host's other work keeps its cores)
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", KVCACHE_SPACE_ENV: "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


#: the route `schedule_forms` names
SCHEDULE_ROUTE = f"vLLM >= 0.32.0 ({schedule.SCHEDULE_KEY})"


def _layout(layout: EngineLayout, where: str) -> VLLMLayout:
    if not isinstance(layout, VLLMLayout):
        raise ConfigError("the tree is not a vLLM tree", where=where)
    if layout.flags is None:
        raise ConfigError(f"cannot tell which flags the vLLM tree ({layout.version or 'unknown version'}) accepts: "
                          + "; ".join(layout.notes), where=where, hint="re-create the tree (deploy lays it out)")
    return layout


def speculative_config(arm: ArmSpec, model_of: Callable[[str], str], where: str) -> tuple[dict[str, Any], ArmFlags]:
    """The `--speculative-config` of a speculative arm, and its mechanism (no flags yet)."""
    assert arm.draft_model and arm.num_steps
    if arm.eagle_topk not in (None, 1):
        raise ConfigError(f"vLLM's EAGLE-3 drafts one chain: eagle_topk must be 1, got {arm.eagle_topk}", where=where)
    config: dict[str, Any] = {"method": "eagle3", "model": model_of(arm.draft_model),
                              "num_speculative_tokens": arm.num_steps}
    if arm.kind == "eagle3":
        return config, ArmFlags([], "eagle3")
    if arm.kind == "spec-off":   # the drafter loaded, K = 0 at every running batch
        never = [[1, arm.max_running_requests, 0]]
        config[schedule.SCHEDULE_KEY] = never
        return config, ArmFlags([], "spec-off (native schedule)", None,
                                [f"drafting off at every running batch ({schedule.SCHEDULE_KEY}={never}): "
                                 "the drafter stays loaded"])
    try:
        if arm.tiers:
            plan = schedule.from_tiers(arm.tiers, arm.num_steps, arm.max_running_requests)
        else:
            assert arm.threshold is not None
            plan = schedule.from_threshold(arm.threshold, arm.num_steps, arm.max_running_requests)
    except schedule.ScheduleError as exc:
        raise ConfigError(f"vLLM would refuse the adaptive schedule: {exc}", where=where) from None
    config[schedule.SCHEDULE_KEY] = plan.schedule
    return config, ArmFlags([], "native-schedule", plan.effective_threshold, [plan.note()])


#: vLLM's process-output prefix on every line a child process writes: `(EngineCore_DP0 pid=12) `,
#: and its logger's (vllm/logger.py `_FORMAT`), which it writes on every line of a logged
#: traceback too: `ERROR 12-04 09:41:15 [core.py:1100] `
LOG_PREFIX = re.compile(r"^\([A-Za-z_][\w-]* pid=\d+\) "
                        r"(?P<logger>(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d \[[^\]\s]+:\d+\] )?")
#: why vLLM lacks SGLang's adaptive routes: its schedule is a launch flag of its own
NO_CONFIG_FILE = "vLLM has no adaptive config file: its schedule is part of --speculative-config"


class VLLM(ServingEngine):
    """A real vLLM server: `python -m vllm.entrypoints.openai.api_server` from its environment."""

    spec = BUILTIN["vllm"]
    missing = {Feature.NATIVE_TIERS: NO_CONFIG_FILE,
               Feature.PATCH_ROUTE: "vLLM has no patch route: its schedule is native"}
    ready_line = serving.READY_LINE
    crash_messages: tuple[CrashMessage, ...] = MESSAGES
    metrics = VLLM_METRICS
    log_prefix = LOG_PREFIX
    model_flags: tuple[str, ...] = ("--model",)
    tree_marker = MARKER
    tree_name = "a vLLM tree"
    client_api = "completions"
    title = "vLLM"
    launch_module = serving.LAUNCH_MODULE
    cpu_env = CPU_ENV

    def layout(self, files: TreeFiles) -> VLLMLayout:
        return detect_layout(files)

    def arm_flags(self, arm: ArmSpec, layout: EngineLayout, *, workdir: str,
                  bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
        tree = _layout(layout, where)

        def on_host(path: str) -> str:
            return model_on_host(path, workdir)

        flags = ["--model", on_host(arm.model), "--host", "127.0.0.1", "--port", str(arm.port),
                 "--max-num-seqs", str(arm.max_running_requests)]
        out = ArmFlags(flags, "none")
        if arm.speculative:
            if arm.kind in ("adaptive", "spec-off") and (why := tree.schedule_refusal()):
                raise ConfigError(why, where=where, hint=f"use vLLM 0.32.0 or newer for the {arm.kind} arm")
            config, out = speculative_config(arm, on_host, where)
            out.flags = flags + ["--speculative-config", json.dumps(config, separators=(",", ":"))]
        out.flags += list(arm.extra_args)
        assert tree.flags is not None
        refusal = tree.flags.check(self.parser_flags(out.flags, where))
        if refusal:
            raise ConfigError(f"vLLM {tree.version or '(unknown version)'} would refuse this launch: {refusal}",
                              where=where, hint="drop or rename that flag (an arm's extra_args?)")
        return out

    def server_python(self, host_python: str, variables: Mapping[str, Any], expand: Callable[[str], str]) -> str:
        return venv_python(expand(venv_dir(variables)))  # the environment vllm_install made

    def eagle_flags(self, draft_model: str, num_steps: int, topk: int, draft_tokens: int) -> list[str]:
        config = {"method": "eagle3", "model": draft_model, "num_speculative_tokens": num_steps}
        return ["--speculative-config", json.dumps(config, separators=(",", ":"))]

    def cpu_memory_fixed(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        return bool(env.get(KVCACHE_SPACE_ENV))  # CPU_ENV sets it

    def schedule_forms(self, sched: Schedule, *, draft_model: str, max_batch: int) -> list[ScheduleForm]:
        tokens = max(k for _, k in sched.starts) or 1   # a schedule that never drafts still names a count
        plan = schedule.from_tiers(dict(sched.starts), tokens, max_batch)
        config = {"method": "eagle3", "model": draft_model, "num_speculative_tokens": tokens,
                  schedule.SCHEDULE_KEY: plan.schedule}
        return [ScheduleForm(SCHEDULE_ROUTE, ["--speculative-config", json.dumps(config, separators=(",", ":"))],
                             "ranges of running batch [first, last, K]; vLLM carries the last K to larger batches")]


class SimulatedVLLM(Simulated, VLLM):
    """specops' simulated server with vLLM's face (`python -m specops.sim --vllm-tree TREE`): the
    same scheduler and model clock as the SGLang face; flags checked against the tree's parser
    once its own `--sim-*` knobs are set aside."""

    spec = BUILTIN["sim-vllm"]
    tree_flag = "--vllm-tree"
