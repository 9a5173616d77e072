"""One loader and one schema checker for every YAML file: the same mistake reads the same
way in hosts.yaml, a playbook, a patch set, an arm profile or the bench settings."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from specops.bench.settings import BenchSettings
from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.config.yamlfile import load_text
from specops.errors import ConfigError
from specops.patching.model import load_patchset, parse_patchset
from specops.servers.arms import arms_from_vars
from specops.steps import KINDS

#: where: unknown key 'KEY' in WHAT (did you mean 'CLOSE'?); allowed: ...
SHAPE = re.compile(r"^(?P<where>.+?): unknown key '(?P<key>\w+)' in (?P<what>.+?) "
                   r"\(did you mean '(?P<close>\w+)'\?\); allowed: \w+")

PATCHSET = """\
name: small
edits:
  - name: field
    file: pkg/mod.py
    op: insert_after
    anchor: {class: A, field: b}
    text: "c: int = 0"
"""


def _error(fn, *args) -> str:
    with pytest.raises(ConfigError) as err:
        fn(*args)
    return str(err.value)


def _shape(message: str) -> dict[str, str]:
    match = SHAPE.match(message)
    assert match, message
    return match.groupdict()


def test_duplicate_key_in_a_patch_set_is_an_error_naming_file_and_line(tmp_path: Path) -> None:
    """The patch-set loader used to keep the last of two equal keys without a word."""
    path = tmp_path / "small.yaml"
    path.write_text(PATCHSET + "    op: replace\n")
    assert _error(load_patchset, str(path)) == f"{path}:8: duplicate key 'op' (first at line 5)"
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  a: {address: x}\n  a: {address: y}\n")
    assert _error(load_inventory, inventory) == f"{inventory}:3: duplicate key 'a' (first at line 2)"


def test_unknown_key_reads_the_same_in_every_yaml_file(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  gpu-a:\n    adress: 10.0.0.5\n")
    host = _shape(_error(load_inventory, inventory))
    assert host == {"where": f"{inventory}:3", "key": "adress", "what": "host 'gpu-a'", "close": "address"}

    playbook = tmp_path / "p.yaml"
    playbook.write_text("steps:\n  - name: a\n    shell: echo hi\n    retires: 3\n")
    step = _shape(_error(load_playbook, playbook, KINDS))
    assert step == {"where": f"{playbook}:4", "key": "retires", "what": "step 1", "close": "retries"}

    edit = _shape(_error(parse_patchset, PATCHSET.replace("    anchor:", "    anchr:"), "small.yaml"))
    assert edit == {"where": "small.yaml:6", "key": "anchr", "what": "edit 'field'", "close": "anchor"}
    top = _shape(_error(parse_patchset, "descripton: x\n" + PATCHSET, "small.yaml"))
    assert top == {"where": "small.yaml:1", "key": "descripton", "what": "the patch set", "close": "description"}

    # arm profiles in hosts.yaml keep their lines all the way to the server step
    inventory.write_text("hosts:\n  local: {connection: local}\nvars:\n  model: m\n  draft_model: d\n"
                         "  arms:\n    baseline: {port: 30000}\n    eagle3:\n      num_step: 3\n")
    inv = load_inventory(inventory)
    arm = _shape(_error(arms_from_vars, inv.host_vars(inv.hosts["local"])))
    assert arm == {"where": f"{inventory}:9", "key": "num_step", "what": "arm 'eagle3'", "close": "num_steps"}

    settings = load_text("arms: [baseline]\nconcurrency: [1]\nrepeat: 2\n", "bench.yaml")
    bench = _shape(_error(BenchSettings.from_dict, settings))
    assert bench == {"where": "bench.yaml:3", "key": "repeat", "what": "bench settings", "close": "repeats"}
    # settings from the command line have no file: the caller's place stands in for file:line
    cli = _shape(_error(BenchSettings.from_dict, {"arms": ["baseline"], "num_promts": 8}, "specops bench"))
    assert cli == {"where": "specops bench", "key": "num_promts", "what": "bench settings", "close": "num_prompts"}


def test_wrong_type_and_bad_choice_read_the_same_everywhere(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  a: {address: x, port: '22'}\n")
    assert _error(load_inventory, inventory).endswith(":2: 'port' in host 'a' must be an integer, got a string")
    bench = load_text("num_prompts: '3'\n", "bench.yaml")  # (repeats takes a string too: auto[:MAX])
    assert _error(BenchSettings.from_dict, bench) == "bench.yaml:1: 'num_prompts' in bench settings must be an " \
                                                    "integer, got a string"
    edit = PATCHSET.replace("op: insert_after", "op: insert_afer")
    assert _error(parse_patchset, edit, "s.yaml") == ("s.yaml:5: 'op' in edit 'field' must be one of insert_after, "
                                                     "insert_before, replace, delete, diff, got 'insert_afer' "
                                                     "(did you mean 'insert_after'?)")
    assert _error(BenchSettings.from_dict, load_text("runner: builtn\n", "b.yaml")) == \
        "b.yaml:1: 'runner' in bench settings must be one of auto, builtin, sglang, got 'builtn' " \
        "(did you mean 'builtin'?)"
