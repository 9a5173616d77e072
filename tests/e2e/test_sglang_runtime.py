"""The install step with a prepared runtime (`sglang_runtime`), for real: a "runtime" venv
made here holds a tiny package (standing in for torch and SGLang's dependencies) and an
`sglang` 0.4.0 of its own; the real SGLang 0.5.10.post1 source (the stand-in repo of
tests/support/standin.py) is cloned and installed editable into an environment made from
the runtime's python. That environment must import the runtime's package AND resolve
`sglang` into the tree. The host is a `connection: local` CPU host (`device: cpu`), so no
GPU preflight runs."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from specops.sglang.venv import RUNTIME_PTH
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, run_cli, write_yaml
from tests.support.standin import STANDIN_VERSION, bare_repo, build_wheels

pytestmark = pytest.mark.slow

STEP = "install sglang"
WHERE = r"""
import importlib.metadata, importlib.util, json, os, sys
import specops_runtime_probe
spec = importlib.util.find_spec("sglang")
print(json.dumps({"origin": os.path.realpath(spec.origin), "version": importlib.metadata.version("sglang"),
                  "probe": specops_runtime_probe.WHO, "probe_file": specops_runtime_probe.__file__,
                  "prefix": sys.prefix}))
"""


def _wheel(root: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel of `files`, written as a build backend writes one (what the
    runtime holds is what matters here, not how its packages were built: building each
    from source in an isolated environment cost seconds a package)."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    entries = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
               f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: specops-tests\nRoot-Is-Purelib: true\n"
                                "Tag: py3-none-any\n"}
    record = ""
    for path, text in entries.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record += f"{path},sha256={digest},{len(text.encode())}\n"
    entries[f"{info}/RECORD"] = record + f"{info}/RECORD,,\n"
    wheel = root / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        for path, text in entries.items():
            zf.writestr(path, text)
    return wheel


def _runtime(root: Path, who: str) -> Path:
    """A prepared runtime: a venv with the tiny probe package and an sglang 0.4.0 of its own,
    installed by pip (this interpreter's, into the venv's python: the venv needs no pip)."""
    venv = root / f"runtime-{who}"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    probe = _wheel(root, f"probe-{who}", "1.0", {"specops_runtime_probe.py": f"WHO = {who!r}\n"})
    other = _wheel(root, f"sglang-{who}", "0.4.0", {"sglang/__init__.py": "__version__ = '0.4.0'\n"})
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--disable-pip-version-check", "--no-index", "--no-deps", str(probe), str(other)],
                   check=True, timeout=600, cwd="/")
    return venv / "bin" / "python"


def _inventory(tmp_path: Path, runtime: Path | str, allow_mismatch: bool = True) -> Path:
    """`allow_mismatch`: the stand-in runtimes hold none of the release's pins; the tests of how
    the environment sees them go past the runtime check, the runtime check's own test does not."""
    variables = {**arm_vars(), "sglang_repo": f"file://{bare_repo()}", "sglang_ref": f"v{STANDIN_VERSION}",
                 "sglang_pip_args": ["--no-index", "--find-links", str(build_wheels())],
                 "sglang_runtime": str(runtime)}
    if allow_mismatch:
        variables["sglang_allow_runtime_mismatch"] = True
    variables["arms"] = {"baseline": variables["arms"]["baseline"]}
    variables.pop("sim", None)
    host = {"connection": "local", "engine": "sglang", "device": "cpu", "workdir": str(tmp_path / "cpu")}
    return inventory(tmp_path, {"cpu": host}, variables)


def _playbook(tmp_path: Path) -> Path:
    """deploy.yaml's preparation: preflight, clone, install (no launch: the runtime has no torch)."""
    return write_yaml(tmp_path / "prepare.yaml", {"name": "prepare", "vars": {"sglang_dir": "{{ workdir }}/sglang"},
                                                  "steps": [
        {"name": "gpu preflight", "gpu_preflight": {},
         "when": "(engine == 'sglang' or device == 'cpu') and scheduler != 'slurm'"},
        {"name": "check out sglang", "git": {"repo": "{{ sglang_repo }}", "ref": "{{ sglang_ref }}",
                                             "dest": "{{ sglang_dir }}"}, "timeout": 600},
        {"name": STEP, "sglang_install": {"tree": "{{ sglang_dir }}"}, "timeout": 900}]})


def _deploy(tmp_path: Path, inv: Path, runs: str):
    res = run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(_playbook(tmp_path)),
                  "--runs-dir", str(tmp_path / runs))
    run = sorted(p for p in (tmp_path / runs).iterdir() if p.is_dir())[-1]
    return res, [e for e in events(run) if e.get("step") == STEP], run


