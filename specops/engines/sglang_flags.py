"""SGLang's words for an arm: its launch flags, the adaptive mechanism the tree has, and the
refusal of an arm the tree cannot run, before anything is launched (`word_arm`, behind
`SGLang.arm_flags`).

The flags depend on what the tree supports (flag names change across SGLang versions, and the
adaptive arm has two mechanisms: native tiers from 0.5.14 on, the dynamic-spec-disable patch
before), so they are built from the tree's layout and checked against its own parser.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Mapping, Protocol, Sequence

from specops.engines.base import ArmFlags, ServingEngine, model_on_host
from specops.errors import ConfigError
from specops.hostfiles import paths
from specops.launchargs import args_from_argv
from specops.sglang.adaptive import decode_graphs_off
from specops.sglang.flags import FlagSet

if TYPE_CHECKING:
    from specops.servers.arms import ArmSpec

HOST = "127.0.0.1"


class LayoutLike(Protocol):
    """What the flags need from `specops.sglang.layout.SGLangLayout`."""

    version: str | None
    adaptive_zero_steps: bool
    cuda_graph_flag: str | None
    dynamic_spec_disable_applied: bool
    ready_path: str
    notes: list[str]

    @property
    def flags(self) -> FlagSet | None: ...


def _common_flags(arm: ArmSpec, cuda_graph_flag: str, workdir: str) -> list[str]:
    return ["--model-path", model_on_host(arm.model, workdir), "--host", HOST, "--port", str(arm.port),
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
              bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
    """A spec-off arm's mechanism, flags, config and note: native tiers of 0 steps from batch 1,
    else the patch's threshold -1."""
    if layout.adaptive_zero_steps:
        plan = serving.tier_config(NEVER_DRAFT, arm.cuda_graph_max_bs, bucket_sources,
                                   launch_steps=arm.num_steps, max_batch=arm.max_running_requests,
                                   graphs=_decode_graphs(arm))
        path = paths.adaptive_config(workdir, arm.name)
        return ArmFlags(serving.adaptive_flags(path), "spec-off (native tiers)",
                        notes=[SPEC_OFF_NOTE.format(how="native tiers, 0 steps from batch 1")], config_path=path,
                        config_json=json.dumps(plan.config, indent=2, sort_keys=True) + "\n")
    if layout.dynamic_spec_disable_applied:
        return ArmFlags([serving.patch_threshold_flag, str(PATCH_NEVER)],
                        f"spec-off (dynamic-spec-disable patch, threshold {PATCH_NEVER})",
                        notes=[SPEC_OFF_NOTE.format(how=f"patch threshold {PATCH_NEVER}")])
    raise ConfigError(
        f"a spec-off arm needs a server that can draft 0 steps at every batch size; the SGLang tree "
        f"({layout.version or 'unknown version'}) has neither zero-step adaptive tiers nor the dynamic-spec-disable "
        f"patch", where=where,
        hint="apply the `dynamic-spec-disable` patch set to the tree (its threshold -1 never drafts), "
             "or use SGLang >= 0.5.14")


def _decode_graphs(arm: ArmSpec) -> bool:
    """Whether the arm runs decode CUDA graphs (its extra_args do not turn them off): only then
    does SGLang pad the running batch to a capture bucket before it picks a tier."""
    return not decode_graphs_off(args_from_argv(arm.extra_args))


def _adaptive(arm: ArmSpec, layout: LayoutLike, serving: ServingEngine, workdir: str,
              bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
    """The adaptive arm's mechanism: native tiers where the tree has them, else the patch's threshold."""
    assert arm.threshold is not None and arm.num_steps is not None
    if layout.adaptive_zero_steps:
        if arm.eagle_topk != 1:
            raise ConfigError(f"native adaptive speculation supports eagle_topk 1 only, got {arm.eagle_topk}",
                              where=where)
        config_path = paths.adaptive_config(workdir, arm.name)
        out = ArmFlags(serving.adaptive_flags(config_path), "native-adaptive", config_path=config_path)
        if arm.tiers:
            tiers = serving.tier_config(arm.tiers, arm.cuda_graph_max_bs, bucket_sources,
                                        launch_steps=arm.num_steps, max_batch=arm.max_running_requests,
                                        graphs=_decode_graphs(arm))
            out.config_json = json.dumps(tiers.config, indent=2, sort_keys=True) + "\n"
            out.effective_threshold = tiers.effective_threshold
            out.notes.append(tiers.note())
        else:
            plan = serving.adaptive_config(arm.threshold, arm.num_steps, arm.cuda_graph_max_bs, bucket_sources,
                                           graphs=_decode_graphs(arm))
            out.config_json = json.dumps(plan.config, indent=2, sort_keys=True) + "\n"
            out.effective_threshold = plan.effective_threshold
            out.notes.append(plan.note() + (f" (buckets from {plan.buckets_source})" if plan.buckets else ""))
        return out
    if layout.dynamic_spec_disable_applied:
        return ArmFlags([serving.patch_threshold_flag, str(arm.threshold)], "dynamic-spec-disable-patch",
                        arm.threshold, [f"speculation disabled when the running batch exceeds {arm.threshold}"])
    version = layout.version or "unknown version"
    raise ConfigError(
        f"the SGLang tree ({version}) has neither zero-step adaptive tiers nor the "
        f"dynamic-spec-disable patch, so the adaptive arm cannot run",
        where=where,
        hint="apply the `dynamic-spec-disable` patch set to the tree, or use SGLang >= 0.5.14")


def word_arm(serving: ServingEngine, arm: ArmSpec, layout: LayoutLike, *, workdir: str,
              bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
    """The arm's whole flag list in SGLang's words and its mechanism, checked against the tree's parser."""
    tree_flags, graph_flag = _tree_flags(layout, where)
    flags = _common_flags(arm, graph_flag, workdir)
    if arm.kind == "baseline":
        out = ArmFlags([], "none")
    elif arm.kind == "eagle3":
        out = ArmFlags(_eagle_flags(arm, serving), "eagle3")
    elif arm.kind == "spec-off":
        flags += _eagle_flags(arm, serving)
        out = _spec_off(arm, layout, serving, workdir, bucket_sources, where)
    else:
        flags += _eagle_flags(arm, serving)
        out = _adaptive(arm, layout, serving, workdir, bucket_sources, where)
    flags += out.flags
    flags += _placement_flags(arm)
    flags += _device_flags(arm, tree_flags)
    flags += arm.extra_args
    check_flags(tree_flags, serving.parser_flags(flags, where), version=layout.version, where=where)
    out.flags = flags
    return out
