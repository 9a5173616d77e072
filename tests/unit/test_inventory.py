"""hosts.yaml and playbook validation: every bad input names the file, line and key (so the
bad inventories are written as text, the lines they name being the point)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops.config import inventory
from specops.config.inventory import load_inventory
from specops.config.playbook import load_playbook
from specops.errors import ConfigError
from specops.steps import KINDS
from specops.transport import hostkeys
from tests.support import deploy


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def good(tmp_path: Path) -> inventory.Inventory:
    return load_inventory(deploy.inventory(
        tmp_path,
        {"local": {"connection": "local"},
         "gpu-a": {"address": "10.0.0.5", "port": 2222, "key": "~/.ssh/id_ed25519", "gpus": [0, 1],
                   "vars": {"model": "big"}},
         "gpu-b": {"address": "10.0.0.6"}},
        {"model": "small", "sglang_ref": "v0.5.10.post1"},
        defaults={"user": "ubuntu", "workdir": "~/specops"},
        groups={"h100": ["gpu-a", "gpu-b"], "special": {"hosts": ["gpu-b"], "vars": {"model": "special"}}}))


def test_good_inventory_selects_names_groups_and_lists(tmp_path: Path) -> None:
    inv = good(tmp_path)
    assert [h.name for h in inv.select("h100")] == ["gpu-a", "gpu-b"]
    assert [h.name for h in inv.select("local,h100,gpu-a")] == ["local", "gpu-a", "gpu-b"]
    a, b = inv.hosts["gpu-a"], inv.hosts["gpu-b"]
    assert (a.port, a.user, a.gpus, a.connection) == (2222, "ubuntu", [0, 1], "ssh")
    assert a.key and a.key.endswith(".ssh/id_ed25519") and not a.key.startswith("~")
    # precedence: inventory vars < group vars < host vars
    assert inv.host_vars(a)["model"] == "big"
    assert inv.host_vars(b)["model"] == "special"
    assert inv.host_vars(inv.hosts["local"])["model"] == "small"


@pytest.mark.parametrize("text, expected", [
    ("hosts:\n  a:\n    adress: 1.2.3.4\n", r"hosts.yaml:3: unknown key 'adress' in host 'a' \(did you mean 'address'\?\)"),
    ("hosts:\n  a: {address: 1.2.3.4, port: '22'}\n", r"hosts.yaml:2: 'port' in host 'a' must be an integer, got a string"),
    ("hosts:\n  a: {port: 22, ssh_config: false}\n", r"hosts.yaml:2: host 'a' uses ssh but has no 'address'"),
    ("hosts:\n  a: {address: x, host_key: strickt}\n", r"hosts.yaml:2: 'host_key' in host 'a' must be one of accept-new, strict, got 'strickt' \(did you mean 'strict'\?\)"),
    ("hosts:\n  a: {address: x}\ngroups:\n  g: [a, bb]\n", r"hosts.yaml:4: group 'g' names unknown host 'bb'"),
    ("hosts: [a\n", r"hosts.yaml:2: YAML syntax error"),
    ("host:\n  a: {address: x}\n", r"hosts.yaml:1: unknown key 'host' in the inventory \(did you mean 'hosts'\?\)"),
    ("hosts:\n  a: {address: x}\n  a: {address: y}\n", r"hosts.yaml:3: duplicate key 'a'"),
])
def test_bad_inventory_names_file_line_and_key(tmp_path: Path, text: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_inventory(write(tmp_path, "hosts.yaml", text))


def test_unknown_host_in_selection_suggests(tmp_path: Path) -> None:
    inv = good(tmp_path)
    with pytest.raises(ConfigError, match=r"unknown host or group 'gpu-aa'.*did you mean 'gpu-a'"):
        inv.select("gpu-aa")


def test_missing_inventory_and_playbook(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="inventory not found"):
        load_inventory(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="playbook not found"):
        load_playbook(tmp_path / "nope.yaml", KINDS)


@pytest.mark.parametrize("steps, expected", [
    ("  - name: a\n    shel: echo hi\n", r"p.yaml:3: step 1: unknown step kind 'shel' \(did you mean 'shell'\?\)"),
    ("  - name: a\n    shell: echo hi\n    retires: 3\n", r"p.yaml:4: unknown key 'retires' in step 1 \(did you mean 'retries'\?\); allowed: name, when"),
    ("  - name: a\n    shell: echo hi\n    verify: {stdout_contain: x}\n", r"unknown key 'stdout_contain' in verify \(did you mean 'stdout_contains'\?\)"),
    ("  - name: a\n    git: {repo: x, ref: y}\n", r"missing required key 'dest'"),
    ("  - name: a\n    shell: echo\n    timeout: soon\n", r"p.yaml:4: 'timeout' in step 'a' must be"),
    ("  - name: a\n    copy: {dest: /x}\n", r"copy needs exactly one of 'src' or 'content'"),
])
def test_bad_playbook(tmp_path: Path, steps: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        load_playbook(write(tmp_path, "p.yaml", "steps:\n" + steps), KINDS)


def test_host_key_modes_are_the_ones_the_transport_implements(tmp_path: Path) -> None:
    """The inventory and the transport each kept their own list of modes; now there is one,
    and every mode hosts.yaml accepts builds a transport policy (and nothing else does)."""
    assert hostkeys.HOST_KEY_MODES is inventory.HOST_KEY_MODES
    for mode in inventory.HOST_KEY_MODES:
        host = load_inventory(deploy.inventory(tmp_path, {"a": {"address": "x", "host_key": mode}})).hosts["a"]
        assert hostkeys.KnownHostsPolicy(host.host_key, str(tmp_path / "known_hosts")).mode == mode
    assert load_inventory(deploy.inventory(tmp_path, {"a": {"address": "x"}})).hosts["a"].host_key == \
        hostkeys.DEFAULT_HOST_KEY_MODE == "accept-new"
    with pytest.raises(ValueError):
        hostkeys.KnownHostsPolicy("accept-all", str(tmp_path / "known_hosts"))  # type: ignore[arg-type]