def _seen(venv: Path) -> dict:
    out = subprocess.run([str(venv / "bin" / "python"), "-c", WHERE], cwd="/", capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_install_into_an_environment_that_sees_a_prepared_runtime(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, "first")
    inv = _inventory(tmp_path, runtime)
    tree, venv = tmp_path / "cpu" / "sglang", tmp_path / "cpu" / "venv"
    check = run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(_playbook(tmp_path)), "--check",
                    "--runs-dir", str(tmp_path / "check"))
    assert check.exit_code == 0, check.output
    assert f"{runtime} -m venv {venv}" in check.output and RUNTIME_PTH in check.output, check.output
    assert "--no-deps" in check.output and "--config-settings editable_mode=compat" in check.output

    res, ev, run = _deploy(tmp_path, inv, "runs")
    assert res.exit_code == 0, res.output
    assert [e["message"] for e in events(run) if e["event"] == "note"] == ["GPU preflight skipped: device cpu"]
    seen = _seen(venv)
    # the runtime's package, from the runtime; sglang from the tree, though the runtime has one too
    assert seen["probe"] == "first" and seen["probe_file"].startswith(str(runtime.parent.parent) + "/")
    assert seen["origin"] == str((tree / "python" / "sglang" / "__init__.py").resolve())
    assert seen["version"] == STANDIN_VERSION and seen["prefix"] == str(venv)
    made = [e["command"] for e in ev if e["event"] == "command" and "venv" in e.get("command", "")
            and not e.get("probe")]
    assert made and made[0].endswith(f" _ {venv} {runtime}"), made  # the environment came from the runtime
    (done,) = [e for e in ev if e["event"] == "apply"]
    assert done["runtime"]["python"] == str(runtime) and done["runtime_pth"].endswith(RUNTIME_PTH)
    pth = Path(done["runtime_pth"]).read_text()
    assert str(runtime.parent.parent / "lib") in pth and pth.count("site.addsitedir(") == 1

    # a re-run with the same runtime: the stamp matches, the step is skipped (and still verified)
    res, ev, _ = _deploy(tmp_path, inv, "runs2")
    assert res.exit_code == 0 and any(e["event"] == "skip" for e in ev), res.output

    # another runtime (same python version): the stamp names the runtime, so it installs again
    second = _runtime(tmp_path, "second")
    res, ev, _ = _deploy(tmp_path, _inventory(tmp_path, second), "runs3")
    assert res.exit_code == 0 and not any(e["event"] == "skip" for e in ev), res.output
    assert _seen(venv)["probe"] == "second" and _seen(venv)["version"] == STANDIN_VERSION


def test_a_missing_runtime_fails_the_step_naming_host_and_path(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-env" / "bin" / "python"
    res, ev, _ = _deploy(tmp_path, _inventory(tmp_path, missing), "runs")
    assert res.exit_code == 1
    assert f"sglang_runtime {missing} on host cpu: no such python" in res.output, res.output
    assert not (tmp_path / "cpu" / "venv").exists()  # nothing was made
    broken = tmp_path / "broken-python"
    broken.write_text("#!/bin/sh\necho 'libpython3.11.so: cannot open shared object file' >&2\nexit 127\n")
    broken.chmod(0o755)
    res, _, _ = _deploy(tmp_path, _inventory(tmp_path, broken), "runs2")
    assert res.exit_code == 1 and f"sglang_runtime {broken} on host cpu cannot run" in res.output, res.output
    assert "libpython3.11.so" in res.output


def _wrong_transformers(runtime: Path) -> None:
    """A hand-made distribution in the runtime: transformers 4.57.1 (the release pins 5.3.0)."""
    site = next((runtime.parent.parent / "lib").glob("python3.*/site-packages"))
    dist = site / "transformers-4.57.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: transformers\nVersion: 4.57.1\n")


def test_a_runtime_without_the_releases_pins_is_refused_before_any_server(tmp_path: Path) -> None:
    """Issue 38: SGLang over a runtime with another transformers died at import, and one
    without torchao too, found only from the server's traceback. The release's own pins
    (its python/pyproject_cpu.toml on this device: cpu host) are checked in the runtime."""
    runtime = _runtime(tmp_path, "first")
    _wrong_transformers(runtime)
    inv = _inventory(tmp_path, runtime, allow_mismatch=False)
    res, ev, _ = _deploy(tmp_path, inv, "runs")
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "/python/pyproject_cpu.toml are not met by" in text, res.output
    assert "transformers: pinned ==5.3.0, installed 4.57.1" in text and "torchao: pinned ==0.14.1, not installed" in text
    assert "--allow-runtime-mismatch" in text
    assert not any(e["event"] == "server" for e in ev)

    # the opt-out: the install goes on, and says what it let through
    allowed = run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(_playbook(tmp_path)),
                      "--runs-dir", str(tmp_path / "runs2"), "--allow-runtime-mismatch")
    assert allowed.exit_code == 0, allowed.output
    said = " ".join(allowed.output.split())
    assert "warning: cpu: install sglang: runtime check skipped (--allow-runtime-mismatch): " in said, allowed.output
    assert "transformers: pinned ==5.3.0, installed 4.57.1" in said
