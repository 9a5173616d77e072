"""The canary (issue 35): one recognisable secret, declared as users declare secrets (a host's
`secrets:` naming an environment variable of this machine, and the same value as an arm's
`env:`), sent through deploy (`-v`, `--check`), status (text, `-v`, `--json`), logs (text,
`--json`), bench (`-v`, `-q --json`), tune (`--write --emit`), verify, a failing step and stop on a
simulated host over the real sshd, then through a Slurm host and a container host. A second
secret, read from a file (`{file: ...}`), holds `"`, `\\`, `$`, `'` and a space.
tests/support/canary.py then scans every file written (run directories, the workdir with its
`.specops` state and lease files, the cache root, Slurm's spool and output), hosts.yaml once
`tune --write` rewrote it, every process's argv sampled during the routes, and every output
the CLI printed, for the values or any 8-character piece of them. Only the 0600 env files the
servers' environment is loaded from may hold them. test_canary_routes.py takes the routes
this file does not (a terminal, a dying server, vLLM's face, --trace, --phases, planted state)."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

import pytest
import yaml

from specops.servers.container import container_name
from tests.e2e.test_container_route import image, podman_sshd  # noqa: F401 - fixtures
from tests.support import canary, container_image
from tests.support.arms import sim_inventory
from tests.support.deploy import TUNE_TIMEOUT_S, run_cli, write_yaml
from tests.support.slurm import SlurmCluster

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")
SECRET = "hf_CanaryQ7xZ3kP9mW2vB8nR4tY6uJ1sD5"
#: read from a file: never in hosts.yaml, whatever rewrites it
FILED = 'pw_Cn"ry\\Fz $Q\'m7Lx4Tb'
SECRETS = [SECRET, FILED]
ENV = "SPECOPS_TEST_CANARY"
#: the smallest tune that verifies a threshold on the quiet simulator, so `--write` rewrites
#: hosts.yaml (test_tune_e2e's settings, one candidate)
QUIET_SIM = {"time_scale": 0.005, "noise": 0}
TUNE_SMALL = ["--concurrency", "1,2,4,8,16", "--input-len", "32", "--output-len", "64", "--candidates", "1"]

pytestmark = pytest.mark.slow


def _declare(inv: Path, arms: list[str] | None = None) -> dict:
    """The secret as hosts.yaml declares it: from an environment variable of this machine,
    and as the baseline arm's env (a token a user gives one arm)."""
    data = yaml.safe_load(inv.read_text())
    (inv.parent / "db_password.txt").write_text(FILED + "\n")
    data["hosts"]["gpu"]["secrets"] = {"HF_TOKEN": {"env": ENV}, "db_password": {"file": "db_password.txt"}}
    if arms is not None:
        data["vars"]["arms"] = {a: data["vars"]["arms"][a] for a in arms}
    data["vars"]["arms"]["baseline"]["env"] = {"WANDB_API_KEY": SECRET}
    write_yaml(inv, data)
    return data


def _failing_playbook(tmp_path: Path) -> Path:
    """A user's playbook: a server that logs its token (a step stands in for it, appending to
    the baseline arm's log), then a step that prints the secret (read from the host's
    secrets file) a hundred times, one line each, so a cut by bytes anywhere in its output
    goes through a copy, and fails."""
    source = ". {{ workdir }}/.specops/secrets.env; "
    return write_yaml(tmp_path / "fails.yaml", {"name": "fails", "steps": [
        {"name": "a server logs its token",
         "shell": source + "printf 'GET /models Authorization: Bearer %s\\n' \"$HF_TOKEN\" "
                  ">> {{ workdir }}/.specops/logs/baseline.log"},
        {"name": "print the token and fail",
         "shell": source + "for i in $(seq 100); do printf '%s\\n' \"$HF_TOKEN\"; done; "
                  "printf 'token %s\\n' \"$HF_TOKEN\" >&2; exit 3"}]})


def _check_env_files(workdir: Path) -> None:
    """The files allowed to hold the secret are the host's 0600 ones (the secrets file at least)."""
    allowed = [p for p in canary.allowed_env_files(workdir) if p.exists()]
    assert workdir / ".specops" / "secrets.env" in allowed
    for path in allowed:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is not 0600"


