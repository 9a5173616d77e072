"""The real path on a stand-in GPU host: the real SGLang 0.5.10.post1 source as a git repo
tagged as upstream tags it, cloned over a real sshd, patched, installed editable into a
venv with real pip, then launched: with no torch/numpy here the launch dies, and the
failure line must quote the real error."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sglang.layout import detect_layout
from tests.support import nvidia_smi
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, run_cli
from tests.support.sshd import SSHD, start_sshd, stop_sshd
from tests.support.standin import STANDIN_VERSION, bare_repo, build_wheels, home_python

#: one worker builds the module's fixtures once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("sglang_install")]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory):
    """The stand-in GPU host's own sshd: its sessions find the suite's stand-in `nvidia-smi`
    (an idle 8 x H100; no GPU exists here) first on PATH, as a GPU box finds the real one."""
    if not os.path.exists(SSHD):
        pytest.skip(f"{SSHD} not found: install Debian's openssh-server to run the SSH tests")
    root = tmp_path_factory.mktemp("standin-sshd")
    nvidia_smi.install(root / "bin", nvidia_smi.h100_idle())
    server, proc = start_sshd(root / "sshd", hosts=2,
                              extra_config=f"SetEnv PATH={root / 'bin'}:/usr/local/bin:/usr/bin:/bin\n")
    try:
        yield server
    finally:
        stop_sshd(proc)

WHERE = r"""
import importlib.metadata, importlib.util, json, os
spec = importlib.util.find_spec("sglang")
print(json.dumps({"origin": os.path.realpath(spec.origin) if spec and spec.origin else None,
                  "version": importlib.metadata.version("sglang")}))
