"""Points `specops tune` need not measure again: the ok baseline/EAGLE-3 points of earlier
bench or tune runs on the same configuration.

GPU time is what a decision costs, and a tune often follows a bench (or another tune) of
the very servers it would launch. A prior point counts only when it measured the same thing
this tune would:

- the same server: the record's `server.config_hash` (servers/launch.py: argv, env, adaptive
  config and tree version, less the simulator's injected faults) equals the hash of the arm
  as this tune would launch it on this host now;
- the same client: the same host, input and output length, requests per point, runner, and
  prompts: the run's recorded `dataset_hash` equals the hash of this tune's dataset and seed
  at that run's lengths (so a changed dataset file, or another seed, never matches), and the
  same sampling (the manifest's client temperature).

Where it looks: every run directory directly under the runs directory, and one level deeper
(a several-length tune keeps one run directory per length). Newest runs first; per arm and
level at most `repeats` records are taken, renumbered 0..k-1 so the bench step measures only
the repeats still missing, each tagged `reused_from` (its run directory) and `reused_repeat`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from specops.bench.settings import BenchSettings, dataset_hash
from specops.bench.sweep import gpus_share
from specops.config.inventory import Host, Inventory
from specops.decide.tune import REUSED_FROM
from specops.errors import SpecopsError
from specops.records.manifest import Manifest
from specops.records.schema import CONTEXT_AXIS, STATUS_OK, ResultRecord
from specops.records.store import MANIFEST_JSON, RESULTS_JSONL, load_manifest, load_results
from specops.run.engine import resolve_vars
from specops.servers.plans import plan_arms
from specops.steps import load
from specops.transport.connect import open_transport

TEMPERATURE = 0   # the builtin client and the sglang runner both sample greedily (manifest client)


@dataclass
class Reuse:
    """What a search found: the records to copy (renumbered, tagged) and from which runs."""

    records: list[ResultRecord] = field(default_factory=list)
    runs: dict[str, int] = field(default_factory=dict)   # run directory -> points taken from it
    looked_in: int = 0                                   # run directories read
    note: str = ""                                       # why nothing could be reused, when so

    def text(self) -> str:
        if not self.records:
            return f"reused no points ({self.note or f'none of {self.looked_in} runs matched this configuration'})"
        runs = ", ".join(f"{Path(r).name} ({n})" for r, n in self.runs.items())
        return f"reused {len(self.records)} points from run{'s' if len(self.runs) > 1 else ''} {runs}"


def config_hashes(inventory: Inventory, playbook_path: Path, host: Host, extra_vars: dict[str, Any],
                  arm_names: Sequence[str]) -> tuple[dict[str, str], bool] | None:
    """{arm: config hash} of the arms as the bench playbook would launch them on `host` now,
    and whether they may all be up at once (no GPU or CPU shared: bench's own rule); None
    when the host has no engine tree yet (nothing can have measured these servers there)."""
    playbook = load(playbook_path, [host])
    me = dataclasses.replace(host)
    with open_transport(me) as transport:
        me.expand_on_host(transport.expand)
        variables = resolve_vars(inventory, playbook, me, extra_vars, transport.expand(me.workdir))
        # the tree the bench playbook launches from: its `engine_tree` (vLLM's or SGLang's)
        tree = str(variables.get("engine_tree") or variables.get("sglang_dir") or f"{variables['workdir']}/sglang")
        try:
            plans = plan_arms(transport, me, variables, list(arm_names), tree, where=f"host {host.name}")
        except SpecopsError:
            return None
    return {p.arm: p.config_hash for p in plans}, not gpus_share(plans)


def run_dirs(runs_dir: Path, exclude: Iterable[Path] = ()) -> list[Path]:
    """Run directories under `runs_dir` (and one level deeper), newest results first."""
    if not runs_dir.is_dir():
        return []
    skip = {p.resolve() for p in exclude}
    found = [p.parent for p in list(runs_dir.glob(f"*/{RESULTS_JSONL}")) + list(runs_dir.glob(f"*/*/{RESULTS_JSONL}"))
             if (p.parent / MANIFEST_JSON).exists()]
    found = [d for d in found if d.resolve() not in skip and not any(d.resolve().is_relative_to(s) for s in skip)]
    return sorted(set(found), key=lambda d: (d / RESULTS_JSONL).stat().st_mtime, reverse=True)


def _same_prompts(manifest: Manifest, settings: BenchSettings, cache: dict[str, str]) -> bool:
    """The run's recorded dataset hash equals this tune's dataset and seed at that run's lengths."""
    bench = manifest.settings()
    if not bench.dataset_hash:
        return False
    if manifest.client is not None and manifest.client.get("temperature", TEMPERATURE) != TEMPERATURE:
        return False
    key = repr((bench.input_len, bench.output_len))
    if key not in cache:
        try:
            theirs = BenchSettings.from_dict({"dataset": settings.dataset, "seed": settings.seed,
                                              "input_len": bench.input_len, "output_len": bench.output_len})
            cache[key] = dataset_hash(theirs)
        except SpecopsError:
            cache[key] = ""
    return bool(cache[key]) and cache[key] == bench.dataset_hash


def _matches(rec: ResultRecord, host: str, hashes: dict[str, str], settings: BenchSettings, runner: str) -> bool:
    arm = str(rec.arm)
    server = rec.server
    if not isinstance(server, dict):
        return False
    length = settings.lengths()[0]
    return (rec.status == STATUS_OK and isinstance(rec.output_throughput, (int, float))
            and rec.rate is None and rec.host == host and arm in hashes
            and (server.get("config_hash") or server.get("args_hash")) == hashes[arm]
            and (rec.input_len, rec.output_len) == length
            and rec.num_prompts == settings.prompts_for(int(rec.concurrency))
            and rec.runner == runner)


def find_reusable(runs_dir: Path, *, host: str, hashes: dict[str, str], settings: BenchSettings, runner: str,
                  exclude: Iterable[Path] = ()) -> Reuse:
    """The prior points this tune may take instead of measuring (see the module docstring).
    `settings`: this tune's, with one length; `runner`: the runner it resolves to."""
    out, cache = Reuse(), dict[str, str]()
    taken: dict[tuple[str, int], int] = {}
    for run in run_dirs(runs_dir, exclude):
        out.looked_in += 1
        try:
            manifest = load_manifest(run)
            records = load_results(run)
        except SpecopsError:
            continue   # an unreadable run is not one to learn from; it is left as it is
        if not _same_prompts(manifest, settings, cache):
            continue
        for rec in records:
            if not _matches(rec, host, hashes, settings, runner):
                continue
            key = (str(rec.arm), int(rec.concurrency))
            n = taken.get(key, 0)
            if n >= int(settings.repeats):
                continue
            taken[key] = n + 1
            extra = {k: v for k, v in rec.extra.items() if k != CONTEXT_AXIS}
            extra.update({REUSED_FROM: str(run), "reused_repeat": rec.repeat})
            out.records.append(dataclasses.replace(rec, repeat=n, extra=extra))
            out.runs[str(run)] = out.runs.get(str(run), 0) + 1
    return out
