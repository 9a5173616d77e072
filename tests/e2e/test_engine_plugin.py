"""Issue 56 point 2: an engine registered by an entry point is used like a built-in one. The
test engine package tests/plugins/acme_engine (the simulator with SGLang's face, named
`acme-sim`, labelled "Acme") is installed by pip from its own directory, offline, into a folder on
PYTHONPATH; then `specops` runs as a separate process, as a user's would, through deploy, bench,
tune and verify on a local simulated host with `engine: acme-sim`. Nothing in specops/ names it:
the playbooks choose its steps by its face and features (its tree is patched because it
declares the patch route), deploy runs its own step kind (`acme_stamp`, its `deploy_steps`),
the inventory accepts it from the registry. A broken plugin is refused by name, without a traceback."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specops.sim.testing import free_ports
from tests.support.arms import sim_inventory
from tests.support.deploy import TUNE_TIMEOUT_S, only_run_dir

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "tests/plugins/acme_engine"
THRESHOLD = 4
#: the simulator's knobs: no noise, a fast clock (every figure read is on its model clock)
QUIET_SIM = {"time_scale": 0.005, "noise": 0}
SMALL = ["--input-len", "32", "--output-len", "64", "--repeats", "1"]


def install(src: Path, target: Path) -> Path:
    """`pip install --no-deps --no-index --target target` of a copy of `src` (pip builds in the
    source tree: the copy keeps the repository's clean and parallel tests apart)."""
    copy = target.parent / f"{src.name}-src"
    shutil.copytree(src, copy)
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                           "--no-index", "--target", str(target), str(copy)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return target


def specops(target: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`python -m specops ARGS` in a fresh process that sees the installed plugin."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(target), str(ROOT)]))
    return subprocess.run([sys.executable, "-m", "specops", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=TUNE_TIMEOUT_S)


def _inventory(tmp_path: Path) -> Path:
    base, eagle, adaptive = free_ports(3)
    entry = {"connection": "local", "workdir": str(tmp_path / "w"), "python": sys.executable, "device": "cpu"}
    return sim_inventory(tmp_path, entry, engine="acme-sim", sim=QUIET_SIM,
                         arms={"baseline": {"port": base}, "eagle3": {"port": eagle},
                               "adaptive": {"port": adaptive, "threshold": THRESHOLD}})


@pytest.mark.slow
@pytest.mark.timeout(TUNE_TIMEOUT_S * 2)
def test_a_plugin_engine_deploys_benches_tunes_and_verifies(tmp_path: Path) -> None:
    target = install(PLUGIN, tmp_path / "site")
    inv = _inventory(tmp_path)
    host = ["--host", "gpu", "-i", str(inv)]
    try:
        res = specops(target, "deploy", *host, "-p", str(ROOT / "playbooks/deploy.yaml"),
                      "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        # its own step kind ran where deploy.yaml's engine_steps placeholder stands, and verified
        stamp = tmp_path / "w/.acme-stamp"
        assert stamp.read_text() == "stamped by acme-sim for baseline,eagle3,adaptive"
        journal = [json.loads(line) for line in (only_run_dir(tmp_path / "runs") / "events.jsonl").read_text()
                   .splitlines() if line.strip()]
        mine = [e for e in journal if e.get("step") == "acme stamp"]
        assert {"event": "put", "path": str(stamp)}.items() <= next(e for e in mine if e["event"] == "put").items()
        assert [e.get("ok") for e in mine if e["event"] == "verify"] == [True], mine
        assert next(e for e in mine if e["event"] == "done")["changed"] is True, mine
        state = json.loads((tmp_path / "w/.specops/servers/adaptive.json").read_text())
        assert state["argv"][1:4] == ["-m", "specops.sim", "--sglang-tree"]   # SGLang's face, the simulator's way
        assert state["mechanism"] == "dynamic-spec-disable-patch", state   # its feature ran the patch step

        run = tmp_path / "bench"
        res = specops(target, "bench", *host, "--arms", "baseline,eagle3", "--concurrency", "1,4,16", *SMALL,
                      "--out", str(run), cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["hosts"]["gpu"]["engine"] == "acme-sim"
        rows = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
        assert len(rows) == 6 and all(r["simulated"] is True and r["completed"] > 0 for r in rows)
        assert "Acme: `0.5.10.post1`" in (run / "report.md").read_text()   # the plugin's own version label

        out = tmp_path / "tune"
        res = specops(target, "tune", *host, "--from", str(run), "--candidates", "1", "--emit", "--out", str(out),
                      cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        result = json.loads((out / "tune.json").read_text())["result"]
        assert result["status"] == "verified" and result["reused_from"] == str(run), result
        assert [f["route"].split(" (")[0] for f in result["forms"]] == ["SGLang <= 0.5.13", "SGLang >= 0.5.14",
                                                                        "vLLM >= 0.32.0"]

        res = specops(target, "verify", *host, "--json", cwd=tmp_path)
        assert res.returncode == 0, res.stdout + res.stderr
        checks = json.loads(res.stdout)["checks"]
        verdicts = {c["name"]: c["verdict"] for c in checks}
        # the servers' state files name the engine that launched them: its launch command is the
        # simulator's, and verify still says which engine answered
        infos = next(c for c in checks if c["name"].startswith("/server_info"))
        assert infos["verdict"] == "PASS" and "Acme 0.5.10.post1" in infos["detail"], infos
        assert verdicts["greedy token identity at concurrency 1"] == "PASS", verdicts
        assert verdicts["drafted tokens accepted"] == "PASS", verdicts
    finally:
        stop = specops(target, "stop", *host, cwd=tmp_path)
    assert stop.returncode == 0, stop.stdout + stop.stderr
    assert not list((tmp_path / "w/.specops/servers").glob("*.json"))


def test_a_broken_plugin_is_refused_by_name(tmp_path: Path) -> None:
    """An entry point whose module fails to import: `hosts check`-style use of the host says
    which plugin, in one line, and prints no traceback."""
    src = tmp_path / "broken"
    shutil.copytree(PLUGIN, src, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "acme_engine/__init__.py").write_text("raise ImportError('no module named acme_runtime')\n")
    target = install(src, tmp_path / "site")
    inv = _inventory(tmp_path)
    res = specops(target, "deploy", "--host", "gpu", "-i", str(inv), "-p", str(ROOT / "playbooks/deploy.yaml"),
                  cwd=tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    text = res.stdout + res.stderr
    assert "engine plugin specops-acme-engine (acme_engine:AcmeSim) registered as 'acme-sim' cannot be loaded: " \
           "ImportError: no module named acme_runtime" in text, text
    assert "Traceback" not in text