class Route:
    """Runs the CLI step by step, keeping each output and scanning the files after each."""

    def __init__(self, workdir: Path, *roots: Path):
        self.outputs: dict[str, str] = {}
        #: files the route's own stand-ins wrote the secret into (a server logging its token)
        self.theirs: list[Path] = []
        self.scans = canary.Scans(SECRETS, [workdir, *roots], lambda: canary.allowed_env_files(workdir) + self.theirs)

    def run(self, name: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        res = run_cli(*args)
        self.outputs[name] = res.output
        self.scans.after(name)
        assert res.exit_code in ok, f"{name}: exit {res.exit_code}\n{res.output}"
        return res.output

    def assert_clean(self, argv: canary.ArgvSampler) -> None:
        assert argv.passes > 0
        canary.assert_clean(canary.texts(self.outputs, SECRETS), argv.findings, self.scans.findings)


@pytest.fixture
def own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache root of the route's own, scanned with the rest (tracebacks are saved there)."""
    cache = canary.own_cache_root(tmp_path / "cache")
    monkeypatch.setenv("SPECOPS_CACHE", str(cache))
    return cache


@pytest.mark.timeout(TUNE_TIMEOUT_S)
def test_canary_through_an_ssh_host(tmp_path: Path, sshd, monkeypatch, own_cache: Path) -> None:
    monkeypatch.setenv(ENV, SECRET)
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, sshd.host_entry(2, workdir=str(workdir)), sim=QUIET_SIM)
    _declare(inv)
    declared = inv.read_text()
    runs, out = tmp_path / "runs", tmp_path / "bench"
    h = ["--host", "gpu", "-i", str(inv)]
    route = Route(workdir, runs, out, tmp_path / "bench-q", tmp_path / "tune", own_cache)
    with canary.ArgvSampler(SECRETS) as argv:
        try:
            route.run("deploy -v", "-v", "deploy", *h, "-p", DEPLOY, "--runs-dir", str(runs))
            route.run("deploy --check", "deploy", *h, "-p", DEPLOY, "--runs-dir", str(runs), "--check")
            route.run("status", "status", *h)
            route.run("status -v", "-v", "status", *h)
            route.run("status --json", "status", *h, "--json")
            assert "ready to roll" in route.run("logs", "logs", *h, "-n", "200")
            route.run("logs --json", "logs", *h, "-n", "200", "--json")
            route.run("bench -v", "-v", "bench", *h, "--arms", "baseline", "--concurrency", "1",
                      "--repeats", "1", "--num-prompts", "2", "--out", str(out), "--keep-servers")
            route.run("bench -q --json", "-q", "bench", *h, "--arms", "baseline", "--concurrency", "1",
                      "--repeats", "1", "--num-prompts", "2", "--out", str(tmp_path / "bench-q"), "--keep-servers",
                      "--json")
            route.run("tune --write --emit", "tune", *h, *TUNE_SMALL, "--out", str(tmp_path / "tune"), "--write",
                      "--emit", "--json")
            assert "accept" in route.run("verify --json", "verify", *h, "--prompts", "1", "--max-new-tokens", "4",
                                         "--json", ok=(0, 1))
            route.theirs.append(workdir / ".specops/logs/baseline.log")  # the server's file, not specops's
            failed = route.run("a failing step", "-v", "deploy", *h, "-p", str(_failing_playbook(tmp_path)),
                               "--runs-dir", str(runs), ok=(1,))
            assert "print the token and fail" in failed
            assert "Authorization: Bearer" in route.run("logs after", "logs", *h, "--server", "baseline", "-n", "20")
            route.run("logs --json after", "logs", *h, "--server", "baseline", "-n", "20", "--json")
        finally:
            route.run("stop", "stop", *h)
    _check_env_files(workdir)
    assert inv.read_text() != declared, "tune --write wrote nothing: hosts.yaml was not rewritten"
    rewritten = canary.rewritten("hosts.yaml", declared, inv.read_text(), in_clear=[SECRET], never=[FILED])
    canary.assert_clean(rewritten)
    route.assert_clean(argv)


def test_canary_through_a_slurm_host(tmp_path: Path, sshd, slurm_clean: SlurmCluster, monkeypatch,
                                     own_cache: Path) -> None:
    monkeypatch.setenv(ENV, SECRET)
    workdir = tmp_path / "w"
    entry = {**sshd.host_entry(3, workdir=str(workdir)), "slurm": slurm_clean.slurm_block(time="30")}
    inv = sim_inventory(tmp_path, entry)
    _declare(inv, ["baseline"])
    runs = tmp_path / "runs"
    h = ["--host", "gpu", "-i", str(inv)]
    route = Route(workdir, runs, slurm_clean.root, own_cache)  # the cluster's spool holds the job scripts
    with canary.ArgvSampler(SECRETS) as argv:
        try:
            route.run("deploy -v", "-v", "deploy", *h, "-p", DEPLOY, "--runs-dir", str(runs))
            route.run("status -v", "-v", "status", *h)
            route.run("logs --json", "logs", *h, "-n", "100", "--json")
        finally:
            route.run("stop", "stop", *h)
    _check_env_files(workdir)
    route.assert_clean(argv)


@pytest.mark.xdist_group("podman")
def test_canary_through_a_container_host(tmp_path: Path, podman_sshd, image, monkeypatch,  # noqa: F811
                                        own_cache: Path) -> None:
    monkeypatch.setenv(ENV, SECRET)
    workdir = tmp_path / "w"
    inv = sim_inventory(tmp_path, podman_sshd.host_entry(1, workdir=str(workdir)), sglang_image=image,
                        container_runtime="podman")
    _declare(inv, ["baseline"])
    runs = tmp_path / "runs"
    h = ["--host", "gpu", "-i", str(inv)]
    route = Route(workdir, runs, own_cache)
    with canary.ArgvSampler(SECRETS) as argv:
        try:
            route.run("deploy -v", "-v", "deploy", *h, "-p", DEPLOY, "--runs-dir", str(runs))
            route.run("status -v", "-v", "status", *h)
            inspect = subprocess.run(["podman", "inspect", container_name(str(workdir), "baseline")],
                                     capture_output=True, text=True, env=container_image.podman_env(), timeout=120)
            assert inspect.returncode == 0, inspect.stderr
            route.outputs["podman inspect"] = inspect.stdout
        finally:
            route.run("stop", "stop", *h)
    _check_env_files(workdir)
    route.assert_clean(argv)
