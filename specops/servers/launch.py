"""Arm profile + the checkout's detected layout -> the exact launch command.

The command depends on what the tree supports (flag names change across SGLang
versions, and the adaptive arm has two mechanisms), so it is built from the layout, and
an arm the tree cannot run is refused here, before anything is launched.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, cast

from specops.engines import ServingEngine, engine_named
from specops.engines.base import ArmFlags, EngineLayout
from specops.errors import ConfigError
from specops.servers.arms import ArmSpec
from specops.servers.container import run_argv
from specops.sglang import paths
from specops.sglang.flags import FlagSet
from specops.sglang.venv import neutral_cwd
from specops.sim.knobs import FAULTS, VALUED

HOST = "127.0.0.1"

#: `native-schedule`: vLLM's num_speculative_tokens_per_batch_size inside --speculative-config
MECHANISMS = ("none", "eagle3", "native-adaptive", "dynamic-spec-disable-patch", "native-schedule")


class LayoutLike(Protocol):
    """What launch needs from `specops.sglang.layout.SGLangLayout`."""

    version: str | None
    adaptive_zero_steps: bool
    cuda_graph_flag: str | None
    dynamic_spec_disable_applied: bool
    ready_path: str
    notes: list[str]

    @property
    def flags(self) -> FlagSet | None: ...


@dataclass
class LaunchPlan:
    """Everything needed to start one arm and to recognise it later (the args hash)."""

    arm: str
    kind: str
    port: int
    argv: list[str]
    env: dict[str, str]
    mechanism: str
    workdir: str
    log_path: str
    state_path: str
    config_path: str | None = None
    config_json: str | None = None
    effective_threshold: int | None = None
    notes: list[str] = field(default_factory=list)
    model: str = ""
    ready_path: str = "/health"
    engine_version: str | None = None  # the tree's release: a server from another version is never reused
    #: where the process starts: an empty folder, never one holding `sglang/` (see sglang/venv.py)
    cwd: str = ""
    #: the host's secrets file, loaded into the server's environment at start (None: no secrets)
    secrets_file: str | None = None
    #: a Slurm host's request for this arm (servers.slurm.SlurmSettings as a dict); None elsewhere
    slurm: dict[str, Any] | None = None
    #: what the arm computes on: `gpu`, or `cpu` (SGLang's CPU serving: `--device cpu`, no GPUs)
    device: str = "gpu"
    #: the arm as a container of `sglang_image` (servers.container.adapt_plan); None: a host process
    container: dict[str, Any] | None = None

    @property
    def command(self) -> str:
        """The full command line as a user would paste it (env first; a container's run)."""
        if self.container is not None:
            return shlex.join(run_argv(self))
        prefix = [f"{k}={v}" for k, v in sorted(self.env.items())]
        return shlex.join(prefix + self.argv)

    @property
    def args_hash(self) -> str:
        """sha256 of argv + env + adaptive config + tree version: equal hashes mean an identical server."""
        return self._hash(self.argv)

    @property
    def config_hash(self) -> str:
        """args_hash without the simulator's injected faults (sim.knobs.FAULTS): what the report
        compares, so a run resumed without `--sim-crash-after` still measured one configuration."""
        argv, skip = [], 0
        for a in self.argv:
            name = a.partition("=")[0]
            if skip:
                skip -= 1
            elif name in FAULTS:
                skip = 1 if a in VALUED else 0
            else:
                argv.append(a)
        return self._hash(argv)

    def _hash(self, argv: list[str]) -> str:
        # the release under the key it had before records named the engine: old servers hash the same
        fields = {"argv": argv, "env": sorted(self.env.items()),
                  "config": self.config_json, "sglang_version": self.engine_version}
        if self.container is not None:  # another image (or runtime, GPUs, mounts) is another server
            fields["container"] = self.container
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def _on_host(path: str, workdir: str) -> str:
    """A model given as `./x` or `../x` means under the workdir (servers start elsewhere)."""
    return posixpath.normpath(posixpath.join(workdir, path)) if path.startswith(("./", "../")) else path


def _common_flags(arm: ArmSpec, cuda_graph_flag: str, workdir: str) -> list[str]:
    return ["--model-path", _on_host(arm.model, workdir), "--host", HOST, "--port", str(arm.port),
            "--max-running-requests", str(arm.max_running_requests),
            cuda_graph_flag, str(arm.cuda_graph_max_bs)]


def _tree_flags(layout: LayoutLike, where: str) -> tuple[FlagSet, str]:
    """The tree's flags and decode CUDA-graph flag, or a ConfigError saying why there are none."""
    version = layout.version or "unknown version"
    if layout.flags is None:
        why = "; ".join(layout.notes) or "server_args.py could not be read"
        raise ConfigError(f"cannot tell which flags the SGLang tree ({version}) accepts: {why}", where=where,
                          hint="fix or re-create the checkout (a patch that broke it: `specops patch revert`)")
    if not layout.cuda_graph_flag:
        raise ConfigError(f"the SGLang tree ({version}) has no decode CUDA-graph max batch size flag, so the "
                          f"arms cannot be given the same one", where=where,
                          hint="use SGLang 0.4.10 or newer")
    return layout.flags, layout.cuda_graph_flag


def check_flags(flags: FlagSet, argv: Sequence[str], *, version: str | None, where: str) -> None:
    """Refuse, before launch, an argv the tree's own argparse would reject or find ambiguous."""
    refusal = flags.check(list(argv))
    if refusal:
        raise ConfigError(f"SGLang {version or '(unknown version)'} would refuse this launch: {refusal}",
                          where=where, hint="drop or rename that flag (an arm's extra_args?), or use an SGLang "
                                            "version that has it (`specops patch detect --tree DIR` lists them)")


def _placement_flags(arm: ArmSpec) -> list[str]:
    """Tensor parallelism and the memory share, where the arm's placement set them."""
    out: list[str] = []
    if arm.tp_size is not None and arm.tp_size > 1:
        out += ["--tp-size", str(arm.tp_size)]
    if arm.mem_fraction_static is not None:
        out += ["--mem-fraction-static", f"{arm.mem_fraction_static:g}"]
    return out


#: SGLang's idle scheduler polls for requests without pause unless told to sleep: a core per
#: idle server. On a GPU host that core is spare; on a CPU host it is the compute, so an arm
#: waiting its turn would slow the one being measured (and the client).
SLEEP_ON_IDLE = "--sleep-on-idle"


def _device_flags(arm: ArmSpec, tree_flags: FlagSet) -> list[str]:
    """For a CPU arm: `--device cpu` unless its extra_args already choose a device, and
    `--sleep-on-idle` where the tree has it (SGLang 0.4.10 and later) and they do not."""
    if not arm.cpu:
        return []
    out = [] if any(a == "--device" or a.startswith("--device=") for a in arm.extra_args) else ["--device", "cpu"]
    if tree_flags.has_flag(SLEEP_ON_IDLE) and SLEEP_ON_IDLE not in arm.extra_args:
        out.append(SLEEP_ON_IDLE)
    return out


def _eagle_flags(arm: ArmSpec, serving: ServingEngine) -> list[str]:
    assert arm.draft_model and arm.num_steps and arm.eagle_topk and arm.num_draft_tokens
    return serving.eagle_flags(arm.draft_model, arm.num_steps, arm.eagle_topk, arm.num_draft_tokens)


#: the tiers of a server that never drafts: 0 steps from running batch 1 up
NEVER_DRAFT = {1: [0]}
#: the dynamic-spec-disable patch's threshold that never drafts (0 means always)
PATCH_NEVER = -1
SPEC_OFF_NOTE = "drafting off at every running batch ({how}): the draft model stays loaded and its extend still runs"


def _spec_off(arm: ArmSpec, layout: LayoutLike, serving: ServingEngine, workdir: str,
              bucket_sources: Mapping[str, str] | None, where: str) -> tuple[str, list[str], str | None, str | None, str]:
    """(mechanism, flags, config path, config JSON, note) of a spec-off arm: native tiers of 0
    steps from batch 1, else the patch's threshold -1."""
    if layout.adaptive_zero_steps:
        plan = serving.tier_config(NEVER_DRAFT, arm.cuda_graph_max_bs, bucket_sources,
                                   launch_steps=arm.num_steps, max_batch=arm.max_running_requests)
        path = paths.adaptive_config(workdir, arm.name)
        return ("spec-off (native tiers)", serving.adaptive_flags(path), path,
                json.dumps(plan.config, indent=2, sort_keys=True) + "\n",
                SPEC_OFF_NOTE.format(how="native tiers, 0 steps from batch 1"))
    if layout.dynamic_spec_disable_applied:
        return (f"spec-off (dynamic-spec-disable patch, threshold {PATCH_NEVER})",
                [serving.patch_threshold_flag, str(PATCH_NEVER)], None, None,
                SPEC_OFF_NOTE.format(how=f"patch threshold {PATCH_NEVER}"))
    raise ConfigError(
        f"a spec-off arm needs a server that can draft 0 steps at every batch size; the SGLang tree "
        f"({layout.version or 'unknown version'}) has neither zero-step adaptive tiers nor the dynamic-spec-disable "
        f"patch", where=where,
        hint="apply the `dynamic-spec-disable` patch set to the tree (its threshold -1 never drafts), "
             "or use SGLang >= 0.5.14")


def build_launch(arm: ArmSpec, layout: LayoutLike | EngineLayout, *, workdir: str, python: str = "python3",
                 engine: str = "sglang", sglang_tree: str | None = None,
                 sim_options: Sequence[str] = (), bucket_sources: Mapping[str, str] | None = None,
                 where: str | None = None) -> LaunchPlan:
    """The launch plan for `arm` on a tree with `layout`. `workdir` is the host's absolute
    work directory. `engine` (a name of specops.engines.ENGINES) words the flags, the command
    and the environment: `sim` runs `python -m specops.sim --sglang-tree TREE` with the same
    SGLang flags. `bucket_sources` ({tree path: text} of the files that may build the
    CUDA-graph capture list) let the adaptive arm use the buckets the tree really pads to.

    Raises ConfigError when the tree cannot run the arm (e.g. adaptive without a mechanism)
    or its own parser would refuse a flag (naming the flag and the tree's version)."""
    where = where or f"arm '{arm.name}'"
    serving = engine_named(engine, where)
    own = serving.arm_flags(arm, layout, lambda path: _on_host(path, workdir), where)
    if own is not None:  # an engine that words its flags itself (vLLM)
        return _plan(arm, serving, own, layout, workdir=workdir, python=python, tree=sglang_tree,
                     options=sim_options, where=where)
    layout = cast(LayoutLike, layout)
    tree_flags, graph_flag = _tree_flags(layout, where)
    flags = _common_flags(arm, graph_flag, workdir)
    notes: list[str] = []
    config_path = config_json = None
    effective = None
    if arm.kind == "baseline":
        mechanism = "none"
    elif arm.kind == "eagle3":
        mechanism = "eagle3"
        flags += _eagle_flags(arm, serving)
    elif arm.kind == "spec-off":
        flags += _eagle_flags(arm, serving)
        mechanism, off_flags, config_path, config_json, note = _spec_off(arm, layout, serving, workdir,
                                                                          bucket_sources, where)
        flags += off_flags
        notes.append(note)
    else:
        assert arm.threshold is not None and arm.num_steps is not None
        flags += _eagle_flags(arm, serving)
        if layout.adaptive_zero_steps:
            if arm.eagle_topk != 1:
                raise ConfigError(f"native adaptive speculation supports eagle_topk 1 only, got {arm.eagle_topk}",
                                  where=where)
            mechanism = "native-adaptive"
            config_path = paths.adaptive_config(workdir, arm.name)
            flags += serving.adaptive_flags(config_path)
            if arm.tiers:
                tiers = serving.tier_config(arm.tiers, arm.cuda_graph_max_bs, bucket_sources,
                                            launch_steps=arm.num_steps, max_batch=arm.max_running_requests)
                config_json = json.dumps(tiers.config, indent=2, sort_keys=True) + "\n"
                effective = tiers.effective_threshold
                notes.append(tiers.note())
            else:
                plan = serving.adaptive_config(arm.threshold, arm.num_steps, arm.cuda_graph_max_bs, bucket_sources)
                config_json = json.dumps(plan.config, indent=2, sort_keys=True) + "\n"
                effective = plan.effective_threshold
                notes.append(plan.note() + f" (buckets from {plan.buckets_source})")
        elif layout.dynamic_spec_disable_applied:
            mechanism = "dynamic-spec-disable-patch"
            effective = arm.threshold
            flags += [serving.patch_threshold_flag, str(arm.threshold)]
            notes.append(f"speculation disabled when the running batch exceeds {arm.threshold}")
        else:
            version = layout.version or "unknown version"
            raise ConfigError(
                f"the SGLang tree ({version}) has neither zero-step adaptive tiers nor the "
                f"dynamic-spec-disable patch, so the adaptive arm cannot run",
                where=where,
                hint="apply the `dynamic-spec-disable` patch set to the tree, or use SGLang >= 0.5.14")
    flags += _placement_flags(arm)
    flags += _device_flags(arm, tree_flags)
    flags += arm.extra_args
    check_flags(tree_flags, serving.parser_flags(flags, where), version=layout.version, where=where)
    argv = serving.launch_argv(python, flags, tree=sglang_tree, options=sim_options, where=where)
    env = serving.launch_env(arm.env, cpu=arm.cpu, hub_offline=arm.hub_offline)
    if arm.gpus is not None and not arm.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in arm.gpus)
    return LaunchPlan(arm=arm.name, kind=arm.kind, port=arm.port, argv=argv, env=env,
                      mechanism=mechanism, workdir=workdir,
                      log_path=paths.server_log(workdir, arm.name),
                      state_path=paths.server_state(workdir, arm.name),
                      config_path=config_path, config_json=config_json,
                      effective_threshold=effective, notes=notes, model=arm.model, ready_path=layout.ready_path,
                      engine_version=layout.version, cwd=neutral_cwd(workdir), device=arm.device)


def _plan(arm: ArmSpec, serving: ServingEngine, own: ArmFlags, layout: EngineLayout, *, workdir: str, python: str,
          tree: str | None, options: Sequence[str], where: str) -> LaunchPlan:
    """The launch plan of an arm whose engine worded its flags (`ServingEngine.arm_flags`)."""
    argv = serving.launch_argv(python, own.flags, tree=tree, options=options, where=where)
    env = serving.launch_env(arm.env, cpu=arm.cpu, hub_offline=arm.hub_offline)
    if arm.gpus is not None and not arm.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in arm.gpus)
    return LaunchPlan(arm=arm.name, kind=arm.kind, port=arm.port, argv=argv, env=env, mechanism=own.mechanism,
                      workdir=workdir, log_path=paths.server_log(workdir, arm.name),
                      state_path=paths.server_state(workdir, arm.name),
                      effective_threshold=own.effective_threshold, notes=list(own.notes), model=arm.model,
                      ready_path=layout.ready_path, engine_version=layout.version, cwd=neutral_cwd(workdir),
                      device=arm.device)
