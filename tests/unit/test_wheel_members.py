"""Issue 55 point 5: the one wheel unpacker refuses a member whose name would land outside
its destination (`..`, an absolute path, a drive, a backslash), naming the wheel and the
member, before it writes anything, on this machine and on a host alike."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specops.sglang.wheel import UnsafeMember, script, unpack


def _wheel(tmp_path: Path, bad: str) -> Path:
    wheel = tmp_path / "wheels" / "sglang-9.9.9-py3-none-any.whl"
    wheel.parent.mkdir(parents=True)
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("sglang/__init__.py", "")
        zf.writestr(zipfile.ZipInfo(bad), "escaped\n")
        zf.writestr("sglang/srt/server_args.py", "class ServerArgs:\n    pass\n")
    return wheel


def _everything(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("bad", [
    "sglang/../../../x",                   # once written three folders above the tree
    "sglang/srt/../../../../x",
    "../sglang/x",
    "/sglang/x",
    "sglang/..\\..\\..\\x",
    "sglang\\..\\..\\x",
    "C:/sglang/x",
    "sglang/C:x",
])
def test_an_escaping_member_is_refused_and_nothing_is_written(tmp_path: Path, bad: str) -> None:
    wheel = _wheel(tmp_path, bad)
    before = _everything(tmp_path)
    with pytest.raises(UnsafeMember) as err:
        unpack(str(wheel), str(tmp_path / "a" / "b" / "tree"), "9.9.9")
    assert str(wheel) in str(err.value) and repr(bad) in str(err.value) and "nothing written" in str(err.value)
    assert _everything(tmp_path) == before   # not even the destination's parent folders


def test_an_ordinary_member_with_dots_in_its_name_is_unpacked(tmp_path: Path) -> None:
    wheel = _wheel(tmp_path, "sglang/srt/..hidden..py")
    tree = Path(unpack(str(wheel), str(tmp_path / "tree"), "9.9.9"))
    assert (tree / "python/sglang/srt/..hidden..py").read_text() == "escaped\n"


def test_on_a_host_the_script_says_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    """The `sglang_wheel` step runs this file with `python -c`: its error reaches the step's tail."""
    import json

    wheel = _wheel(tmp_path, "sglang/../../../x")
    args = json.dumps({"wheel": str(wheel), "dest": str(tmp_path / "a/b/tree"), "version": "9.9.9"})
    proc = subprocess.run([sys.executable, "-c", script(), args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.startswith("error: wheel ") and "'sglang/../../../x'" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_on_this_machine_an_escaping_member_is_bad_input_naming_the_wheel(tmp_path: Path) -> None:
    """The cached-tree path (sglang.source.unpack_wheel) says it as a ConfigError, not a traceback."""
    from specops.errors import ConfigError
    from specops.sglang.source import unpack_wheel

    wheel = _wheel(tmp_path, "sglang/../../../x")
    before = _everything(tmp_path)
    with pytest.raises(ConfigError) as err:
        unpack_wheel(wheel, tmp_path / "tree")
    assert err.value.where == str(wheel) and "'sglang/../../../x'" in err.value.message
    assert _everything(tmp_path) == before


def test_a_committed_tree_never_starts_gits_background_housekeeping(tmp_path: Path) -> None:
    """Measured: unpacking 0.5.23's wheel with `git` left 6,257 loose objects, and `git commit`
    started a detached `git gc --auto` that went on writing into the tree's .git after the step;
    the next deploy's replacement of the tree then failed removing it (tests/integration/
    test_var_precedence.py, "onerror(os.rmdir, ...)"). The tree's own config turns that off, run
    on the host as the step runs it."""
    import json

    wheel = _wheel(tmp_path, "sglang/srt/x.py")
    dest = tmp_path / "tree"
    args = json.dumps({"wheel": str(wheel), "dest": str(dest), "version": "9.9.9", "git": True})
    proc = subprocess.run([sys.executable, "-c", script(), args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    for key, value in (("gc.auto", "0"), ("maintenance.auto", "false")):
        got = subprocess.run(["git", "-C", str(dest), "config", "--get", key], capture_output=True, text=True,
                             timeout=60).stdout.strip()
        assert got == value, (key, got)
    log = subprocess.run(["git", "-C", str(dest), "log", "--oneline"], capture_output=True, text=True, timeout=60)
    assert log.stdout.count("\n") == 1, log.stdout   # still the one commit
