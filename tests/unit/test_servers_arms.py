"""Arm profiles, launch commands per real SGLang layout, and the adaptive config checked
against SGLang's own routing code."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers.arms import arms_from_vars
from specops.servers.fairness import fairness_warnings
from specops.servers.launch import build_launch
from specops.sglang.adaptive import adaptive_config, buckets_from_source, default_spec_buckets
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from tests.support.sglang_trees import apply_set

VARS = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
    "max_running_requests": 64,
    "cuda_graph_max_bs": 64,
    "arms": {
        "baseline": {"port": 30000, "gpus": [0]},
        "eagle3": {"port": 30001, "gpus": [1], "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4},
        "adaptive": {"port": 30002, "gpus": [2], "threshold": 10, "num_steps": 3, "eagle_topk": 1,
                     "num_draft_tokens": 4},
    },
}


SERVER_ARGS = "python/sglang/srt/server_args.py"


def _vars(**arms) -> dict:
    return {**VARS, "arms": arms}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_arms_defaults_and_kinds() -> None:
    arms = arms_from_vars({"model": "m", "draft_model": "d", "arms": {
        "baseline": None, "eagle3": {}, "adaptive-small": {"threshold": 4}, "mine": {"kind": "eagle3"}}})
    assert [a.port for a in arms.values()] == [30000, 30001, 30002, 30003]
    assert arms["adaptive-small"].kind == "adaptive" and arms["mine"].kind == "eagle3"
    e = arms["eagle3"]
    assert (e.num_steps, e.eagle_topk, e.num_draft_tokens) == (3, 1, 4)
    assert all(a.max_running_requests == 64 == a.cuda_graph_max_bs for a in arms.values())


@pytest.mark.parametrize("arms, needle", [
    ({"eagle3": {"num_step": 3}}, "vars.arms.eagle3: unknown key 'num_step' in arm 'eagle3' (did you mean 'num_steps'?); allowed: kind,"),
    ({"baseline": {"threshold": 3}}, "unknown key 'threshold' in arm 'baseline' (only valid for adaptive arms)"),
    ({"eagle3": {"max_running_requests": 48}}, "cannot be set per arm"),
    ({"baseline": {"port": "30000"}}, "vars.arms.baseline: 'port' in arm 'baseline' must be an integer"),
    ({"adaptive": {}}, "vars.arms.adaptive: adaptive arm needs 'threshold'"),
    ({"fast": {}}, "cannot tell the kind of arm 'fast'"),
    ({"x": {"kind": "eagle"}}, "did you mean 'eagle3'"),
    ({"baseline": {"gpus": "a"}}, "'gpus' in arm 'baseline' must be a list"),
    ({"baseline": {"port": 1}, "eagle3": {"port": 1}}, "port 1 of arm 'eagle3' is already used by arm 'baseline'"),
    ({"eagle3": {"num_steps": 3, "num_draft_tokens": 8}}, "num_draft_tokens must be num_steps + 1"),
])
def test_arm_errors_name_arm_and_key(arms: dict, needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        arms_from_vars(_vars(**arms))
    assert needle in str(exc.value)


@pytest.mark.parametrize("version, graph_flag", [("0.5.10.post1", "--cuda-graph-max-bs"),
                                                 ("0.5.14", "--cuda-graph-max-bs-decode")])
def test_launch_argv_per_layout(version: str, graph_flag: str) -> None:
    layout = detect_layout(LocalTreeFiles(ensure_tree(version)))
    arms = arms_from_vars(VARS)
    plans = {n: build_launch(a, layout, workdir="/w", python="python3")
             for n, a in arms.items() if n != "adaptive"}
    for n, p in plans.items():
        assert p.argv[:3] == ["python3", "-m", "sglang.launch_server"]
        assert _flag(p.argv, "--max-running-requests") == "64" and _flag(p.argv, graph_flag) == "64"
        assert _flag(p.argv, "--port") == str(arms[n].port) and _flag(p.argv, "--host") == "127.0.0.1"
    assert plans["baseline"].mechanism == "none" and "--speculative-algorithm" not in plans["baseline"].argv
    e = plans["eagle3"].argv
    assert _flag(e, "--speculative-algorithm") == "EAGLE3"
    assert _flag(e, "--speculative-draft-model-path") == VARS["draft_model"]
    assert [_flag(e, f"--speculative-{k}") for k in ("num-steps", "eagle-topk", "num-draft-tokens")] == ["3", "1", "4"]
    # its GPU, and no Hub downloads inside the readiness wait (the weights step settled them)
    assert plans["eagle3"].env == {"CUDA_VISIBLE_DEVICES": "1", "HF_HUB_OFFLINE": "1"}
    assert plans["eagle3"].log_path == "/w/.specops/logs/eagle3.log"
    assert plans["eagle3"].state_path == "/w/.specops/servers/eagle3.json"


def test_adaptive_mechanism_per_tree(sglang_tree) -> None:
    arm = arms_from_vars(VARS)["adaptive"]
    tree = sglang_tree("0.5.10.post1")
    old = detect_layout(LocalTreeFiles(tree))
    with pytest.raises(ConfigError) as exc:
        build_launch(arm, old, workdir="/w")
    assert "dynamic-spec-disable" in str(exc.value) and "0.5.14" in str(exc.value)

    # A stale layout that claims the patch: the tree's own parser refuses the flag before launch.
    old.dynamic_spec_disable_applied = True
    with pytest.raises(ConfigError) as exc:
        build_launch(arm, old, workdir="/w")
    assert ("SGLang 0.5.10.post1 would refuse this launch: unrecognized arguments: "
            "--speculative-disable-batch-threshold 10") in str(exc.value)

    apply_set("dynamic-spec-disable", tree)
    patched = detect_layout(LocalTreeFiles(tree))
    p = build_launch(arm, patched, workdir="/w")
    assert p.mechanism == "dynamic-spec-disable-patch" and patched.adaptive_mechanism == p.mechanism
    assert _flag(p.argv, "--speculative-disable-batch-threshold") == "10"

    tree = ensure_tree("0.5.14")
    new = detect_layout(LocalTreeFiles(tree))
    src = {"python/sglang/srt/server_args.py": (tree / "python/sglang/srt/server_args.py").read_text()}
    p = build_launch(arm, new, workdir="/w", bucket_sources=src)
    assert p.mechanism == "native-adaptive" == new.adaptive_mechanism
    assert "--speculative-adaptive" in p.argv
    assert _flag(p.argv, "--speculative-adaptive-config") == p.config_path == "/w/.specops/servers/adaptive.adaptive.json"
    assert p.effective_threshold == 10 and "buckets from python/sglang/srt/server_args.py" in p.notes[0]
    # Changing the threshold changes the args hash (so a running server is restarted).
    arm2 = arms_from_vars({**VARS, "arms": {"adaptive": {**VARS["arms"]["adaptive"], "threshold": 11}}})["adaptive"]
    p2 = build_launch(arm2, new, workdir="/w", bucket_sources=src)
    assert p2.effective_threshold == 12 and p2.args_hash != p.args_hash and p2.argv == p.argv


def _sglang_router(tree: Path) -> type:
    """SGLang 0.5.14's own AdaptiveSpeculativeParams, loaded from the tree (its only
    runtime import, a logging helper, stubbed)."""
    src = (tree / "python/sglang/srt/speculative/adaptive_spec_params.py").read_text()
    stub = types.ModuleType("sglang.srt.utils")
    stub.log_info_on_rank0 = lambda logger, msg: None  # type: ignore[attr-defined]
    for name in ("sglang", "sglang.srt"):
        sys.modules.setdefault(name, types.ModuleType(name))
    saved = sys.modules.get("sglang.srt.utils")
    sys.modules["sglang.srt.utils"] = stub
    try:
        ns: dict = {"__name__": "adaptive_spec_params_0514"}
        exec(compile(src, "adaptive_spec_params.py", "exec"), ns)
    finally:
        if saved is None:
            del sys.modules["sglang.srt.utils"]
        else:
            sys.modules["sglang.srt.utils"] = saved
    return ns["AdaptiveSpeculativeParams"]


@pytest.mark.parametrize("threshold", [1, 7, 9, 10, 11, 33, 64, 100])
def test_generated_config_routes_as_reported_in_sglang(threshold: int, tmp_path: Path) -> None:
    tree = ensure_tree("0.5.14")
    src = (tree / "python/sglang/srt/server_args.py").read_text()
    plan = adaptive_config(threshold, 3, 64, src)
    assert plan.effective_threshold >= threshold
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps(plan.config))
    params = _sglang_router(tree)(initial_steps=3, cfg_path=str(cfg))
    params.set_cuda_graph_bs(plan.buckets)
    for bs in range(1, 65):
        want = 3 if bs <= plan.effective_threshold else 0
        assert params.get_steps_for_batch(bs) == want, (threshold, bs)


@pytest.mark.parametrize("graph_args", [[], ["--disable-cuda-graph"]], ids=["graphs", "no-graphs"])
@pytest.mark.parametrize("threshold", [1, 9, 10, 11, 33])
def test_the_launched_config_switches_where_sglang_routes_with_or_without_cuda_graphs(
        threshold: int, graph_args: list[str], tmp_path: Path) -> None:
    """SGLang 0.5.14 pads a running batch to its CUDA-graph bucket before it picks a tier, but only
    when graphs are on: `--disable-cuda-graph` gives its router no bucket list (eagle_worker_v2
    `init_states(cuda_graph_bs=None if disable_cuda_graph ...)`), so it routes by the batch itself.
    On real SGLang 0.5.14 on CPU (graphs off) a threshold-11 arm drafted at 12 and a threshold-9 arm
    at 10: the config had been padded as if graphs were on (2026-12-06)."""
    tree = ensure_tree("0.5.14")
    src = {SERVER_ARGS: (tree / SERVER_ARGS).read_text()}
    adaptive = {**VARS["arms"]["adaptive"], "threshold": threshold, "extra_args": graph_args}
    arm = arms_from_vars(_vars(adaptive=adaptive))["adaptive"]
    plan = build_launch(arm, detect_layout(LocalTreeFiles(tree)), workdir="/w", bucket_sources=src)
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(plan.config_json or "")
    params = _sglang_router(tree)(initial_steps=3, cfg_path=str(cfg))
    params.set_cuda_graph_bs(None if graph_args else buckets_from_source(src[SERVER_ARGS], VARS["cuda_graph_max_bs"]))
    drafting = [bs for bs in range(1, 65) if params.get_steps_for_batch(bs) == 3]
    assert drafting == list(range(1, plan.effective_threshold + 1)), (threshold, drafting)
    if graph_args:   # no padding: the threshold the user asked for is the one they get
        assert plan.effective_threshold == threshold and "CUDA graphs off" in plan.notes[0], plan.notes
    else:
        assert plan.effective_threshold >= threshold


def test_bucket_list_read_from_tree_matches_documented_default() -> None:
    for v in ("0.5.4", "0.5.10.post1", "0.5.14"):
        src = (ensure_tree(v) / "python/sglang/srt/server_args.py").read_text()
        assert buckets_from_source(src, 64) == default_spec_buckets(64)
        assert buckets_from_source(src, 100)[-3:] == [88, 96, 100]
    assert buckets_from_source("def f(:\n", 64) is None
    assert default_spec_buckets(20)[-3:] == [16, 18, 20]


def test_fairness_warnings_ignore_speculative_args() -> None:
    base = {"max_running_requests": 64, "cuda_graph_max_bs": 64, "port": 30000, "tp_size": 1,
            "speculative_algorithm": None, "internal_states": [{"x": 1}]}
    eagle = {**base, "port": 30001, "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3,
             "internal_states": [{"avg_spec_accept_length": 2.5}]}
    assert fairness_warnings({"baseline": base, "eagle3": eagle}) == []
    capped = {**eagle, "max_running_requests": 48}
    (w,) = fairness_warnings({"baseline": base, "eagle3": capped})
    assert "max_running_requests" in w and "baseline=64" in w and "eagle3=48" in w
