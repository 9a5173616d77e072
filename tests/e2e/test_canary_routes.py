"""The canary grows with the routes (issue 55, point 6). Secrets shaped to break a mask
(`"`, `\\`, `$`, `'`, a space; one only 8 characters; lower-case names), declared every way
hosts.yaml allows (`{env: ...}`, `{file: ...}`, an arm's `env:`, `--api-key` in an arm's
extra_args), go through the routes test_canary.py does not take: deploy drawn on a
pseudo-terminal (the live view), a server that dies logging a secret, the vLLM face of the
simulator, `bench --trace`, `bench --phases` (with /server_info in the manifest), and
planted state files through `stop`, `status` and `deploy`. Afterwards nothing specops wrote
(run directories, bench outputs, the workdir and its `.specops`, the cache root), printed
(on the terminal too) or started may hold any of them, whole or in part; only the host's
0600 env files may, and a server's own log may hold what that server was given."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from specops.hostfiles import paths
from specops.servers.container import container_name
from tests.integration.test_state_trust import commands  # noqa: F401 - fixture: group 1 refused
from tests.support import canary
from tests.support.arms import arm_vars
from tests.support.deploy import events, inventory, only_run_dir, run_cli
from tests.support.vllm_trees import vllm_tree  # noqa: F401 - fixture: the cached tree, laid out once
from tests.support.waiting import alive_after_signals

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")

#: none shares an 8-character piece with another test's values (test_canary_scan checks the e2e canary's)
QUOTED = 'c55"Qu0\\te$Wx \'k9Mz2Rv7pL4T'   # api_key: {env: ...}
FILED = 'f55Db\\"Pw $8nQ\'r3Xs6Yk'         # db_password: {file: ...}
SHORT = "s5$K'q\"9"                        # HF_TOKEN: {env: ...}, eight characters
ARM = 'a55W&b"Ky\\ $Jm\'Tz4Hq'             # the baseline arm's env, in clear in hosts.yaml
API_KEY = 'k55Ap"iK\\ $v\'Zt8WqN'          # --api-key in the baseline arm's extra_args
DECLARED = [QUOTED, FILED, SHORT]
ALL = [*DECLARED, ARM, API_KEY]
ENV = {"SPECOPS_T_C55_QUOTED": QUOTED, "SPECOPS_T_C55_SHORT": SHORT}

pytestmark = pytest.mark.slow


def _host(tmp_path: Path, name: str, engine: str = "sim", arm_env: dict[str, str] | None = None) -> Path:
    """tmp_path/NAME/hosts.yaml: one local simulated host with the secrets declared every way,
    one arm (baseline) holding ARM in its env and API_KEY in its argv."""
    folder = tmp_path / name
    folder.mkdir()
    (folder / "db_password.txt").write_text(FILED + "\n")
    variables = arm_vars()
    baseline = variables["arms"]["baseline"]
    baseline.update(env={"WANDB_API_KEY": ARM, **(arm_env or {})}, extra_args=["--api-key", API_KEY])
    variables["arms"] = {"baseline": baseline}
    variables["sim"] = {"time_scale": 0.005, "noise": 0}
    entry = {"connection": "local", "workdir": str(folder / "w"), "engine": engine, "python": sys.executable,
             "secrets": {"api_key": {"env": "SPECOPS_T_C55_QUOTED"}, "db_password": {"file": "db_password.txt"},
                         "HF_TOKEN": {"env": "SPECOPS_T_C55_SHORT"}}}
    return inventory(folder, {"gpu": entry}, variables)


def _theirs(workdir: Path) -> list[Path]:
    """Files a server writes itself (its log, rotated ones too): it shows the argv it was given
    (`--api-key`), and a dying server may quote what it read."""
    return sorted((workdir / ".specops" / "logs").glob("*.log*"))


class Route:
    """One host's route: every output kept, every file scanned after each step. API_KEY is
    allowed in the servers' own logs (a server prints its arguments), nothing else is."""

    def __init__(self, inv: Path, cache: Path, *roots: Path, logs_hold_all: bool = False):
        self.inv, self.workdir = inv, inv.parent / "w"
        self.outputs: dict[str, str | bytes] = {}
        every = [self.workdir, inv.parent / "runs", cache, *roots]
        self.scans = canary.Scans(DECLARED + [ARM], every, lambda: canary.allowed_env_files(self.workdir)
                                  + (_theirs(self.workdir) if logs_hold_all else []))
        self.api_key = canary.Scans(API_KEY, every,
                                    lambda: canary.allowed_env_files(self.workdir) + _theirs(self.workdir))

    def run(self, name: str, *args: str, ok: tuple[int, ...] = (0,)) -> str:
        res = run_cli(*args, "--host", "gpu", "-i", str(self.inv))
        return self.record(name, res.exit_code, res.output, ok)

    def record(self, name: str, code: int, output: str | bytes, ok: tuple[int, ...] = (0,)) -> str:
        self.outputs[name] = output
        self.scans.after(name)
        self.api_key.after(name)
        text = output.decode(errors="replace") if isinstance(output, bytes) else output
        assert code in ok, f"{name}: exit {code}\n{text[-3000:]}"
        return text

    @property
    def findings(self) -> list[str]:
        return [*canary.texts(self.outputs, ALL), *self.scans.findings, *self.api_key.findings]


