"""Where a `secrets: {NAME: {file: PATH}}` is read from: a relative PATH beside the inventory
file, as `key:` and `known_hosts:` are (issue 23), an absolute or `~` one as written."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from specops.config.inventory import load_inventory
from specops.errors import ConfigError
from tests.support.deploy import inventory


def test_a_relative_secret_file_is_read_beside_the_inventory(tmp_path: Path, monkeypatch) -> None:
    """Before: resolved against the current directory (unlike `key:` and `known_hosts:`)."""
    (tmp_path / "conf" / "tokens").mkdir(parents=True)
    (tmp_path / "conf" / "tokens" / "hf").write_text("hf_from_beside_the_inventory\n")
    inv_path = inventory(tmp_path / "conf",
                         {"gpu": {"address": "10.0.0.5", "key": "keys/id", "secrets": {"HF_TOKEN": {"file": "tokens/hf"}}}},
                         groups={"g": {"hosts": ["gpu"], "secrets": {"G_TOKEN": {"file": "tokens/hf"}}}},
                         secrets={"TOP_TOKEN": {"file": "./tokens/hf"}})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    host = load_inventory(inv_path).hosts["gpu"]
    assert host.key == str(tmp_path / "conf" / "keys" / "id")
    for name in ("HF_TOKEN", "G_TOKEN", "TOP_TOKEN"):
        assert host.secrets[name].file in ("tokens/hf", "./tokens/hf")  # shown as written
        assert host.secrets[name].path == tmp_path / "conf" / "tokens" / "hf", name
        assert host.secrets[name].read() == "hf_from_beside_the_inventory"


def test_a_missing_relative_secret_file_names_where_it_was_looked_for(tmp_path: Path) -> None:
    inv_path = inventory(tmp_path, {"gpu": {"address": "10.0.0.5", "secrets": {"HF_TOKEN": {"file": "nope/hf"}}}})
    with pytest.raises(ConfigError, match=rf"secret HF_TOKEN: cannot read nope/hf \({tmp_path}/nope/hf\): No such file"):
        load_inventory(inv_path).hosts["gpu"].secrets["HF_TOKEN"].read()


def test_absolute_and_home_secret_files_stay_as_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    inv_path = inventory(tmp_path, {"gpu": {"address": "10.0.0.5", "secrets": {
        "A_TOKEN": {"file": "/etc/specops/a"}, "B_TOKEN": {"file": "~/b"}, "C_TOKEN": {"env": "C_TOKEN"}}}})
    secrets = load_inventory(inv_path).hosts["gpu"].secrets
    assert str(secrets["A_TOKEN"].path) == "/etc/specops/a"
    assert str(secrets["B_TOKEN"].path) == os.path.join(str(tmp_path / "home"), "b")
    assert secrets["C_TOKEN"].env == "C_TOKEN" and secrets["C_TOKEN"].file is None
