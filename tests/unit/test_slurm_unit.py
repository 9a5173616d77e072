"""The Slurm pieces that need no cluster: the `slurm:` block, the job script and sbatch
argv, and parsing `scontrol show job -d` (the text is what Slurm 22.05 prints)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specops.config.inventory import load_inventory
from specops.errors import ConfigError
from specops.secrets import env_file_text
from specops.servers.launch import LaunchPlan
from specops.servers.slurm import SlurmSettings, adapt_plan, job_script, parse_duration, parse_job, sbatch_argv
from specops.sim.testing import free_port
from tests.support.deploy import inventory

RUNNING = """JobId=12 JobName=specops-eagle3
   UserId=root(0) GroupId=root(0) MCS_label=N/A
   JobState=RUNNING Reason=None Dependency=(null)
   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0
   RunTime=00:01:05 TimeLimit=00:30:00 TimeMin=N/A
   Partition=debug AllocNode:Sid=localhost:9235
   NodeList=gpu-node-3
   BatchHost=gpu-node-3
   JOB_GRES=gpu:3
     Nodes=gpu-node-3 CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-1,3)
   StdOut=/shared/w/.specops/logs/eagle3.log
"""


def test_scontrol_show_job_running_pending_ended_and_gone() -> None:
    job = parse_job("12", RUNNING)
    assert (job.state, job.node, job.gpus, job.time_left_s) == ("RUNNING", "gpu-node-3", [0, 1, 3], 30 * 60 - 65)
    assert not job.ended
    pending = parse_job("13", "JobId=13 JobName=x\n   JobState=PENDING Reason=Resources Dependency=(null)\n"
                              "   RunTime=00:00:00 TimeLimit=UNLIMITED\n   NodeList=(null)\n")
    assert (pending.state, pending.reason, pending.node, pending.time_left_s) == ("PENDING", "Resources", "", None)
    failed = parse_job("14", "JobId=14\n   JobState=FAILED Reason=NonZeroExitCode Dependency=(null)\n"
                             "   ExitCode=1:0\n   RunTime=00:00:09 TimeLimit=1-00:00:00\n")
    assert failed.ended and failed.describe() == "job 14 FAILED (NonZeroExitCode, exit 1:0)"
    assert failed.time_limit_s == 86400
    gone = parse_job("15", "slurm_load_jobs error: Invalid job id specified")
    assert gone.ended and gone.state == "GONE"


def test_durations() -> None:
    assert parse_duration("1-02:03:04") == 93784
    assert parse_duration("05:00") == 300
    assert parse_duration("UNLIMITED") is None


def _plan(tmp: str = "/shared/w", port: int = 30001) -> LaunchPlan:
    return LaunchPlan(arm="eagle3", kind="eagle3", port=port,
                      argv=["python3", "-m", "sglang.launch_server", "--model-path", "m x", "--host", "127.0.0.1",
                            "--port", str(port)],
                      env={"CUDA_VISIBLE_DEVICES": "0,1", "HF_HOME": "/shared/hf"}, mechanism="eagle3", workdir=tmp,
                      log_path=f"{tmp}/.specops/logs/eagle3.log", state_path=f"{tmp}/.specops/servers/eagle3.json")


def test_plan_as_a_job_asks_for_as_many_gpus_binds_all_interfaces_and_quotes_everything() -> None:
    settings = SlurmSettings(partition="gpu", account="lab", time="1:00:00", sbatch_options=["--exclusive"],
                             conf="/etc/other/slurm.conf")
    plan = adapt_plan(_plan(), settings)
    assert "CUDA_VISIBLE_DEVICES" not in plan.env and plan.env["HF_HOME"] == "/shared/hf"
    assert plan.argv[plan.argv.index("--host") + 1] == "0.0.0.0"
    argv = sbatch_argv(plan)
    assert argv[:2] == ["env", "SLURM_CONF=/etc/other/slurm.conf"]
    assert "--gres=gpu:2" in argv and "--job-name=specops-eagle3" in argv and "--partition=gpu" in argv
    assert "--output=/shared/w/.specops/logs/eagle3.log" in argv and "--exclusive" in argv
    assert argv[-1] == "/shared/w/.specops/servers/eagle3.sbatch"
    gpus = adapt_plan(_plan(), SlurmSettings(gpu_request="gpus"))
    assert "--gpus=2" in sbatch_argv(gpus)
    script = job_script(plan)
    assert "/shared/w/.specops/servers/eagle3.env -- python3 -m sglang.launch_server --model-path 'm x'" in script
    assert "HF_HOME" not in script, "the environment is sourced from the arm's 0600 file, never written in the script"
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)


def test_the_job_script_turns_slurm_gpu_indices_into_cuda_visible_devices(tmp_path: Path) -> None:
    """No scheduler here: a fake `scontrol` prints the detail line the job script reads."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\necho '     Nodes=n1 CPU_IDs=0 Mem=0 GRES=gpu:3(IDX:0-1,3)'\n")
    (fake / "scontrol").chmod(0o755)
    plan = adapt_plan(_plan(str(tmp_path), port=free_port()), SlurmSettings())  # the script checks its port
    plan.argv = ["sh", "-c", 'echo "got=$CUDA_VISIBLE_DEVICES hf=$HF_HOME"']
    env_file = tmp_path / ".specops/servers/eagle3.env"
    env_file.parent.mkdir(parents=True)
    env_file.write_text(env_file_text(plan.env))
    script = job_script(plan)
    env = {"PATH": f"{fake}:/usr/bin:/bin", "SLURM_JOB_ID": "7"}
    out = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=30)
    assert "got=0,1,3 hf=/shared/hf" in out.stdout, out
    out = subprocess.run(["bash", "-c", script], env={**env, "CUDA_VISIBLE_DEVICES": "5"}, capture_output=True,
                         text=True, timeout=30)
    assert "got=5" in out.stdout, "a cluster that sets it itself is left alone"


