"""Templating: StrictUndefined, native types, and shell quoting that defeats injection."""

from __future__ import annotations

import pytest

from specops.config.templating import check_script, evaluate, render, render_tree
from specops.errors import ConfigError

EVIL = "x; touch PWNED; echo $(id) `id` 'q' \"d\""


def test_shell_mode_quotes_every_value_as_one_word() -> None:
    out = render("echo {{ v }} > {{ path }}", {"v": EVIL, "path": "/tmp/a b"}, shell=True)
    assert out.startswith("echo $'x\\x3b\\x20touch") and out.endswith(" > $'/tmp/a\\x20b'")
    assert render("{{ v | quote }}", {"v": "a b"}, shell=True) == "$'a\\x20b'"  # quoted once, not twice


def test_raw_shell_is_the_explicit_escape_hatch_for_playbook_text() -> None:
    check_script("{{ v | raw_shell }}", "p.yaml:1", "step 'x'", {"v": "a && b"})
    assert render("{{ v | raw_shell }}", {"v": "a && b"}, shell=True) == "a && b"


def test_undefined_variable_names_the_step_and_variable() -> None:
    with pytest.raises(ConfigError, match=r"step 2 'launch': undefined variable 'sglang_dri'"):
        render("cd {{ sglang_dri }}", {}, where="step 2 'launch'")
    with pytest.raises(ConfigError, match="undefined variable 'nope'"):
        render("{{ nope }}", {}, where="x")


def test_native_types_for_single_expressions() -> None:
    v = {"arms": ["baseline", "eagle3"], "port": 30000}
    assert render_tree({"a": "{{ arms }}", "p": "{{ port }}", "s": "p{{ port }}"}, v) == {
        "a": ["baseline", "eagle3"], "p": 30000, "s": "p30000"}


def test_when_expressions() -> None:
    assert evaluate("engine == 'sim'", {"engine": "sim"}) is True
    with pytest.raises(ConfigError, match="undefined variable 'engin'"):
        evaluate("engin == 'sim'", {"engine": "sim"})
