"""Pieces of the real path that need no host: the tree's version, `~` in host paths, the
reason line of a dead server, the version check, the install settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from specops.config.inventory import load_inventory
from specops.data import shipped_patches
from specops.engines import engine_named
from specops.errors import ConfigError, StepError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import PatchError, apply, load_patchset
from specops.servers.lifecycle import ServerState, check_version, failure_reason
from specops.sglang.layout import detect_layout
from specops.sglang.treeversion import tree_version, version_from_tag
from specops.sglang.venv import InstallSettings
from specops.sim.server import sim_version
from specops.transport.local import LocalTransport
from tests.support.deploy import inventory
from tests.support.sglang_trees import tree_is_pristine


def _git(tree: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(tree), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                   check=True, capture_output=True)


@pytest.fixture
def tagged_tree(sglang_tree) -> Path:
    """A 0.5.10.post1 tree as git checks it out: version.py is a try/except, no _version.py."""
    tree = sglang_tree("0.5.10.post1")
    (tree / "python/sglang/_version.py").unlink(missing_ok=True)
    (tree / "python/sglang/version.py").write_text(
        "try:\n    from sglang._version import __version__\nexcept ImportError:\n    __version__ = '0.0.0.dev0'\n")
    _git(tree, "commit", "-qam", "as in git")
    _git(tree, "tag", "v0.5.10.post1")
    return tree


@pytest.mark.parametrize("described, expected", [
    ("v0.5.10.post1", "0.5.10.post1"), ("v0.5.14", "0.5.14"), ("v0.5.10rc0", "0.5.10rc0"),
    ("v0.5.10-3-gabc1234", None), ("nightly", None), ("", None), (None, None)])
def test_version_from_tag(described, expected):
    assert version_from_tag(described) == expected


def test_a_checkout_without_a_literal_version_is_known_by_its_tag(tagged_tree):
    """Before: `sglang version: unknown`, the manifest recorded null, gating could not apply."""
    version, source = tree_version(LocalTreeFiles(tagged_tree))
    assert (version, source) == ("0.5.10.post1", "git describe --tags (v0.5.10.post1)")
    assert detect_layout(LocalTreeFiles(tagged_tree)).version == "0.5.10.post1"
    assert sim_version(str(tagged_tree), "unknown") == "0.5.10.post1"  # what the simulator reports
    # a commit past the tag is not that release
    (tagged_tree / "x.txt").write_text("x")
    _git(tagged_tree, "add", "x.txt")
    _git(tagged_tree, "commit", "-qm", "past the tag")
    version, why = tree_version(LocalTreeFiles(tagged_tree))
    assert version is None and "not a release tag" in why


def test_the_wheel_marker_is_the_last_resort(tmp_path):
    (tmp_path / "python/sglang").mkdir(parents=True)
    (tmp_path / ".specops-wheel.json").write_text('{"version": "0.5.4"}')
    assert tree_version(LocalTreeFiles(tmp_path)) == ("0.5.4", ".specops-wheel.json")


def test_tilde_in_python_and_workdir_expands_on_the_host(tmp_path):
    inv = load_inventory(inventory(tmp_path, {"gpu": {
        "address": "10.0.0.5", "python": "~/venv/bin/python", "workdir": "~/w", "key": "~/.ssh/k"}}))
    host = inv.hosts["gpu"]
    assert host.python == "~/venv/bin/python"  # the host's home is not known before connecting
    assert host.key == str(Path("~/.ssh/k").expanduser())  # a local path: expanded here
    host.expand_on_host(lambda p: "/home/u" + p[1:])
    assert (host.python, host.workdir) == ("/home/u/venv/bin/python", "/home/u/w")
    assert inv.host_vars(host)["python"] == "/home/u/venv/bin/python"
    bare = inv.hosts["gpu"].__class__(name="b", python="python3")
    bare.expand_on_host(lambda p: "/nope" + p)
    assert bare.python == "python3"  # a PATH lookup stays one


@pytest.mark.parametrize("log, reason", [
    ("/w/venv/bin/python: No module named sglang.launch_server\n", "No module named sglang.launch_server"),
    ("usage: launch_server.py [-h] ...\nlaunch_server.py: error: unrecognized arguments: "
     "--speculative-disable-batch-threshold 8\n", "error: unrecognized arguments"),
    ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
     "ModuleNotFoundError: No module named 'torch'\n", "ModuleNotFoundError: No module named 'torch'"),
    ("loading\nsomething odd happened\n", "something odd happened"),
    ("", None)])
def test_failure_reason_is_the_line_that_says_why(log, reason):
    got = failure_reason(log)
    assert (got is None) if reason is None else (reason in got)


def _state(version: str | None, argv: list[str] | None = None) -> ServerState:
    return ServerState(arm="baseline", kind="baseline", pid=1, pgid=1, proc_start="", port=30000, command="x",
                       argv=argv or ["x"], env={}, args_hash="", log_path="/l", state_path="/s", mechanism="none",
                       started_at=0.0, workdir="/w", engine_version=version)


def test_the_server_that_answers_must_be_the_trees_version():
    transport = LocalTransport("gpu")
    check_version(transport, _state("0.5.10.post1"), {"version": "0.5.10.post1"})
    check_version(transport, _state(None), {"version": "0.5.9"})  # unknown tree version: nothing to hold to
    with pytest.raises(StepError, match=r"answers as SGLang 0\.5\.9, but the tree is 0\.5\.10\.post1"):
        check_version(transport, _state("0.5.10.post1"), {"version": "0.5.9"})
    with pytest.raises(StepError, match="no version in /server_info"):
        check_version(transport, _state("0.5.10.post1"), {})
    # a vLLM server is named as vLLM, never as SGLang (issue 56)
    vllm = _state("0.32.0", ["python", "-m", engine_named("vllm").launch_module, "--port", "30000"])
    with pytest.raises(StepError, match=r"answers as vLLM 0\.31\.0, but the tree is 0\.32\.0"):
        check_version(transport, vllm, {"version": "0.31.0"})


def test_install_settings_from_vars_and_bad_values():
    s = InstallSettings.from_vars({"workdir": "/w", "sglang_extras": ["srt"], "sglang_install_deps": "false",
                                   "sglang_pip_args": ["--no-index"]}, {}, where="deploy.yaml:5")
    assert (s.venv, s.extras, s.install_deps, s.pip_args) == ("/w/venv", ["srt"], False, ["--no-index"])
    assert s.target("/w/sglang") == "/w/sglang/python[srt]"
    assert InstallSettings.from_vars({"workdir": "/w", "sglang_venv": "~/v"}, {}, where="x").venv == "~/v"
    with pytest.raises(ConfigError, match="sglang_extras must be a list"):
        InstallSettings.from_vars({"workdir": "/w", "sglang_extras": "srt"}, {}, where="x")
    with pytest.raises(ConfigError, match="not an extra's name"):
        InstallSettings.from_vars({"workdir": "/w", "sglang_extras": ["srt]; rm -rf /"]}, {}, where="x")
    with pytest.raises(ConfigError, match="sglang_install_deps must be true or false"):
        InstallSettings.from_vars({"workdir": "/w", "sglang_install_deps": "maybe"}, {}, where="x")


@pytest.mark.parametrize("runtime, ok, said", [
    ("required", False, "cannot be imported"), ("deferred", True, "deferred:"), ("optional", True, "skip:")])
def test_the_patch_sets_round_trip_fails_where_the_runtime_is_required(sglang_tree, runtime, ok, said):
    """Before: `skip: sglang runtime not importable here` passed on a GPU host. Now a
    python without SGLang's runtime (this one) fails the round trip on engine sglang."""
    tree = sglang_tree("0.5.10.post1")
    patchset = load_patchset("dynamic-spec-disable", search_dir=shipped_patches())
    files = LocalTreeFiles(tree)
    if ok:
        report = apply(patchset, files, transport=LocalTransport("gpu"), python=sys.executable, runtime=runtime)
        assert said in report.verify[-1].stdout
        assert detect_layout(files).dynamic_spec_disable_applied
    else:
        with pytest.raises(PatchError, match=said):
            apply(patchset, files, transport=LocalTransport("gpu"), python=sys.executable, runtime=runtime)
        assert tree_is_pristine(tree)  # and the tree is restored