def test_inventory_slurm_block_is_checked_with_file_line_and_key(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {"cluster": {
        "address": "login.example", "workdir": "/shared/me/specops",
        "slurm": {"partition": "gpu", "qos": "normal", "time": "2:00:00", "gpus_per_arm": 2}}})
    host = load_inventory(inv).hosts["cluster"]
    assert host.slurm == SlurmSettings(partition="gpu", qos="normal", time="2:00:00", gpus_per_arm=2)
    assert load_inventory(inv).host_vars(host)["scheduler"] == "slurm"
    inventory(tmp_path, {"cluster": {"address": "login.example", "slurm": {"partiton": "gpu"}}})
    with pytest.raises(ConfigError) as err:
        load_inventory(inv)
    assert "did you mean 'partition'" in str(err.value) and "hosts.yaml:" in str(err.value.where)
    inventory(tmp_path, {"cluster": {"address": "login.example", "slurm": {"gpu_request": "cards"}}})
    with pytest.raises(ConfigError, match="gres"):
        load_inventory(inv)


def test_login_names_another_host_whose_connection_settings_are_used(tmp_path: Path) -> None:
    inv = inventory(tmp_path, {
        "login1": {"address": "10.0.0.9", "port": 2222, "user": "me", "host_key": "strict"},
        "cluster": {"login": "login1", "workdir": "/shared/me/specops", "slurm": {"partition": "gpu"}}})
    hosts = load_inventory(inv).hosts
    cluster = hosts["cluster"]
    assert (cluster.address, cluster.port, cluster.user, cluster.host_key) == ("10.0.0.9", 2222, "me", "strict")
    assert cluster.workdir == "/shared/me/specops" and hosts["login1"].slurm is None
    inventory(tmp_path, {"login1": {"address": "10.0.0.9"}, "cluster": {"login": "logn1", "slurm": {}}})
    with pytest.raises(ConfigError, match="did you mean 'login1'"):
        load_inventory(inv)


def test_replica_plans_have_their_own_name_files_and_port() -> None:
    from specops.servers.slurm import replica_plan, replicas

    plan = adapt_plan(_plan(), SlurmSettings(nodes=3))
    assert replicas(plan) == 3 and replicas(_plan()) == 1
    assert replica_plan(plan, 1) is plan
    third = replica_plan(plan, 3)
    assert (third.arm, third.port) == ("eagle3#3", 30201)
    assert third.argv[third.argv.index("--port") + 1] == "30201"
    assert third.state_path.endswith("/eagle3#3.json") and third.log_path.endswith("/eagle3#3.log")
    assert "--job-name=specops-eagle3#3" in sbatch_argv(third)
