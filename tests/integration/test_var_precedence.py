"""Issue 17: `--var` wins over everything, including playbook vars derived from other
variables; `sglang_wheel` is never "already verified" on a tree of another version, and
replaces a tree whose only changes are specops's own patch sets (never hand edits)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from specops.data import shipped_playbooks
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sglang.flags import tree_version
from tests.support.deploy import events, inventory, run_cli, write_yaml

SHIPPED_VARS = yaml.safe_load((shipped_playbooks() / "deploy.yaml").read_text())["vars"]


def _setup(tmp_path: Path) -> tuple[Path, Path]:
    inv = inventory(tmp_path, {"box": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}},
                    {"sglang_ref": "v0.5.10.post1"})
    pb = write_yaml(tmp_path / "p.yaml", {"name": "tree", "vars": SHIPPED_VARS, "steps": [
        {"name": "sglang source from its wheel",
         "sglang_wheel": {"version": "{{ sglang_version }}", "dest": "{{ sglang_dir }}"}},
        {"name": "patch", "patch": {"set": "dynamic-spec-disable", "tree": "{{ sglang_dir }}", "if_needed": True}}]})
    return inv, pb


def _tree_state(tmp_path: Path) -> tuple[str | None, str | None]:
    tree = tmp_path / "w/sglang"
    marker = json.loads((tree / ".specops-wheel.json").read_text())["version"]
    return marker, tree_version(LocalTreeFiles(tree))


def _last_events(tmp_path: Path) -> list[dict]:
    return events(sorted((tmp_path / "runs").iterdir())[-1])


@pytest.mark.slow  # three wheel trees unpacked as git repos: ~35 s on 2 cores
def test_var_beats_playbook_vars_derived_from_it(tmp_path: Path) -> None:
    assert SHIPPED_VARS["sglang_version"] == "{{ sglang_ref | replace('v', '', 1) if engine_face == 'sglang' else '' }}"
    inv, pb = _setup(tmp_path)
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb))
    assert res.exit_code == 0, res.output
    assert _tree_state(tmp_path) == ("0.5.10.post1", "0.5.10.post1")
    server_args = (tmp_path / "w/sglang/python/sglang/srt/server_args.py").read_text()
    assert "--speculative-disable-batch-threshold" in server_args  # patched: the tree is dirty now

    # the defect: sglang_version was rendered from the inventory's ref before --var applied,
    # so this "succeeded" on the old tree, found already verified
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "sglang_ref=v0.5.23")
    assert res.exit_code == 0, res.output
    assert _tree_state(tmp_path) == ("0.5.23", "0.5.23")
    ev = _last_events(tmp_path)
    step = [e for e in ev if e.get("step") == "sglang source from its wheel"]
    assert not any(e["event"] == "skip" for e in step)
    assert any("dropped patch set(s) dynamic-spec-disable" in json.dumps(e) for e in step)
    assert any(e["event"] == "skip" and e.get("step") == "patch" for e in ev)  # 0.5.23 needs no patch

    # a playbook var named by --var is not rendered at all: the --var value is used as is
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "sglang_version=0.5.19")
    assert res.exit_code == 0, res.output
    assert _tree_state(tmp_path) == ("0.5.19", "0.5.19")


def test_wheel_tree_of_another_version_is_not_verified_and_hand_edits_are_kept(tmp_path: Path) -> None:
    inv, pb = _setup(tmp_path)
    assert run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb),
                   "--var", "sglang_ref=v0.5.23").exit_code == 0
    # the marker says 0.5.23, the files say otherwise: not "already verified"
    version_file = tmp_path / "w/sglang/python/sglang/_version.py"
    version_file.write_text(version_file.read_text().replace("0.5.23", "0.5.22"))
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "sglang_ref=v0.5.23")
    assert res.exit_code == 1
    assert "holds another SGLang version with local changes (python/sglang/_version.py)" in res.output
    assert "(sglang_wheel): apply failed: " in res.output  # refused in apply: nothing was verified
    assert "0.5.22" in version_file.read_text(), "a hand edit is never overwritten"
