"""Layout detection judged from each real tree's own source."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from specops.cli.patch import patch
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sglang.layout import detect_layout, layout_summary


@pytest.mark.parametrize("version,workers", [
    ("0.4.10.post2", ["eagle_worker.py"]),
    ("0.5.4", ["eagle_worker.py", "eagle_worker_v2.py"]),
    ("0.5.10.post1", ["eagle_worker.py", "eagle_worker_v2.py"]),
])
def test_classic_trees(sglang_tree, version, workers):
    layout = detect_layout(LocalTreeFiles(sglang_tree(version)))
    assert layout.version == version
    assert layout.args_layout == "classic" and not layout.flags_derived_from_fields
    assert [w.rsplit("/", 1)[1] for w in layout.eagle_workers] == workers
    assert not layout.has_adaptive and not layout.adaptive_zero_steps
    assert layout.cuda_graph_flag == "--cuda-graph-max-bs"
    assert not layout.dynamic_spec_disable_applied
    assert "--speculative-accept-threshold-acc" in layout.server_flags


def test_native_adaptive_tree(sglang_tree):
    tree = sglang_tree("0.5.14")
    layout = detect_layout(LocalTreeFiles(tree))
    assert layout.version == "0.5.14"  # from the setuptools-scm generated _version.py
    assert layout.has_adaptive and layout.adaptive_zero_steps
    assert layout.cuda_graph_flag == "--cuda-graph-max-bs-decode"
    assert layout.eagle_workers == ["python/sglang/srt/speculative/eagle_worker_v2.py"]
    assert "zero-step" in layout_summary(layout)


def test_zero_steps_judged_from_source_not_version(sglang_tree):
    """Same version string, but the params file rejects 0 steps: not native."""
    tree = sglang_tree("0.5.14")
    p = tree / "python/sglang/srt/speculative/adaptive_spec_params.py"
    p.write_text(p.read_text().replace("s >= 0 for s in steps", "s >= 1 for s in steps"))
    assert not detect_layout(LocalTreeFiles(tree)).adaptive_zero_steps


def test_arg_groups_layout(sglang_tree):
    tree = sglang_tree("0.5.10.post1")
    fields = tree / "python/sglang/srt/arg_groups/fields"
    fields.mkdir(parents=True)
    (fields / "spec.py").write_text("class Spec: ...\n")
    assert detect_layout(LocalTreeFiles(tree)).args_layout == "arg_groups"


def test_cli_detect_json(sglang_tree):
    tree = sglang_tree("0.5.4")
    res = CliRunner().invoke(patch, ["detect", "--tree", str(tree), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["version"] == "0.5.4" and data["args_layout"] == "classic"


def test_cli_rejects_a_non_sglang_folder(tmp_path):
    res = CliRunner().invoke(patch, ["detect", "--tree", str(tmp_path)])
    assert res.exit_code != 0 and "not an SGLang checkout" in res.output