"""


def _inventory(tmp_path: Path, sshd, **extra) -> Path:
    wheels = build_wheels()
    entry = {**sshd.host_entry(0, workdir=str(tmp_path / "gpu")), "engine": "sglang", "python": home_python()}
    variables = {**arm_vars(), "sglang_repo": f"file://{bare_repo()}", "sglang_ref": f"v{STANDIN_VERSION}",
                 "sglang_install_deps": False,
                 # a venv without the release's pins: this file proves the launch quotes the real
                 # import error, so past the runtime check (tests/e2e/test_sglang_runtime.py tests it)
                 "sglang_allow_runtime_mismatch": True,
                 "sglang_pip_args": ["--no-index", "--find-links", str(wheels)], **extra}
    variables["arms"] = {k: v for k, v in variables["arms"].items() if k in ("baseline", "adaptive")}
    for i, arm in enumerate(variables["arms"].values()):
        arm["gpus"] = [i]
    variables.pop("sim", None)
    for name in ("model", "draft_model"):  # local model folders: the weights step verifies them, no Hub here
        folder = tmp_path / "models" / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "config.json").write_text("{}")
        variables[name] = str(folder)
    return inventory(tmp_path, {"gpu": entry}, variables)


def _where(venv: Path) -> dict:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", WHERE], cwd="/", capture_output=True, text=True,
                         timeout=60, check=True).stdout
    return json.loads(out)


def _step_events(run_dir: Path, step: str) -> list[dict]:
    return [e for e in events(run_dir) if e.get("step") == step]


def _last_run(tmp_path: Path) -> Path:
    return sorted(p for p in (tmp_path / "runs").iterdir() if p.is_dir())[-1]


def test_deploy_installs_the_patched_checkout_and_the_launch_failure_quotes_the_real_error(tmp_path, sshd):
    inv = _inventory(tmp_path, sshd)
    tree, venv = tmp_path / "gpu" / "sglang", tmp_path / "gpu" / "venv"
    check = run_cli("deploy", "--host", "gpu", "-i", str(inv), "--check")
    assert check.exit_code == 0, check.output
    assert "-m pip install --disable-pip-version-check --no-deps --no-index" in check.output
    assert f"-e {tree}/python" in check.output and not venv.exists() and not tree.exists()
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv))
    assert res.exit_code == 1, res.output
    # the tag was cloned shallow, and the tree knows its version from the tag
    shallow = subprocess.run(["git", "-C", str(tree), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert shallow == "true"
    layout = detect_layout(LocalTreeFiles(tree))
    assert layout.version == STANDIN_VERSION and layout.dynamic_spec_disable_applied
    # the venv's sglang is the tree (editable), at the tree's version
    seen = _where(venv)
    assert seen["origin"] == str((tree / "python" / "sglang" / "__init__.py").resolve())
    assert seen["version"] == STANDIN_VERSION
    run = _last_run(tmp_path)
    install = _step_events(run, "install sglang into its environment")
    assert any(e["event"] == "done" for e in install), install
    assert (run / "logs" / "gpu.sglang-install.log").read_text().count("Successfully installed sglang") == 1
    # the launch ran the venv's python from a neutral folder and died on the real import error,
    # which the failure line quotes (no timeout: it failed as soon as the process exited)
    assert "launch servers" in res.output and "No module named 'numpy'" in res.output, res.output
    assert "not ready after" not in res.output
    log = (tmp_path / "gpu" / ".specops" / "logs" / "baseline.log").read_text()
    assert str(tree / "python" / "sglang") in log  # the tree's sglang was what ran

    # a re-run: the install stamp names the same commit, so the step is skipped and still verified
    again = run_cli("deploy", "--host", "gpu", "-i", str(inv))
    assert again.exit_code == 1
    skipped = [e for e in _step_events(_last_run(tmp_path), "install sglang into its environment")
               if e["event"] == "skip"]
    assert skipped, again.output

    # revert the patch: the installed package follows (editable), the version check holds
    reverted = run_cli("patch", "revert", "dynamic-spec-disable", "--tree", str(tree))
    assert reverted.exit_code == 0, reverted.output
    assert not detect_layout(LocalTreeFiles(tree)).dynamic_spec_disable_applied
    server_args = Path(_where(venv)["origin"]).parent / "srt" / "server_args.py"
    assert "--speculative-disable-batch-threshold" not in server_args.read_text()
    assert _where(venv)["version"] == STANDIN_VERSION


def _fake_sglang(tmp_path: Path, version: str) -> Path:
    """Another `sglang` distribution (an unpatched install standing in for a release)."""
    src = tmp_path / "other-sglang"
    (src / "sglang").mkdir(parents=True)
    (src / "sglang" / "__init__.py").write_text(f"__version__ = {version!r}\n")
    (src / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n'
        f'[project]\nname = "sglang"\nversion = "{version}"\n[tool.setuptools]\npackages = ["sglang"]\n')
    return src


def test_another_sglang_in_the_venv_is_replaced_by_the_tree(tmp_path, sshd):
    inv = _inventory(tmp_path, sshd)
    venv = tmp_path / "gpu" / "venv"
    subprocess.run([str(Path(home_python()).expanduser()), "-m", "venv", str(venv)], check=True, timeout=300)
    other = _fake_sglang(tmp_path, "0.4.0")
    subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index", "--find-links",
                    str(build_wheels()), str(other)], check=True, timeout=600, cwd="/")
    assert _where(venv)["version"] == "0.4.0"
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv))
    assert res.exit_code == 1 and "No module named 'numpy'" in res.output, res.output
    seen = _where(venv)
    assert seen["version"] == STANDIN_VERSION
    assert seen["origin"].startswith(str(tmp_path / "gpu" / "sglang" / "python") + "/")
    applied = [e for e in _step_events(_last_run(tmp_path), "install sglang into its environment")
               if e["event"] == "apply"]
    assert applied and applied[-1]["replaced"]["version"] == "0.4.0", applied


def test_an_sglang_pip_cannot_remove_makes_the_install_step_refuse_naming_it(tmp_path, sshd):
    """A path entry that shadows the tree (a .pth, a PYTHONPATH baked into the venv) is not
    pip's to remove: the step fails, naming where `sglang` really comes from."""
    inv = _inventory(tmp_path, sshd)
    venv = tmp_path / "gpu" / "venv"
    subprocess.run([str(Path(home_python()).expanduser()), "-m", "venv", str(venv)], check=True, timeout=300)
    shadow = tmp_path / "shadow"
    (shadow / "sglang").mkdir(parents=True)
    (shadow / "sglang" / "__init__.py").write_text("__version__ = '0.4.0'\n")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "000-shadow.pth").write_text(f"{shadow}\n")
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv))
    assert res.exit_code == 1
    assert "install sglang into its environment" in res.output
    failed = [e for e in events(_last_run(tmp_path)) if e["event"] == "fail"]
    assert any(f"resolves to {shadow}/sglang/__init__.py, not into" in json.dumps(e) for e in failed), failed
    assert not (tmp_path / "gpu" / ".specops" / "servers" / "baseline.json").exists()  # nothing launched
