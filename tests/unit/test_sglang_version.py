"""One version parser: the cases the two old parsers (the patch gate's and the flag
reader's) read differently, and the one order in which a tree's version files are read."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching.applier import check_applicable
from specops.patching.model import load_patchset, parse_patchset
from specops.sglang.flags import tree_version
from specops.sglang.layout import detect_layout
from specops.sglang.paths import VERSION_FILES
from specops.sglang.source import ensure_tree
from specops.sglang.version import compare, in_range, parse


@pytest.mark.parametrize("text, release, pre, post, local", [
    ("0.5.10.post1", (0, 5, 10), None, 1, None),
    ("0.5.14rc1", (0, 5, 14), ("rc", 1), None, None),     # flag reader: (0, 5)
    ("0.5rc1", (0, 5), ("rc", 1), None, None),             # patch gate: (0, 5, 1)
    ("0.5.10+cu124", (0, 5, 10), None, None, "cu124"),     # flag reader: (0, 5)
    ("v0.5.10.post1", (0, 5, 10), None, 1, None),          # flag reader: (0,)
    ("v0.5.10.post1-3-gabc1234", (0, 5, 10), None, 1, "3.gabc1234"),
])
def test_parse(text: str, release: tuple, pre: tuple | None, post: int | None, local: str | None) -> None:
    v = parse(text)
    assert (v.release, v.pre, v.post, v.local) == (release, pre, post, local)


def test_order_is_pep440() -> None:
    ordered = ["0.5.13", "0.5.14.dev1", "0.5.14a1", "0.5.14rc1", "0.5.14rc2", "0.5.14", "0.5.14+local",
               "0.5.14.post1", "0.5.20"]
    assert sorted(reversed(ordered), key=parse) == ordered
    assert compare("0.5", "0.5.0") == 0 and compare("0.5.9", "0.5.10") == -1
    with pytest.raises(ValueError, match="not a version: 'latest'"):
        parse("latest")


def test_bounds_name_releases() -> None:
    assert in_range("0.5.13.post1", "0.4.10", "0.5.13") and in_range("0.4.10.post2", "0.4.10", "0.5.13")
    assert in_range("0.5.14rc1", "0.5.14") and not in_range("0.5.14rc1", None, "0.5.13")
    assert not in_range("0.5rc1", "0.5.1")   # the old gate read '0.5rc1' as 0.5.1 and let it in


SET = """\
name: gated
applies_to: {min_version: "0.5.1", max_version: "0.5.13"}
edits:
  - {name: e, file: python/sglang/x.py, op: insert_after, anchor: {assign: X}, text: "Y = 1"}
"""


def test_patch_gate_uses_the_one_parser() -> None:
    layout = detect_layout(LocalTreeFiles(ensure_tree("0.5.10.post1")))
    ps = parse_patchset(SET, "gated.yaml")
    assert check_applicable(ps, layout) is None
    layout.version = "0.5rc1"
    assert check_applicable(ps, layout) == "version 0.5rc1 is older than 0.5.1"
    layout.version = "0.5.14rc1"
    assert check_applicable(ps, layout) == "version 0.5.14rc1 is newer than 0.5.13"
    layout.version = "0.5.13+cu124"
    assert check_applicable(ps, layout) is None
    assert check_applicable(load_patchset("dynamic-spec-disable"), detect_layout(
        LocalTreeFiles(ensure_tree("0.4.10.post2")))) is None


def test_a_bound_that_is_not_a_version_is_a_config_error() -> None:
    with pytest.raises(ConfigError) as err:
        parse_patchset(SET.replace('max_version: "0.5.13"', "max_version: latest"), "gated.yaml")
    assert str(err.value).startswith("gated.yaml:2: 'max_version' in applies_to is not a version: 'latest'")


def test_flag_reader_and_layout_read_the_same_version_file(tmp_path: Path) -> None:
    """A 0.4 tree with a stale build-generated _version.py: the flag reader (and so the
    simulator's /server_info) used to believe _version.py, the layout version.py."""
    tree = tmp_path / "tree"
    shutil.copytree(ensure_tree("0.4.10.post2") / "python", tree / "python")
    (tree / VERSION_FILES[1]).write_text('__version__ = version = "0.4.9"\n')
    assert (tree / VERSION_FILES[0]).read_text().strip() == '__version__ = "0.4.10.post2"'
    assert tree_version(LocalTreeFiles(tree)) == detect_layout(LocalTreeFiles(tree)).version == "0.4.10.post2"
    (tree / VERSION_FILES[0]).write_text("from sglang._version import __version__\n")
    assert tree_version(LocalTreeFiles(tree)) == detect_layout(LocalTreeFiles(tree)).version == "0.4.9"