@pytest.fixture
def secrets_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The secrets' variables, and a cache root of this test's own (scanned: tracebacks are saved there)."""
    cache = canary.own_cache_root(tmp_path / "cache")
    monkeypatch.setenv("SPECOPS_CACHE", str(cache))
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    yield cache


def _check_env_files(workdir: Path) -> None:
    for path in [p for p in canary.allowed_env_files(workdir) if p.exists()]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, f"{path} is not 0600"


def _trace(tmp_path: Path) -> Path:
    rows = [{"timestamp": 1000 + t, "input_length": 16, "output_length": 8, "hash_ids": [1]} for t in (0, 40, 80)]
    path = tmp_path / "trace.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _deploy_on_a_terminal(route: Route, cache: Path) -> None:
    """deploy -v with a terminal as its output: the live view draws what hosts do."""
    env = {**os.environ, "SPECOPS_CACHE": str(cache), **ENV}
    code, shown = canary.on_a_terminal(canary.specops_argv("-v", "deploy", "--host", "gpu", "-i", str(route.inv),
                                                           "-p", DEPLOY, "--runs-dir", str(route.inv.parent / "runs")),
                                       env)
    route.record("deploy -v on a terminal", code, shown)
    assert b"\x1b[?25l" in shown, "the cursor was never hidden: the live view never drew"


def test_canary_through_the_terminal_trace_phases_and_server_info(tmp_path: Path, secrets_env: Path) -> None:
    inv = _host(tmp_path, "sim")
    trace, phases = tmp_path / "bench-trace", tmp_path / "bench-phases"
    route = Route(inv, secrets_env, trace, phases)
    small = ["--arms", "baseline", "--repeats", "1", "--input-len", "16", "--output-len", "8", "--keep-servers"]
    with canary.ArgvSampler(DECLARED + [ARM]) as argv:
        try:
            _deploy_on_a_terminal(route, secrets_env)
            route.run("status --json", "status", "--json")
            route.run("logs --json", "logs", "-n", "200", "--json")
            route.run("bench --trace", "-v", "bench", *small, "--trace", str(_trace(tmp_path)), "--out", str(trace))
            route.run("bench --phases --json", "bench", *small, "--phases", "4/s:1s", "--out", str(phases), "--json")
        finally:
            route.run("stop", "stop")
    assert '"api_key": "***"' in (phases / "manifest.json").read_text(), "no /server_info stored to scan"
    _check_env_files(route.workdir)
    assert argv.passes > 0
    canary.assert_clean(route.findings, argv.findings)


def test_canary_through_a_server_that_dies_logging_a_secret(tmp_path: Path, secrets_env: Path) -> None:
    """The simulator refuses a seed it cannot read and prints it: the failure reason quotes a
    declared secret (the same value given to the arm), as a server quoting its token would."""
    inv = _host(tmp_path, "crash", arm_env={"SPECOPS_SIM_SEED": QUOTED})
    route = Route(inv, secrets_env, logs_hold_all=True)
    try:
        out = route.run("deploy --json (dies)", "deploy", "-p", DEPLOY, "--runs-dir", str(inv.parent / "runs"),
                        "--json", ok=(1,))
        route.run("deploy -v (dies)", "-v", "deploy", "-p", DEPLOY, "--runs-dir", str(inv.parent / "runs"), ok=(1,))
    finally:
        route.run("stop", "stop")
    log = (route.workdir / ".specops" / "logs" / "baseline.log").read_text()
    assert "bad simulator option" in log, log[-2000:]
    assert "***" in out
    journal = [json.dumps(e) for e in events(only_run_dir(inv.parent / "runs"))]
    route.outputs["events.jsonl"] = "\n".join(journal)
    canary.assert_clean(route.findings)


def test_canary_through_the_vllm_face(tmp_path: Path, secrets_env: Path, vllm_tree: Path) -> None:  # noqa: F811
    inv = _host(tmp_path, "vllm", engine="sim-vllm")
    out = tmp_path / "bench-vllm"
    route = Route(inv, secrets_env, out)
    with canary.ArgvSampler(DECLARED + [ARM]) as argv:
        try:
            route.run("deploy -v", "-v", "deploy", "-p", DEPLOY, "--runs-dir", str(inv.parent / "runs"))
            route.run("status --json", "status", "--json")
            route.run("bench --json", "bench", "--arms", "baseline", "--concurrency", "1", "--repeats", "1",
                      "--num-prompts", "2", "--input-len", "16", "--output-len", "8", "--out", str(out),
                      "--keep-servers", "--json")
            route.run("logs", "logs", "-n", "100")
        finally:
            route.run("stop", "stop")
    _check_env_files(route.workdir)
    assert argv.passes > 0
    canary.assert_clean(route.findings, argv.findings)


# ----- planted state: nothing of it runs, nothing outside the workdir is touched --------------

DEAD_PID = 2 ** 22 + 7


def _plant(wd: Path, arm: str, holding: bool = True, **over: Any) -> Path:
    """A state file as an attacker on the host would write it; `holding`: with secrets in it
    too, to be shown nowhere (a file specops rewrites is planted without, so its copy is judged)."""
    given = [API_KEY] if holding else []
    doc = {"arm": arm, "kind": arm, "pid": DEAD_PID, "pgid": DEAD_PID, "proc_start": "1", "port": 1,
           "command": " ".join(["x", "--api-key", *given]), "argv": ["x", "--api-key", *given],
           "env": {"HF_TOKEN": SHORT} if holding else {}, "args_hash": "h", "log_path": paths.server_log(str(wd), arm), "state_path": paths.server_state(str(wd), arm),
           "mechanism": "none", "started_at": 0.0, "workdir": str(wd), **over}
    path = Path(paths.server_state(str(wd), arm))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=1))
    return path


def _plant_lease(wd: Path, arm: str, victim: Path) -> Path:
    """A lease file pointing outside the workdir, with a secret in it."""
    folder = Path(paths.leases_dir(str(wd), arm))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "planted.json"
    path.write_text(json.dumps({"run_id": "x", "host": "gpu", "path": str(victim), "token": QUOTED}))
    return path


def test_planted_state_and_lease_files_run_nothing(tmp_path: Path, secrets_env: Path, commands: list[str],  # noqa: F811
                                                   caplog: pytest.LogCaptureFixture) -> None:
    inv = _host(tmp_path, "planted")
    wd = inv.parent / "w"
    marker, victim = tmp_path / "RUNTIME-RAN", tmp_path / "victim.txt"
    victim.write_text("keep me")
    runtime = tmp_path / "rt.sh"
    runtime.write_text(f"#!/bin/sh\necho \"$@\" >> {marker}\n")
    runtime.chmod(0o755)
    bystander = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE,
                                 start_new_session=True)
    planted = [_plant(wd, "evil", container={"runtime": str(runtime), "name": container_name(str(wd), "evil")},
                      config_path=str(victim)),
               _plant(wd, "group", pid=DEAD_PID, pgid=bystander.pid, config_path=str(victim)),
               _plant(wd, "one", pid=1, pgid=1, log_path=str(victim)),
               _plant_lease(wd, "baseline", victim)]
    route = Route(inv, secrets_env)
    try:
        route.run("stop (planted)", "stop", ok=(0, 1))
        route.run("status (planted)", "status", ok=(0, 1))
        route.run("status --json (planted)", "status", "--json", ok=(0, 1))
        _plant(wd, "baseline", holding=False, config_path=str(victim),
               container={"runtime": str(runtime), "name": container_name(str(wd), "baseline")})
        route.run("deploy over planted", "deploy", "-p", DEPLOY, "--runs-dir", str(inv.parent / "runs"), ok=(0, 1))
        assert alive_after_signals(bystander), "a planted pgid was signalled"
    finally:
        route.run("stop", "stop", ok=(0, 1))
        bystander.communicate(b"")
    assert not marker.exists(), marker.read_text()
    assert victim.read_text() == "keep me"
    assert not [c for c in commands if str(runtime) in c], "the planted runtime was run"
    assert f"skipping {planted[0]}" in caplog.text and f"skipping {planted[1]}" in caplog.text
    route.outputs["warnings logged"] = caplog.text
    leaked = [f for f in route.findings if not any(str(p) in f for p in planted)]  # the planted files are theirs
    canary.assert_clean(leaked)
