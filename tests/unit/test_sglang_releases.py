"""Issue 17: one flag reader for every SGLang layout, judged on the real wheels of one
release per layout change (0.4.10.post2 ... 0.5.23), and launch plans per release checked
by the simulator's parser for that tree before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from specops.cli.patch import patch
from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers.arms import arms_from_vars
from specops.servers.launch import build_launch
from specops.servers.plans import bucket_sources
from specops.sglang.flags import tree_flags
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from specops.sim.knobs import split_knobs
from tests.support.sglang_trees import CI_RELEASES, CURRENT_VERSION, Expected, apply_set

VARS = {
    "model": "meta-llama/Llama-3.1-8B-Instruct",
    "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
    "max_running_requests": 64,
    "cuda_graph_max_bs": 64,
    "arms": {"baseline": {"port": 30000}, "eagle3": {"port": 30001},
             "adaptive": {"port": 30002, "threshold": 8}},
}
IDS = [e.version for e in CI_RELEASES]


@pytest.mark.parametrize("exp", CI_RELEASES, ids=IDS)
def test_detection_matches_the_real_parser(exp: Expected) -> None:
    layout = detect_layout(LocalTreeFiles(ensure_tree(exp.version)))
    assert layout.version == exp.version and layout.flags is not None
    assert layout.flags_layout == exp.layout
    # the reader finds what SGLang's own parser registers (counted once from the real one)
    assert abs(len(layout.flags.flags) - exp.actions) <= 2, len(layout.flags.flags)
    assert abs(len(layout.server_flags) - exp.option_strings) <= 3, len(layout.server_flags)
    assert layout.cuda_graph_flag == exp.cuda_graph_flag
    assert layout.adaptive_mechanism == exp.mechanism
    assert layout.ready_path == exp.ready_path
    assert layout.bench_module == exp.bench_module
    assert not layout.notes


def test_current_release_reads_flags_from_arg_groups_fields() -> None:
    """The defect: server_args.py alone held 12 flags on 0.5.20+, so detection fell back to
    --cuda-graph-max-bs, which 0.5.23's parser finds ambiguous."""
    flags = tree_flags(ensure_tree(CURRENT_VERSION))
    assert any("arg_groups/fields/spec.py" in s for s in flags.sources)
    assert flags.matches("--cuda-graph-max-bs") == ["--cuda-graph-max-bs-decode", "--cuda-graph-max-bs-prefill"]
    assert flags.check(["--model-path", "m", "--cuda-graph-max-bs", "8"]) == (
        "ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill")
    spec = flags.find("--speculative-adaptive")
    assert spec is not None and spec.nargs == 0 and spec.default is False
    # BooleanOptionalAction registers the --no- form as argparse does
    assert flags.has_flag("--no-experts-shared-outer-loras")
    # aliases and defaults come from the fields
    assert flags.find("--model") is flags.find("--model-path")
    assert flags.parse(["--model", "m"])["port"] == 30000


def _plans(tree: Path, exp: Expected) -> dict:
    files = LocalTreeFiles(tree)
    if exp.mechanism == "needs-patch":
        apply_set("dynamic-spec-disable", tree)
    layout = detect_layout(files)
    return {name: build_launch(arm, layout, workdir="/w", python="python3", engine="sim",
                               sglang_tree=str(tree), sim_options=["--sim-time-scale", "0.05"],
                               bucket_sources=bucket_sources(files, layout))
            for name, arm in arms_from_vars(VARS).items()}


@pytest.mark.parametrize("exp", CI_RELEASES, ids=IDS)
def test_three_arms_plans_are_accepted_by_the_simulators_parser(exp: Expected, sglang_tree) -> None:
    # a committed copy only where the patch set will change the tree; the cache is read-only here
    tree = sglang_tree(exp.version) if exp.mechanism == "needs-patch" else ensure_tree(exp.version)
    plans = _plans(tree, exp)
    assert plans["adaptive"].mechanism == ("dynamic-spec-disable-patch" if exp.mechanism == "needs-patch"
                                           else "native-adaptive")
    flags = tree_flags(tree)  # what `python -m specops.sim --sglang-tree TREE` parses with
    for name, plan in plans.items():
        sglang_argv = split_knobs(plan.argv[3:])[1]
        assert flags.check(sglang_argv) is None, (name, flags.check(sglang_argv))
        args = flags.parse(sglang_argv)
        assert args["max_running_requests"] == 64
        assert args.get("cuda_graph_max_bs_decode", args.get("cuda_graph_max_bs")) == 64
        assert plan.ready_path == exp.ready_path and plan.engine_version == exp.version
    if exp.mechanism == "native-adaptive":  # a zero-step tier above the threshold
        tiers = json.loads(plans["adaptive"].config_json or "{}")
        assert [t["candidate_steps"] for _, t in sorted(tiers.items(), key=lambda kv: int(kv[0]))] == [[3], [0]]


def test_adaptive_buckets_on_current_release_come_from_cuda_graph_hook() -> None:
    exp = next(e for e in CI_RELEASES if e.version == CURRENT_VERSION)
    plan = _plans(ensure_tree(CURRENT_VERSION), exp)["adaptive"]
    assert "buckets from python/sglang/srt/arg_groups/cuda_graph_hook.py" in plan.notes[0]
    assert plan.effective_threshold == 8


def test_a_flag_the_tree_would_find_ambiguous_is_refused_before_launch() -> None:
    layout = detect_layout(LocalTreeFiles(ensure_tree(CURRENT_VERSION)))
    arm = arms_from_vars({**VARS, "arms": {"baseline": {"extra_args": ["--cuda-graph-max-bs", "8"]}}})["baseline"]
    with pytest.raises(ConfigError) as exc:
        build_launch(arm, layout, workdir="/w", where="host gpu, arm 'baseline'")
    msg = str(exc.value)
    assert msg.startswith("host gpu, arm 'baseline': SGLang 0.5.23 would refuse this launch: "
                          "ambiguous option: --cuda-graph-max-bs could match")
    unknown = arms_from_vars({**VARS, "arms": {"eagle3": {"extra_args": ["--speculative-no-such-thing"]}}})["eagle3"]
    with pytest.raises(ConfigError, match="SGLang 0.5.23 would refuse this launch: unrecognized arguments: "
                                          "--speculative-no-such-thing"):
        build_launch(unknown, layout, workdir="/w")


def test_patch_detect_on_current_release_says_the_flag_exists() -> None:
    res = CliRunner().invoke(patch, ["detect", "--tree", str(ensure_tree(CURRENT_VERSION))])
    assert res.exit_code == 0, res.output
    assert "--speculative-adaptive: yes (zero-step tiers supported)" in res.output
    assert "cuda graph max bs flag: --cuda-graph-max-bs-decode" in res.output
    assert "server args layout:    arg_groups" in res.output
    assert "server flags found:    559" in res.output
    assert "readiness endpoint:    /ready" in res.output
