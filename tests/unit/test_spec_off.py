"""Issue 39 point 4: the `spec-off` arm, the speculative server with drafting off at every
batch size, measured beside the true baseline for the tax of staying speculation-capable."""

from __future__ import annotations

import json

import pytest

from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers.arms import ALLOWED_KEYS, arms_from_vars
from specops.servers.launch import build_launch
from specops.sglang.layout import detect_layout
from specops.sglang.source import ensure_tree
from tests.support.sglang_trees import apply_set

VARS = {"model": "m", "draft_model": "d", "max_running_requests": 64, "cuda_graph_max_bs": 64}


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def test_the_kind_is_named_or_inferred_and_takes_the_eagle_keys_only() -> None:
    arms = arms_from_vars({**VARS, "arms": {"baseline": {}, "spec-off": {"num_steps": 2},
                                            "off": {"kind": "spec-off"}}})
    assert arms["spec-off"].kind == arms["off"].kind == "spec-off"
    assert arms["spec-off"].num_steps == 2 and arms["spec-off"].draft_model == "d"
    assert "threshold" not in ALLOWED_KEYS["spec-off"] and "tiers" not in ALLOWED_KEYS["spec-off"]
    with pytest.raises(ConfigError, match="unknown key 'threshold' in arm 'spec-off' .only valid for adaptive arms"):
        arms_from_vars({**VARS, "arms": {"spec-off": {"threshold": 4}}})


def test_on_a_native_tree_every_tier_has_zero_steps() -> None:
    arm = arms_from_vars({**VARS, "arms": {"spec-off": {}}})["spec-off"]
    layout = detect_layout(LocalTreeFiles(ensure_tree("0.5.14")))
    plan = build_launch(arm, layout, workdir="/w", python="python3")
    assert plan.mechanism == "spec-off (native tiers)" and plan.kind == "spec-off"
    assert _flag(plan.argv, "--speculative-algorithm") == "EAGLE3"    # the speculative server, draft model loaded
    assert _flag(plan.argv, "--speculative-adaptive-config") == plan.config_path
    config = json.loads(plan.config_json or "{}")
    # 0 steps from batch 1; the launch's 3 steps listed above every batch the server forms (64):
    # SGLang 0.5.14 sizes its draft buffers by the largest candidate and starts on the launch's
    # steps, so a config of zero-step tiers alone does not start under --speculative-num-steps 3
    assert {k: v["candidate_steps"] for k, v in config.items()} == {"1": [0], "65": [3]}
    assert _flag(plan.argv, "--speculative-num-steps") == "3"
    assert plan.effective_threshold is None and "drafting off at every running batch" in plan.notes[0]


def test_on_a_patched_tree_the_threshold_says_never(sglang_tree) -> None:
    """The dynamic-spec-disable patch's threshold -1: never draft (0 stays "always")."""

    arm = arms_from_vars({**VARS, "arms": {"spec-off": {}}})["spec-off"]
    tree = sglang_tree("0.5.10.post1")
    with pytest.raises(ConfigError) as err:   # unpatched: no way to say it, and the error says what to do
        build_launch(arm, detect_layout(LocalTreeFiles(tree)), workdir="/w")
    assert "spec-off" in str(err.value) and "dynamic-spec-disable" in (err.value.hint or "")
    apply_set("dynamic-spec-disable", tree)
    plan = build_launch(arm, detect_layout(LocalTreeFiles(tree)), workdir="/w")   # the tree's own parser takes -1
    assert plan.mechanism == "spec-off (dynamic-spec-disable patch, threshold -1)"
    assert _flag(plan.argv, "--speculative-disable-batch-threshold") == "-1"
    assert plan.config_json is None and "drafting off at every running batch" in plan.notes[0]


def test_the_report_states_the_capable_tax_per_level(tmp_path) -> None:
    """spec-off / baseline at every level, on the terminal's headline, report.md, report.html
    and summary.json; the arm is found by its records' mechanism, whatever its name."""
    from specops.records import store
    from specops.records.schema import ResultRecord
    from specops.report.artifacts import render_report

    tps = {"baseline": {1: 100.0, 4: 300.0, 16: 700.0}, "off": {1: 97.0, 4: 291.0, 16: 686.0},
           "eagle3": {1: 150.0, 4: 330.0, 16: 350.0}}
    for arm, levels in tps.items():
        mechanism = "spec-off (native tiers)" if arm == "off" else "m"
        for c, v in levels.items():
            store.append_result(tmp_path, ResultRecord(host="local", arm=arm, mechanism=mechanism, concurrency=c,
                                                       repeat=0, completed=16, output_throughput=v,
                                                       input_len=32, output_len=32, num_prompts=16),
                                rewrite_csv=False)
    store.write_manifest(tmp_path, {"run_id": "r"})
    summary = render_report(tmp_path, plots=False)
    tax = summary.hosts[0].capable_tax
    assert tax is not None and tax.arm == "off"
    assert tax.ratios == pytest.approx({1: 0.97, 4: 0.97, 16: 0.98})
    line = ("tax of staying speculation-capable (off / baseline, drafting off at every batch): mean 0.973x, "
            "worst 0.970x at c=1, over c=1,4,16; per level: c=1 0.970x, c=4 0.970x, c=16 0.980x")
    assert line in summary.headline
    assert line in (tmp_path / "report.md").read_text() and line in (tmp_path / "report.html").read_text()
    doc = json.loads((tmp_path / "summary.json").read_text())["hosts"][0]["speculation_capable_tax"]
    assert doc["arm"] == "off" and doc["worst"] == {"concurrency": 1, "ratio": pytest.approx(0.97)}
    assert [x["concurrency"] for x in doc["levels"]] == [1, 4, 16]
    assert summary.hosts[0].tax is None   # no adaptive arm: the other tax is not made up
