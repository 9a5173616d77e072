"""One host's part of `specops bench`: launch (or reuse) the arms, run the matrix point by
point, write each result the moment it exists, relaunch a crashed arm once, stop what
was launched. Used by the `bench` step kind. The servers are the arm pool's
(bench/armpool.py) and each point is measured by the host's runner (bench/runners.py):
this module schedules the points and keeps their records."""

from __future__ import annotations

import copy
import dataclasses
import functools
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from specops.bench.armpool import ArmPool
from specops.bench.matrix import Point, missing_points, point_groups
from specops.bench.repeats import level_key, settled, throughputs
from specops.bench.runners import (
    ArmServer,
    Load,
    Runner,
    crash_excerpt,
    runner_for,
    sampled,
    server_dead,
)
from specops.bench.scheduling import AT_ONCE, ONE_AT_A_TIME, compare, decide, median, probe_level
from specops.bench.settings import BenchSettings
from specops.config.inventory import Host
from specops.errors import SpecopsError
from specops.records.manifest import ArmRecord, Manifest, Scheduling
from specops.records.manifest import update as update_manifest
from specops.records.schema import CONTEXT_AXIS, STATUS_FAILED, ResultRecord
from specops.records.store import append_result, load_results
from specops.secrets import redact
from specops.servers import LaunchPlan, ServerState, end_reason, server_info
from specops.servers.container import image_manifest, image_record
from specops.servers.lease import LeaseBook, TakenOver
from specops.servers.lifecycle import check_version
from specops.servers.slurm import replica_plan, replicas
from specops.transport.base import Transport
from specops.transport.connect import open_transport


def point_load(settings: BenchSettings, point: Point) -> Load:
    """What the point sends, whichever runner measures it."""
    input_len, output_len = settings.length_of(point)
    return Load(concurrency=point.concurrency, repeat=point.repeat, num_prompts=settings.prompts_for(point.level),
                input_len=input_len, output_len=output_len, dataset=settings.dataset, seed=settings.seed,
                timeout_s=settings.point_timeout, rate=point.rate, arrival=settings.arrival, trace=settings.trace,
                trace_sha256=settings.trace_sha256, phases=settings.phases)


def gpus_share(plans: list[LaunchPlan]) -> bool:
    """True when two arms would share a GPU, or the host's CPU (`device: cpu`: one measured
    arm beside another's idle server would share its cores and memory): then they run one
    after another."""
    seen: set[str] = set()
    for plan in plans:
        devices = ({"cpu"} if plan.device == "cpu" else
                   {d for d in plan.env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d})
        if not devices:
            continue
        if devices & seen:
            return True
        seen |= devices
    return False


