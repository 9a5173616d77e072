"""One host, one supervisor (servers.supervisor): the choice from the host's `slurm:` block
is made in one place, the module-level functions follow what the host's plans and state
files record, and a list mixing both kinds is refused before anything changes."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from specops.config.inventory import Host
from specops.config.slurm import SlurmSettings
from specops.errors import StepError
from specops.servers import supervisor
from specops.servers.launch import LaunchPlan
from specops.servers.lifecycle import LocalSupervisor
from specops.servers.records import ServerState
from specops.servers.slurm import SlurmSupervisor
from specops.transport.local import LocalTransport

SPECOPS = Path(__file__).resolve().parents[2] / "specops"
KINDS = {"LocalSupervisor", "SlurmSupervisor"}


def _plan(wd: str) -> LaunchPlan:
    return LaunchPlan(arm="eagle3", kind="eagle3", port=30001,
                      argv=["python3", "-m", "sglang.launch_server", "--host", "127.0.0.1", "--port", "30001"],
                      env={"CUDA_VISIBLE_DEVICES": "0"}, mechanism="eagle3", workdir=wd,
                      log_path=f"{wd}/.specops/logs/eagle3.log", state_path=f"{wd}/.specops/servers/eagle3.json")


def _state(arm: str, *, job: str | None = None) -> ServerState:
    return ServerState(arm=arm, kind=arm, pid=-1 if job else 4242, pgid=-1 if job else 4242, proc_start="",
                       port=30001, command="", argv=[], env={}, args_hash="", log_path="",
                       state_path=f"/nowhere/{arm}.json", mechanism="", started_at=0.0, workdir="/nowhere",
                       slurm={"job_id": job, "conf": None} if job else None)


def test_a_host_with_a_slurm_block_gets_the_slurm_supervisor_and_any_other_the_local_one() -> None:
    local = supervisor.supervisor_for(Host("box"))
    jobs = supervisor.supervisor_for(Host("login", slurm=SlurmSettings(partition="gpu")))
    assert isinstance(local, LocalSupervisor) and isinstance(jobs, SlurmSupervisor)
    assert isinstance(local, supervisor.Supervisor) and isinstance(jobs, supervisor.Supervisor)
    assert (local.kind, local.scheduled, jobs.kind, jobs.scheduled) == ("local", False, "slurm", True)


def test_the_kind_of_supervisor_is_chosen_in_one_place() -> None:
    """Nothing in the package constructs a supervisor but servers.supervisor's `_supervisor`."""
    made: set[tuple[str, str]] = set()

    class Calls(ast.NodeVisitor):
        def __init__(self, where: str) -> None:
            self.where, self.stack = where, ["<module>"]

        def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
            self.stack.append(node.name)
            self.generic_visit(node)
            self.stack.pop()

        def visit_Call(self, node: ast.Call) -> None:
            if isinstance(node.func, ast.Name) and node.func.id in KINDS:
                made.add((self.where, self.stack[-1]))
            self.generic_visit(node)

    for path in SPECOPS.rglob("*.py"):
        Calls(path.relative_to(SPECOPS.parent).as_posix()).visit(ast.parse(path.read_text()))
    assert made == {("specops/servers/supervisor.py", "_supervisor")}


def test_neither_supervisor_reads_the_other_kinds_record() -> None:
    """The local supervisor never looks at a state's or plan's `slurm` record (no dispatch left)."""
    tree = ast.parse((SPECOPS / "servers" / "lifecycle.py").read_text())
    assert [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "slurm"] == []


def test_the_plan_a_host_supervisor_adapted_goes_back_to_that_kind(tmp_path: Path) -> None:
    for host in (Host("box"), Host("login", slurm=SlurmSettings(partition="gpu"))):
        chosen = supervisor.supervisor_for(host)
        assert supervisor._of_plan(chosen.adapt(_plan(str(tmp_path)))).kind == chosen.kind


def test_a_list_mixing_local_processes_and_slurm_jobs_is_refused_by_name(tmp_path: Path) -> None:
    mixed = [_state("baseline"), _state("eagle3", job="12")]
    with pytest.raises(StepError) as err:
        supervisor.stop_states(LocalTransport("box"), mixed)
    assert "server 'baseline' runs as a local process" in err.value.message
    assert err.value.hint and "slurm: block" in err.value.hint


def test_a_local_host_refuses_a_slurm_jobs_state_file_before_anything_changes(tmp_path: Path) -> None:
    job = _state("eagle3", job="12")
    with pytest.raises(StepError, match="runs as Slurm job 12"):
        LocalSupervisor().stop(LocalTransport("box"), [job])
    with pytest.raises(StepError, match="runs as a local process"):
        SlurmSupervisor(SlurmSettings()).stop(LocalTransport("box"), [_state("baseline")])
