"""The container-image route end to end with real podman, over a real sshd: deploy (each arm
a container of `sglang_image`), status, logs, a short bench, stop; a crash at start; a missing
image; secrets in neither `podman inspect` nor `ps`.

The image is tests/support/container_image.py's: this machine's python, the simulator, and a
stand-in `sglang` package where SGLang's image has its own, so mounting the patched tree over
it is checked for real. It stands in for SGLang's image; GPUs are not (the simulator arms get
no GPU flag, as a CPU arm would not). The sshd here sets CONTAINERS_CONF for its sessions
(`SetEnv`): podman on these machines needs runc and kernel-accepted ulimits.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from specops.servers.container import container_name
from tests.support import container_image
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli, write_yaml
from tests.support.sshd import SSHD, SSHServer, start_sshd, stop_sshd

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")
SECRET = "hf_containerSecret0123456789abcdef"

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("podman")]


@pytest.fixture(scope="module")
def image() -> str:
    why = container_image.missing()
    if why:
        pytest.skip(f"container route tests need rootful podman: {why}")
    return container_image.build_image()


@pytest.fixture(scope="module")
def podman_sshd(tmp_path_factory: pytest.TempPathFactory, image: str) -> Iterator[SSHServer]:
    if not os.path.exists(SSHD) or shutil.which("ssh-keygen") is None:
        pytest.skip("sshd/ssh-keygen not installed (Debian's openssh-server, openssh-client)")
    conf = container_image.containers_conf()
    server, proc = start_sshd(tmp_path_factory.mktemp("sshd-podman"), hosts=3,
                              extra_config=f"SetEnv CONTAINERS_CONF={conf}\n")
    try:
        yield server
    finally:
        stop_sshd(proc)


def _podman(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["podman", *args], capture_output=True, text=True, env=container_image.podman_env(),
                          timeout=120)


def _ours(workdir: Path) -> list[str]:
    prefix = container_name(str(workdir), "x")[:-1]
    out = _podman("ps", "-a", "--format", "{{.Names}}").stdout.split()
    return sorted(n for n in out if n.startswith(prefix))


def _status(inv: Path) -> dict:
    res = run_cli("status", "--host", "gpu", "-i", str(inv), "--json")
    return {s["arm"]: s for s in json.loads(res.output)["gpu"]}


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def test_deploy_status_logs_bench_and_stop_through_containers(tmp_path, podman_sshd, image, monkeypatch):
    workdir = tmp_path / "w"
    monkeypatch.setenv("SPECOPS_TEST_CONTAINER_HF", SECRET)
    inv = sim_inventory(tmp_path, podman_sshd.host_entry(0, workdir=str(workdir)), sglang_image=image,
                        container_runtime="podman")
    data = yaml.safe_load(inv.read_text())
    data["hosts"]["gpu"]["secrets"] = {"HF_TOKEN": {"env": "SPECOPS_TEST_CONTAINER_HF"}}
    write_yaml(inv, data)
    ports = {a: v["port"] for a, v in data["vars"]["arms"].items()}
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert res.exit_code == 0, res.output
        assert _ours(workdir) == sorted(container_name(str(workdir), a) for a in ports)
        st = _status(inv)
        assert {a: s["state"] for a, s in st.items()} == {a: "ready" for a in ports}
        state = json.loads((workdir / ".specops/servers/baseline.json").read_text())
        assert state["container"]["image"] == image and state["container"]["image_id"]
        assert state["command"].startswith("podman run --rm --name specops-") and "--init" in state["command"]

        name = container_name(str(workdir), "baseline")
        inspect = _podman("inspect", name)
        assert inspect.returncode == 0 and SECRET not in inspect.stdout
        mounts = json.loads(inspect.stdout)[0]["Mounts"]
        assert any(m["Source"] == str(workdir / "sglang/python/sglang") for m in mounts)
        ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
        assert name in ps and SECRET not in ps
        init_pid = _podman("inspect", "-f", "{{.State.Pid}}", name).stdout.strip()
        server_pid = Path(f"/proc/{init_pid}/task/{init_pid}/children").read_text().split()[0]
        environ = Path(f"/proc/{server_pid}/environ").read_bytes().split(b"\0")
        assert f"HF_TOKEN={SECRET}".encode() in environ, "the secret reaches the server inside the container"

        logs = run_cli("logs", "--host", "gpu", "-i", str(inv), "-n", "200")
        assert "The server is fired up and ready to roll!" in logs.output

        out = tmp_path / "bench"
        bench = run_cli("bench", "--host", "gpu", "-i", str(inv), "--arms", "baseline,eagle3", "--concurrency", "1",
                        "--repeats", "1", "--input-len", "16", "--output-len", "8", "--out", str(out))
        assert bench.exit_code == 0, bench.output
        assert len((out / "results.jsonl").read_text().splitlines()) >= 2
        manifest = json.loads((out / "manifest.json").read_text())["hosts"]["gpu"]
        assert manifest["arms"]["baseline"]["container"]["image"] == image
        assert manifest["container"]["images"][0]["image_id"] == state["container"]["image_id"]
    finally:
        stopped = run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert stopped.exit_code == 0, stopped.output
    assert _ours(workdir) == []
    assert all(_port_free(p) for p in ports.values())


def test_an_arm_whose_container_dies_at_start_fails_the_launch(tmp_path, podman_sshd, image):
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, podman_sshd.host_entry(1, workdir=str(workdir)), sglang_image=image)
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"] = {"baseline": dict(data["vars"]["arms"]["baseline"], extra_args=["--sim-fail-at-start"])}
    write_yaml(inv, data)
    try:
        res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", DEPLOY)
        assert res.exit_code == 1
        assert "server 'baseline' exited" in res.output and "baseline.log" in res.output
        assert _ours(workdir) == [], "the dead arm's container is gone"
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))


def test_an_image_the_host_lacks_is_named_with_the_host(tmp_path, podman_sshd, image):
    inv = sim_inventory(tmp_path, podman_sshd.host_entry(2, workdir=str(tmp_path / "w")),
                        sglang_image="localhost/specops-absent:none")
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "tree", "sglang_wheel": {"version": "0.5.10.post1", "dest": "{{ workdir }}/sglang"}},
        {"name": "launch", "server": {"arms": ["baseline"], "tree": "{{ workdir }}/sglang"}, "timeout": 120}]})
    res = run_cli("deploy", "--host", "gpu", "-i", str(inv), "-p", str(pb))
    assert res.exit_code == 1
    assert "image localhost/specops-absent:none is not on host gpu" in res.output
    assert not (tmp_path / "w/.specops/servers/baseline.json").exists()