class HostSweep:
    """The sweep on one host. `log` receives progress lines (the step's journal)."""

    def __init__(self, *, host: Host, transport: Transport, plans: list[LaunchPlan], settings: BenchSettings,
                 run_dir: Path, tree: str, log: Callable[[str, dict[str, Any]], None],
                 progress: Callable[[ResultRecord], None] | None = None, leases: LeaseBook | None = None,
                 on_wait: Callable[[str], None] | None = None):
        self.host, self.transport, self.settings, self.run_dir, self.tree = host, transport, settings, run_dir, tree
        self.plans = {p.arm: p for p in plans}
        self.log = log
        self.progress = progress or (lambda _e: None)
        #: this run's arm leases (servers.lease); None: no leasing (a sweep driven by hand)
        self.leases = leases
        #: the arms' servers (claim, up, down, relaunch, taken over), one pool shared by the
        #: sweep's threads (bench/armpool.py)
        self.pool = ArmPool(host.name, self.plans, leases=leases,
                            run_id=leases.run_id if leases is not None else run_dir.name,
                            ready_timeout=settings.ready_timeout, keep_servers=settings.keep_servers, log=log,
                            on_wait=on_wait)
        #: what measures each point (bench/runners.py); one per host, shared by the sweep's threads
        self.runner: Runner = runner_for(settings.runner, engine=host.engine, python=host.python, tree=tree, log=log)
        self.time_scales: dict[str, Any] = {}  # per arm, /server_info's sim_time_scale (a scaled clock)
        self.scheduling: Scheduling | None = None  # how the arms were scheduled (bench/scheduling.py)

    # ----- servers ---------------------------------------------------------------------

    @property
    def states(self) -> dict[str, ServerState]:
        """Per arm, the server it measures (the pool's)."""
        return self.pool.states

    @property
    def launched(self) -> set[str]:
        """The arms whose servers this sweep launched: the pool's live set (run.state reads it)."""
        return self.pool.launched

    @property
    def taken_over(self) -> dict[str, str]:
        """arm -> what ended it: another run took it over."""
        return self.pool.taken_over()

    def _leased(self, arm: str) -> bool:
        return self.pool.leased(arm)

    def claim(self, arms: list[str]) -> None:
        self.pool.claim(self.transport, arms)

    def _up(self, arms: list[str], avoid: tuple[int, str] | None = None) -> None:
        self.pool.up(self.transport, arms, avoid)
        infos = self._record_arms(arms)
        for arm in arms:  # results are credited to the tree only when the tree's SGLang answered
            if "error" not in infos[arm]:
                check_version(self.transport, self.states[arm], infos[arm])

    def _down(self, arms: list[str]) -> None:
        self.pool.down(self.transport, arms)

    def stop_launched(self) -> None:
        self.pool.stop_launched(self.transport)

    def _record_arms(self, arms: list[str]) -> dict[str, dict[str, Any]]:
        """Each arm's /server_info into the manifest (command, args, mechanism); returned."""
        infos: dict[str, dict[str, Any]] = {}
        for arm in arms:
            try:
                infos[arm] = server_info(self.transport, self.states[arm])
            except SpecopsError as exc:
                infos[arm] = {"error": str(exc)}

        def update(manifest: Manifest) -> None:
            host_part = manifest.host(self.host.name)
            arms_part = host_part.arm_records()
            for arm in arms:
                plan, state, info = self.plans[arm], self.states[arm], infos[arm]
                self.time_scales[arm] = info.get("sim_time_scale")
                # through the sink, keys and all: a server echoes its --api-key as "api_key"
                server_args = redact({k: v for k, v in info.items() if k not in ("internal_states",)})
                record: dict[str, Any] = {
                    "command": state.command, "argv": state.argv, "mechanism": state.mechanism,
                    "effective_threshold": state.effective_threshold, "notes": plan.notes,
                    "server_args": server_args, "simulated": bool(info.get("simulated")), "device": plan.device}
                if state.slurm:  # which job, node and GPU indices measured this arm
                    record["slurm"] = {k: state.slurm.get(k) for k in ("job_id", "node", "gpus")}
                if state.container:  # which image (id and registry digest) measured this arm
                    record["container"] = image_record(state.container)
                arms_part[arm] = ArmRecord.from_dict(record)
            images = image_manifest([self.states[a] for a in self.states])
            if images is not None:
                host_part.merge({"container": images})
        update_manifest(self.run_dir, update)
        return infos

    # ----- points ----------------------------------------------------------------------

    def _measure(self, point: Point) -> ResultRecord:
        """The point on its arm's server, by this host's runner (bench/runners.py)."""
        arm = point.arm
        server = ArmServer(self.states[arm], self.plans[arm], self.time_scales.get(arm))
        return self.runner.measure(self.transport, server, point_load(self.settings, point))

    def _measure_sampled(self, point: Point) -> ResultRecord:
        """`_measure` with the server's running batch sampled meanwhile (runners.sampled)."""
        return sampled(self.transport, self.states[point.arm], functools.partial(self._measure, point))

    def _server(self, arm: str, before: dict[str, Any] | None = None) -> dict[str, Any]:
        """The identity of the server a point measures (pid, start, args hash, who launched
        it, which other runs share it), checked on the host before and after the point
        when the arm is leased. Raises TakenOver when this run's lease was revoked or the
        server was restarted with other arguments; after the point (`before` given), a
        restart with the same arguments marks the identity `restarted`."""
        state, shared = self.states[arm], []
        if self._leased(arm):
            assert self.leases is not None
            view = self.leases.check(self.transport, self.host.name, arm)
            now = view.state
            if now is not None and (now.pid, now.proc_start) != (state.pid, state.proc_start):
                if now.args_hash != self.plans[arm].args_hash:
                    raise TakenOver(f"arm {arm} restarted with other launch arguments by "
                                    f"{'run ' + now.launched_by if now.launched_by else 'another process'}",
                                    where=f"host {self.host.name}, arm '{arm}'")
                state = now  # restarted with the same arguments (by a run sharing it)
                self.pool.restarted(arm, now)
            shared = sorted({x.run_id for x in view.live(self.leases.cli_host)
                             if x.key != self.leases.key and x.args_hash == state.args_hash})
        ident = {"pid": state.pid, "proc_start": state.proc_start, "args_hash": state.args_hash,
                 "config_hash": self.plans[arm].config_hash, "started_at": state.started_at,
                 "launched_by": state.launched_by, "shared_with": shared}
        if before is not None:
            ident["shared_with"] = sorted(set(before["shared_with"]) | set(shared))
            if (before["pid"], before["proc_start"]) != (state.pid, state.proc_start):
                ident["restarted"] = before["pid"]
        return ident

    def _end_arm(self, arm: str, exc: TakenOver) -> None:
        """Another run took the arm over: its server is theirs now; this sweep leaves it alone."""
        self.pool.end(arm, exc)

    def run_point(self, point: Point) -> ResultRecord:
        """Measure one point and write it; on a crashed server record the failure with the log
        excerpt and relaunch the arm once. Where another run took the arm over (checked on
        the host before and after the point), the point fails saying so, and the arm ends."""
        plan = self.plans[point.arm]
        started = time.time()
        taken: TakenOver | None = None
        ident: dict[str, Any] | None = None
        raw = ResultRecord()
        try:
            ident = self._server(point.arm)
            try:
                raw = self._measure_sampled(point)
            except SpecopsError as exc:
                raw = ResultRecord.failed_point(str(exc))
            ident = self._server(point.arm, ident)
        except TakenOver as exc:
            taken = exc
            raw = ResultRecord.failed_point(exc.message)
        if ident is not None and ident.pop("restarted", None) is not None and raw.status != STATUS_FAILED:
            raw = replace(raw, status=STATUS_FAILED,
                          error=f"server '{point.arm}' was restarted during the point (same arguments); not counted")
        record = replace(raw, host=self.host.name, engine=self.host.engine, arm=point.arm, mechanism=plan.mechanism,
                         concurrency=point.concurrency, rate=point.rate, repeat=point.repeat, extra=dict(raw.extra))
        self._set_length(record, point)
        if ident is not None:
            record.shared_with = ident.pop("shared_with")
            record.server = ident
        state = self.states[point.arm]
        crashed = taken is None and record.status == STATUS_FAILED and server_dead(self.transport, state)
        if crashed:
            excerpt = crash_excerpt(self.transport, state)
            record.error = f"server '{point.arm}' crashed during the point: {record.error or ''}".strip()
            ended = end_reason(self.transport, state)
            if ended:  # a Slurm arm: the job's end state and reason (FAILED, CANCELLED, TIMEOUT, ...)
                record.error = f"server '{point.arm}' {ended} during the point: {raw.error or ''}".strip()
            record.extra["log_excerpt"] = excerpt
        written = append_result(self.run_dir, record)
        self.log("point", {"arm": point.arm, "concurrency": point.concurrency, **({"rate": point.rate} if point.rate
                           is not None else {}), "repeat": point.repeat,
                           "status": written.status, "output_throughput": written.output_throughput,
                           "t0": round(started, 3), "wall_s": round(time.time() - started, 3)})
        self.progress(written)
        if taken is not None:
            self._end_arm(point.arm, taken)
        elif crashed:
            self._relaunch(point.arm)
        return written

    @staticmethod
    def _set_length(record: ResultRecord, point: Point) -> None:
        """A point of a several-length sweep records the length it asked for (the report
        and --resume group by it); a one-length sweep's records are as before."""
        if point.input_len is not None:
            record.input_len, record.output_len = point.input_len, int(point.output_len or 0)
            record.extra[CONTEXT_AXIS] = True

    def _relaunch(self, arm: str) -> None:
        self._up([arm], avoid=self.pool.relaunch(arm))  # a run sharing the arm may relaunch it first

    # ----- the sweep -------------------------------------------------------------------

    def run(self, points: list[Point]) -> None:
        needed = [a for a in self.settings.arms if any(p.arm == a for p in points)]
        try:
            self.claim(needed)
            if any(p.slurm is not None for p in self.plans.values()):
                return self._run_jobs(points)
            shares = gpus_share(list(self.plans.values()))
            sched = decide(self.settings.scheduling, arms=len(needed), shares_gpu=shares,
                           cores=self.runner.client_cores(self.transport) if self.settings.scheduling == "auto" and not shares
                           and len(needed) > 1 else None)
            if shares:
                self._record_scheduling(sched)
                # Arms that share GPUs cannot be up together: launch, sweep, stop, one arm at a time.
                for arm in needed:
                    self._up([arm])
                    for point in points:
                        if point.arm == arm and self._wanted(point):
                            self.run_point(point)
                    self._down([arm])
                return None
            if needed:
                self._up(needed)
            if sched.mode == AT_ONCE:
                return self._run_side_by_side(points, sched)
            self._record_scheduling(sched)
            for point in points:
                if self._wanted(point):
                    self.run_point(point)
        finally:
            self.stop_launched()
        return None

    # ----- scheduling: side by side, one arm at a time (bench/scheduling.py) -------------

    def _wanted(self, point: Point) -> bool:
        """The point still runs: its arm was not taken over, and with --repeats auto its arm
        and level are not settled yet (bench/repeats.py)."""
        if self.pool.taken(point.arm):
            return False
        if not self.settings.repeat_rule().auto:
            return True
        return bool(unsettled(self.settings, [point], load_results(self.run_dir), self.host.name))

    def _record_scheduling(self, sched: Scheduling) -> None:
        self.scheduling = sched

        def update(manifest: Manifest) -> None:
            manifest.host(self.host.name).scheduling = sched

        update_manifest(self.run_dir, update)
        self.log("scheduling", {"mode": sched.mode, "reason": sched.reason})

    def _connected(self, owner: "HostSweep | None" = None) -> "HostSweep":
        """A copy of the sweep for another thread: it shares the arm pool (one object, its
        state behind its lock) and the runner (its caches behind its lock), not the connection (a transport is
        not shared between threads)."""
        mine = copy.copy(owner or self)
        mine.transport = open_transport(self.host)
        return mine

    def _probe(self, points: list[Point]) -> list[Point]:
        """The fairness check's point on each arm: the first pending group at the sweep's
        median level (else the first group with two arms or more); [] when no group has two."""
        groups = [g for g in point_groups(points) if len({p.arm for p in g}) > 1]
        level = probe_level(self.settings.levels())
        at_level = [g for g in groups if g[0].level == level]
        return (at_level or groups or [[]])[0]

    def _measure_together(self, workers: dict[str, "HostSweep"], probe: list[Point]) -> dict[str, float | None]:
        """The probe measured on every arm at once; output tok/s per arm (None: it failed).
        Not written as results: the fairness check's figures go to the manifest."""
        got: dict[str, float | None] = {}

        def one(point: Point) -> None:
            try:
                raw = workers[point.arm]._measure_sampled(point)
            except SpecopsError as exc:
                raw = ResultRecord.failed_point(str(exc))
            tput = raw.output_throughput if raw.status != STATUS_FAILED else None
            got[point.arm] = float(tput) if isinstance(tput, (int, float)) else None

        errors = _in_threads([(f"fair-{p.arm}", functools.partial(one, p)) for p in probe])
        if errors:
            raise errors[0]
        return got

    def _run_side_by_side(self, points: list[Point], sched: Scheduling) -> None:
        """Every arm measures the same point (level, repeat, length) at once, each with its own
        client and connection, then the next point. A fairness check first (the probe alone,
        then side by side: a failure interleaves the rest) and at the end (a failure measures
        the side-by-side points again, one arm at a time)."""
        workers = {arm: self._connected() for arm in self.settings.arms if any(p.arm == arm for p in points)}
        try:
            probe = self._probe(points)
            alone = {p.arm: _tps(self.run_point(p)) for p in probe}
            rest = [p for p in points if p not in probe]
            if probe:
                self._fairness(sched, "start", alone, self._measure_together(workers, probe))
            self._record_scheduling(sched)
            if sched.mode != AT_ONCE:
                for point in rest:
                    if self._wanted(point):
                        self.run_point(point)
                return
            together = self._groups_at_once(workers, rest)
            if probe and together:
                # the probe side by side once more, with the level's repeats measured side by side:
                # their median against the alone figure, within their spread
                last = self._measure_together(workers, probe)
                side = {p.arm: self._side_figures(p, together) + [v for v in [last.get(p.arm)] if v is not None]
                        for p in probe}
                fair = self._fairness(sched, "end", alone, {a: median(v) for a, v in side.items()}, side,
                                      redo=len(together))
                self._record_scheduling(sched)
                if not fair:
                    for point in together:
                        if not self.pool.taken(point.arm):
                            self.run_point(point)
        finally:
            for worker in workers.values():
                worker.transport.close()

    def _side_figures(self, probe: Point, together: list[Point]) -> list[float]:
        """Output tok/s of the probe's arm and level at the repeats measured side by side."""
        repeats = {p.repeat for p in together if p.arm == probe.arm and level_key(p) == level_key(probe)}
        figures = []
        for rec in load_results(self.run_dir):
            tput = _tps(rec)
            if (rec.host == self.host.name and rec.arm == probe.arm and rec.repeat in repeats
                    and level_key(rec) == level_key(probe) and tput is not None):
                figures.append(tput)
        return figures

    def _fairness(self, sched: Scheduling, phase: str, alone: dict[str, float | None],
                  together: dict[str, float | None], spread: dict[str, list[float]] | None = None,
                  redo: int = 0) -> bool:
        """Record one fairness check; on a failure the sweep goes on one arm at a time, saying why."""
        check = compare(phase, alone, together, spread)
        sched.fairness.append(check)
        if not check["ok"]:
            sched.mode = ONE_AT_A_TIME
            then = (f"the {redo} points measured side by side were measured again one arm at a time" if redo
                    else "fell back to one arm at a time")
            sched.reason = f"fairness check failed at the {phase} ({check['why']}): {then}"
        return bool(check["ok"])

    def _groups_at_once(self, workers: dict[str, "HostSweep"], points: list[Point]) -> list[Point]:
        """Each group of points (bench/matrix.point_groups) on its arms at once, one group after
        another; the points measured side by side."""
        together: list[Point] = []
        for group in point_groups(points):
            now = [p for p in group if self._wanted(p)]
            if len(now) == 1:
                self.run_point(now[0])
                continue
            errors = _in_threads([(f"sweep-{self.host.name}-{p.arm}", functools.partial(workers[p.arm].run_point, p))
                                  for p in now])
            together += now
            if errors:
                raise errors[0]
        return together

    def _run_jobs(self, points: list[Point]) -> None:
        """Slurm arms: each arm is its own job, on whatever node and GPUs the scheduler
        gives it, so each arm sweeps its points in a thread of its own (arms on different
        nodes at once; an arm whose job must wait for GPUs waits, then runs) and its job is
        cancelled when its points are done. The first error is raised once all have ended.
        A transport is not shared between threads: each arm gets a connection of its own.
        With `nodes: N`, allocations 2..N run the same sweep at once as hosts `H#2`..`H#N`."""
        sweeps = [self] + [self._replica(k) for k in range(2, replicas(next(iter(self.plans.values()))) + 1)]

        def arm_sweep(owner: HostSweep, arm: str, arm_points: list[Point]) -> None:
            mine = self._connected(owner)
            failed: BaseException | None = None
            try:
                mine._up([arm])
                for point in arm_points:
                    if mine._wanted(point):
                        mine.run_point(point)
            except BaseException as exc:  # noqa: BLE001 - the sweep's error wins over the stop's
                failed = exc
            try:
                mine._down([arm])
            except BaseException as exc:  # noqa: BLE001
                failed = failed or exc
            finally:
                mine.transport.close()
            if failed is not None:
                raise failed

        tasks: list[tuple[str, Callable[[], object]]] = []
        for owner in sweeps:
            for arm in self.settings.arms:
                arm_points = [p for p in points if p.arm == arm]
                if arm_points:
                    tasks.append((f"sweep-{owner.host.name}-{arm}", functools.partial(arm_sweep, owner, arm, arm_points)))
        try:
            errors = _in_threads(tasks)
        finally:
            for owner in sweeps:
                owner.stop_launched()
        if errors:
            raise errors[0]

    def _replica(self, k: int) -> "HostSweep":
        """The sweep on allocation k of a `nodes: N` Slurm host: host `H#k` in the results,
        arms `baseline#k` (own jobs, state files, logs and ports)."""
        twin = copy.copy(self)
        twin.host = dataclasses.replace(self.host, name=f"{self.host.name}#{k}")
        twin.plans = {arm: replica_plan(plan, k) for arm, plan in self.plans.items()}
        twin.pool = self.pool.replica(twin.host.name, twin.plans)
        return twin


