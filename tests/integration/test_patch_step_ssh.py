"""The `patch` step on a remote tree over the real sshd: apply, re-run, failed verify restores."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tests.support.deploy import events, inventory, run_cli, write_yaml
from tests.support.sglang_trees import tree_is_pristine

REPO = Path(__file__).resolve().parents[2]


def test_patch_step_over_ssh_applies_then_skips(tmp_path: Path, sshd, sglang_tree) -> None:
    tree = sglang_tree("0.5.10.post1")
    inv = inventory(tmp_path, {"gpu": sshd.host_entry(0, workdir=str(tmp_path / "w"))})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "dynamic spec disable", "patch": {"set": str(REPO / "playbooks/patches/dynamic-spec-disable.yaml"),
                                                  "tree": str(tree)}}]})
    check = run_cli("deploy", "--host", "gpu", "-p", str(pb), "-i", str(inv), "--check")
    assert check.exit_code == 0, check.output
    assert "+    speculative_disable_batch_threshold: int = 0  # 0 = always speculate" in check.output
    assert tree_is_pristine(tree), "--check must not touch the tree"
    res = run_cli("deploy", "--host", "gpu", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 0, res.output
    src = (tree / "python/sglang/srt/server_args.py").read_text()
    assert src.count('"--speculative-disable-batch-threshold",') == 1
    assert src.count("speculative_disable_batch_threshold: int = 0") == 1
    again = run_cli("deploy", "--host", "gpu", "-p", str(pb), "-i", str(inv))
    assert again.exit_code == 0
    last = sorted((tmp_path / "runs").iterdir())[-1]
    assert any(e["event"] == "skip" for e in events(last)), "an applied set is skipped on re-run"


def test_patch_step_verify_failure_leaves_remote_tree_as_before(tmp_path: Path, sshd, sglang_tree) -> None:
    tree = sglang_tree("0.5.4")
    data = yaml.safe_load((REPO / "playbooks/patches/dynamic-spec-disable.yaml").read_text())
    data["name"] = "dsd-bad-verify"
    data["verify"] = [["bash", "-c", "echo verify ran on the host >&2; exit 3"]]
    bad = write_yaml(tmp_path / "dsd-bad-verify.yaml", data)
    shutil.copy(bad, tmp_path / "dsd.yaml")
    inv = inventory(tmp_path, {"gpu": sshd.host_entry(1, workdir=str(tmp_path / "w"))})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [{"name": "patch", "patch": {"set": str(bad), "tree": str(tree)}}]})
    res = run_cli("deploy", "--host", "gpu", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1
    assert "step 1 'patch' (patch): apply failed" in res.output and "dsd-bad-verify" in res.output
    assert tree_is_pristine(tree), "a failed verify must restore every file of the set"
