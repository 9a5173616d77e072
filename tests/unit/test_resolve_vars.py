"""Issue 17: `--var` has the highest precedence, also over playbook vars derived from it."""

from __future__ import annotations

from pathlib import Path

from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.data import shipped_playbooks
from specops.run.engine import resolve_vars
from specops.steps import KINDS
from tests.support.deploy import inventory, write_yaml


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


def test_a_key_set_in_hosts_yaml_beats_the_playbook_default(tmp_path: Path) -> None:
    """Issue 55: `vllm_version: "0.31.0"` in hosts.yaml planned 0.32.0 (the playbook's value)
    without a word. Playbook vars are defaults: host, group and inventory vars beat them."""
    inv = load_inventory(inventory(tmp_path, {"box": {"connection": "local", "engine": "vllm", "device": "cpu",
                                                      "vars": {"vllm_version": "0.31.0"}}},
                                   {"sglang_dir": "/opt/sglang", "arms": {"baseline": {"port": 1}}}))
    host = inv.hosts["box"]
    for book in ("deploy.yaml", "bench.yaml"):
        pb = load_playbook(shipped_playbooks() / book, KINDS)
        assert pb.vars["vllm_version"] == "0.32.0"  # the default a user's setting replaces
        got = resolve_vars(inv, pb, host, {}, "/w")
        assert (got["vllm_version"], got["sglang_dir"], got["vllm_dir"]) == ("0.31.0", "/opt/sglang", "/w/vllm")
        assert resolve_vars(inv, pb, host, {"vllm_version": "0.30.0"}, "/w")["vllm_version"] == "0.30.0"


def test_a_mapping_in_hosts_yaml_merges_over_the_playbook_mapping(tmp_path: Path) -> None:
    inv = load_inventory(inventory(tmp_path, {"box": {"connection": "local", "engine": "sim",
                                                      "vars": {"extra": {"b": 3}}}}))
    pb = load_playbook(write_yaml(tmp_path / "p.yaml", {"name": "p", "vars": {"extra": {"a": 1, "b": 2}},
                                                        "steps": [{"name": "s", "shell": "true"}]}), KINDS)
    host = inv.hosts["box"]
    assert resolve_vars(inv, pb, host, {}, "/w")["extra"] == {"a": 1, "b": 3}
    assert resolve_vars(inv, pb, host, {"extra.b": 4}, "/w")["extra"] == {"a": 1, "b": 4}