def _tps(record: ResultRecord) -> float | None:
    """An ok record's output tok/s; None for a failed point."""
    tput = record.output_throughput if record.ok else None
    return float(tput) if isinstance(tput, (int, float)) else None


def _in_threads(tasks: list[tuple[str, Callable[[], object]]]) -> list[BaseException]:
    """Run each (name, task) in a thread of its own and wait for all; the errors they raised,
    for the caller to raise in the step's thread (one shape for Slurm arms and side-by-side points)."""
    errors: list[BaseException] = []

    def guarded(task: Callable[[], object]) -> None:
        try:
            task()
        except BaseException as exc:  # noqa: BLE001 - re-raised by the caller, in the step's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(task,), daemon=True, name=name) for name, task in tasks]
    for t in threads:
        t.start()
    for t in threads:
        while t.is_alive():
            t.join(0.5)
    return errors


def matrix_for(settings: BenchSettings, run_dir: Path, host: str) -> list[Point]:
    """The points this host still has to run (all of them on a fresh run). With several
    lengths a point is done when an ok record of its arm, level, repeat and length exists
    (records carry input_len/output_len), so `--extend` adding a length keeps the old points."""
    rule = settings.repeat_rule()
    matrix = settings.plan(rule.most)
    if all(p.input_len is None for p in matrix):
        missing = missing_points(run_dir, matrix, host=host)
    else:
        done = {(r.arm, r.concurrency, r.rate, r.repeat, r.input_len, r.output_len)
                for r in load_results(run_dir) if r.ok and r.host == host}
        missing = [p for p in matrix
                   if (p.arm, p.concurrency, p.rate, p.repeat, p.input_len, p.output_len) not in done]
    return unsettled(settings, missing, load_results(run_dir), host) if rule.auto else missing


def unsettled(settings: BenchSettings, points: list[Point], records: list[ResultRecord], host: str) -> list[Point]:
    """With `--repeats auto`: the points whose arm and level still need a repeat
    (bench/repeats.py); the rest are settled by the records so far."""
    rule = settings.repeat_rule()
    values = throughputs(records, host)
    return [p for p in points if p.repeat < rule.least or settled(rule, values, settings.arms, p.arm, level_key(p)) is None]


