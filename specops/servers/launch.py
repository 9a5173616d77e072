"""Arm profile + the tree's detected layout -> the exact launch command.

The engine words the arm (`ServingEngine.arm_flags`: its flags, the mechanism the tree has, an
arm the tree cannot run refused there, before anything is launched); this module turns that
into the command, environment and files of one server, and the identity it is recognised by.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from specops.engines import engine_named
from specops.engines.base import EngineLayout
from specops.hostfiles import paths
from specops.hostfiles.paths import neutral_cwd
from specops.servers.arms import ArmSpec
from specops.servers.container import run_argv
from specops.sim.knobs import FAULTS, VALUED

#: `native-schedule`: vLLM's num_speculative_tokens_per_batch_size inside --speculative-config
MECHANISMS = ("none", "eagle3", "native-adaptive", "dynamic-spec-disable-patch", "native-schedule")


@dataclass
class LaunchPlan:
    """Everything needed to start one arm and to recognise it later (the args hash)."""

    arm: str
    kind: str
    port: int
    argv: list[str]
    env: dict[str, str]
    mechanism: str
    workdir: str
    log_path: str
    state_path: str
    config_path: str | None = None
    config_json: str | None = None
    effective_threshold: int | None = None
    notes: list[str] = field(default_factory=list)
    model: str = ""
    ready_path: str = "/health"
    engine_version: str | None = None  # the tree's release: a server from another version is never reused
    #: the registered engine that words it (a built-in's or a plugin's name): its state file says so
    engine: str = ""
    #: where the process starts: an empty folder, never one holding `sglang/` (see sglang/venv.py)
    cwd: str = ""
    #: the host's secrets file, loaded into the server's environment at start (None: no secrets)
    secrets_file: str | None = None
    #: a Slurm host's request for this arm (servers.slurm.SlurmSettings as a dict); None elsewhere
    slurm: dict[str, Any] | None = None
    #: what the arm computes on: `gpu`, or `cpu` (SGLang's CPU serving: `--device cpu`, no GPUs)
    device: str = "gpu"
    #: the arm as a container of `sglang_image` (servers.container.adapt_plan); None: a host process
    container: dict[str, Any] | None = None

    @property
    def command(self) -> str:
        """The full command line as a user would paste it (env first; a container's run)."""
        if self.container is not None:
            return shlex.join(run_argv(self))
        prefix = [f"{k}={v}" for k, v in sorted(self.env.items())]
        return shlex.join(prefix + self.argv)

    @property
    def args_hash(self) -> str:
        """sha256 of argv + env + adaptive config + tree version: equal hashes mean an identical server."""
        return self._hash(self.argv)

    @property
    def config_hash(self) -> str:
        """args_hash without the simulator's injected faults (sim.knobs.FAULTS): what the report
        compares, so a run resumed without `--sim-crash-after` still measured one configuration."""
        argv, skip = [], 0
        for a in self.argv:
            name = a.partition("=")[0]
            if skip:
                skip -= 1
            elif name in FAULTS:
                skip = 1 if a in VALUED else 0
            else:
                argv.append(a)
        return self._hash(argv)

    def _hash(self, argv: list[str]) -> str:
        # the release under the key it had before records named the engine: old servers hash the same
        fields = {"argv": argv, "env": sorted(self.env.items()),
                  "config": self.config_json, "sglang_version": self.engine_version}
        if self.container is not None:  # another image (or runtime, GPUs, mounts) is another server
            fields["container"] = self.container
        blob = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()


def build_launch(arm: ArmSpec, layout: EngineLayout, *, workdir: str, python: str = "python3",
                 engine: str = "sglang", sglang_tree: str | None = None,
                 sim_options: Sequence[str] = (), bucket_sources: Mapping[str, str] | None = None,
                 where: str | None = None) -> LaunchPlan:
    """The launch plan for `arm` on a tree with `layout`. `workdir` is the host's absolute
    work directory. `engine` (a registered engine's name, specops.engines.engine_named) words
    the flags, the command and the environment: `sim` runs `python -m specops.sim --sglang-tree
    TREE` with the same SGLang flags. `bucket_sources` ({tree path: text} of the files that may
    build the CUDA-graph capture list) let the adaptive arm use the buckets the tree really pads to.

    Raises ConfigError when the tree cannot run the arm (e.g. adaptive without a mechanism)
    or its own parser would refuse a flag (naming the flag and the tree's version)."""
    where = where or f"arm '{arm.name}'"
    serving = engine_named(engine, where)
    own = serving.arm_flags(arm, layout, workdir=workdir, bucket_sources=bucket_sources, where=where)
    argv = serving.launch_argv(python, own.flags, tree=sglang_tree, options=sim_options, where=where)
    env = serving.launch_env(arm.env, cpu=arm.cpu, hub_offline=arm.hub_offline)
    if arm.gpus is not None and not arm.cpu:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in arm.gpus)
    return LaunchPlan(arm=arm.name, kind=arm.kind, port=arm.port, argv=argv, env=env, mechanism=own.mechanism,
                      workdir=workdir, log_path=paths.server_log(workdir, arm.name),
                      state_path=paths.server_state(workdir, arm.name),
                      config_path=own.config_path, config_json=own.config_json,
                      effective_threshold=own.effective_threshold, notes=list(own.notes), model=arm.model,
                      ready_path=layout.ready_path, engine_version=layout.version, engine=serving.spec.name,
                      cwd=neutral_cwd(workdir), device=arm.device)
