"""Issue 17: `--var` has the highest precedence, also over playbook vars derived from it."""

from __future__ import annotations

from pathlib import Path

from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.data import shipped_playbooks
from specops.run.engine import resolve_vars
from specops.steps import KINDS
from tests.support.deploy import inventory


def test_var_is_applied_before_playbook_vars_are_rendered(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path,
                                   {"box": {"connection": "local", "engine": "sim", "vars": {"sglang_ref": "v0.5.14"}}},
                                   {"sglang_ref": "v0.5.10.post1"}))
    pb = load_playbook(shipped_playbooks() / "deploy.yaml", KINDS)  # sglang_version: "{{ sglang_ref | replace(...) }}"
    host = inv.hosts["box"]
    assert resolve_vars(inv, pb, host, {}, "/w")["sglang_version"] == "0.5.14"  # host beats inventory
    got = resolve_vars(inv, pb, host, {"sglang_ref": "v0.5.23"}, "/w")
    assert (got["sglang_ref"], got["sglang_version"]) == ("v0.5.23", "0.5.23")
    got = resolve_vars(inv, pb, host, {"sglang_version": "0.5.19", "workdir": "/other"}, "/w")
    assert got["sglang_version"] == "0.5.19" and got["sglang_ref"] == "v0.5.14"
    assert got["sglang_dir"] == "/other/sglang"  # derived vars see every --var
