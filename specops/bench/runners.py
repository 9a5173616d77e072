"""The clients that measure one point on one arm's server, behind one protocol: `sglang`
(SGLang's own bench_serving, from the server's environment) and `builtin` (specops'
client, beside the server or through a tunnel). A sweep holds one runner, picked once
per host (`runner_for`), and only schedules points; what every point shares whatever
measures it (the running-batch sampler around it, the crash excerpt of its dead server)
is here too, once.

A runner keeps no connection: each call takes the caller's transport (the sweep's
threads each have their own), and its caches (the tree's benchmark command, whether the
host can import specops) are shared by those threads behind a lock."""

from __future__ import annotations

import json
import os
import posixpath
import threading
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Protocol

from specops.bench.arrivals import DEFAULT_ARRIVAL
from specops.bench.bench_serving import BenchCommand, bench_command, parse_bench_serving_output, to_model_time
from specops.bench.running import RunningSampler
from specops.bench.saturation import is_saturated
from specops.bench.switching import switching_extra
from specops.bench.warmup import WARMUP_ALONE
from specops.engines import engine_named, engine_of
from specops.errors import SpecopsError
from specops.hostfiles import paths
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.records.schema import ResultRecord
from specops.secrets import clip, loader_argv
from specops.servers import LaunchPlan, ServerState, arm_status, client_prefix
from specops.servers.logwatch import crash_blocks, tail_lines
from specops.transport.base import Transport
from specops.transport.forward import reach
from specops.transport.probes import read_cpu

#: exits 0 where `python -m specops.bench` can run: the client's module and the libraries it
#: imports are found (found, not imported: importing aiohttp takes 0.3-0.5 s of CPU, once per sweep)
CLIENT_FOUND = ("import importlib.util as u, sys; "
                "sys.exit(not all(u.find_spec(m) for m in ('specops.bench.client', 'aiohttp', 'yaml')))")
Log = Callable[[str, dict[str, Any]], None]
#: one request, sent alone before bench_serving's warm-up, with the key bench_serving would send
#: (OPENAI_API_KEY, from the arm's environment files): argv URL BODY TIMEOUT
WARM_ALONE = ("import os, sys, urllib.request as u; k = os.environ.get('OPENAI_API_KEY'); "
              "h = {'Content-Type': 'application/json', **({'Authorization': 'Bearer ' + k} if k else {})}; "
              "u.urlopen(u.Request(sys.argv[1], data=sys.argv[2].encode(), headers=h), "
              "timeout=float(sys.argv[3])).read()")
WARM_TEXT = "The quick brown fox"


def runner_name(choice: str, engine: str) -> str:
    """The runner a host of `engine` uses for `--runner choice`: the engine decides what auto is
    (the builtin client on a simulated host, where no SGLang is installed; SGLang's
    bench_serving on an SGLang host)."""
    return engine_named(engine).runner_name(choice)


@dataclass(frozen=True)
class Load:
    """What one point sends, the same for every arm at that point (fairness)."""

    concurrency: int
    repeat: int
    num_prompts: int
    input_len: int
    output_len: int
    dataset: str
    seed: int
    timeout_s: float
    rate: float | None = None           # an open loop at this many requests/s instead of the concurrency
    arrival: str = DEFAULT_ARRIVAL      # its arrival process (bench/arrivals.py)
    trace: str | None = None            # a replayed trace: its file here, and its digest
    trace_sha256: str | None = None
    phases: str | None = None           # rates one after another (bench/phases.py), the builtin client's


def rate_verdict(record: ResultRecord, load: Load) -> ResultRecord:
    """A bench_serving record of a rate point: its rate, and whether the server kept up
    (bench/saturation.py; the asked rate stands in for the offered one, which it does not report)."""
    if load.rate is None:
        return record
    return replace(record, rate=load.rate, arrival=load.arrival, offered_rate=load.rate,
                   saturated=is_saturated(load.rate, record.request_throughput))


def load_args(load: Load) -> list[str]:
    """The client's options for the point's load: `--concurrency C`, `--rate R --arrival A`, or
    `--phases TEXT --arrival A` (the client draws the same timeline from them)."""
    if load.phases is not None:
        return ["--phases", load.phases, "--arrival", load.arrival]
    if load.rate is not None:
        return ["--rate", repr(load.rate), "--arrival", load.arrival]
    return ["--concurrency", str(load.concurrency)]


@dataclass(frozen=True)
class ArmServer:
    """The server a point measures: its state (port, workdir, Slurm job), its launch plan
    (the python and environment files the client runs with) and `/server_info`'s
    sim_time_scale (a simulator's scaled clock; None on a real server)."""

    state: ServerState
    plan: LaunchPlan
    time_scale: Any = None


class Runner(Protocol):
    """Measures one point on one arm's server and returns its record (a failed point's
    record when the client failed; SpecopsError only for what is not the client's)."""

    name: str

    def measure(self, transport: Transport, server: ArmServer, load: Load) -> ResultRecord: ...

    def client_cores(self, transport: Transport) -> int | None:
        """CPU cores where this runner's clients run (None: unknown), for the scheduling rule."""
        ...


def _host_cores(transport: Transport) -> int | None:
    try:
        return read_cpu(transport).cores
    except SpecopsError:
        return None


class SglangRunner:
    """SGLang's bench_serving, run on the host with the server's own python (the
    environment the tree is installed in), from its neutral folder, with its environment:
    it imports the same SGLang. Its flags are read from the tree once."""

    name = "sglang"

    def __init__(self, tree: str) -> None:
        self.tree = tree
        self._lock = threading.Lock()
        self._bench: BenchCommand | None = None

    def command(self, transport: Transport) -> BenchCommand:
        """The tree's serving benchmark and the flags it accepts (read on first use)."""
        with self._lock:
            if self._bench is None:
                self._bench = bench_command(TransportTreeFiles(transport, self.tree))
            return self._bench

    def measure(self, transport: Transport, server: ArmServer, load: Load) -> ResultRecord:
        state, plan, n = server.state, server.plan, load.num_prompts
        out_file = paths.bench_output(state.workdir, state.arm, load.concurrency, load.repeat, load.rate)
        cwd = plan.cwd or state.workdir
        argv = self.command(transport).argv(plan.argv[0], port=state.port, dataset=load.dataset,
                                            input_len=load.input_len, output_len=load.output_len, num_prompts=n,
                                            concurrency=load.concurrency, output_file=out_file, seed=load.seed,
                                            model=state.model or None, rate=load.rate, arrival=load.arrival)
        transport.run(["mkdir", "-p", paths.bench_dir(state.workdir), cwd], timeout=30)
        transport.run(["rm", "-f", out_file], timeout=30)
        # the arm's environment (and the host's secrets) from the 0600 files its launch wrote
        env_files = [paths.server_env(plan.workdir, plan.arm)] + ([plan.secrets_file] if plan.secrets_file else [])
        # bench_serving's own warm-up runs at the point's concurrency: WARMUP_ALONE requests alone
        # first, as the builtin client sends, where an adaptive arm drafts whatever its threshold
        body = json.dumps({"text": WARM_TEXT, "sampling_params": {"max_new_tokens": max(load.output_len, 1),
                                                                   "temperature": 0, "ignore_eos": True}})
        for _ in range(WARMUP_ALONE):
            warm = transport.run(client_prefix(state) + loader_argv(*env_files) +
                                 [plan.argv[0], "-c", WARM_ALONE, f"http://127.0.0.1:{state.port}/generate", body,
                                  str(load.timeout_s)], timeout=load.timeout_s + 30, cwd=cwd)
            if not warm.ok:
                return ResultRecord.failed_point(f"the warm-up request alone failed: {warm.tail(8)}", requests=n,
                                                 runner=self.name)
        result = transport.run(client_prefix(state) + loader_argv(*env_files) + argv, timeout=load.timeout_s, cwd=cwd)
        if not result.ok:
            return ResultRecord.failed_point(f"bench_serving exited {result.rc}: {result.tail(8)}", requests=n,
                                             runner=self.name)
        record = parse_bench_serving_output(transport.get(out_file).decode(errors="replace"), num_prompts=n)
        record["runner"] = self.name
        return rate_verdict(ResultRecord.from_dict(to_model_time(record, server.time_scale)), load)

    def client_cores(self, transport: Transport) -> int | None:
        return _host_cores(transport)  # bench_serving runs on the host


class BuiltinRunner:
    """specops' own client: beside the server (as bench_serving runs) where the host can
    import specops with its `python`, else here through a tunnel to the server's port
    (said once in the journal: the tunnel's latency is then in TTFT/ITL)."""

    name = "builtin"

    def __init__(self, python: str, log: Log) -> None:
        self.python, self.log = python, log
        self._lock = threading.Lock()
        self._on_host: bool | None = None
        self._uploaded: set[str] = set()

    def on_host(self, transport: Transport) -> bool:
        """Whether the host can run the client itself (specops importable there); probed once."""
        with self._lock:
            if self._on_host is None:
                probe = transport.run([self.python, "-c", CLIENT_FOUND], timeout=60)
                self._on_host = probe.ok
                if not probe.ok:
                    self.log("client", {"where": "here, through the SSH connection",
                                        "why": "specops is not importable on the host: latency of the tunnel "
                                               "is included in TTFT/ITL"})
            return self._on_host

    def _trace_on_host(self, transport: Transport, state: ServerState, load: Load) -> str:
        """The trace's path on the host, uploaded once per host and digest (the client beside
        the server reads it there)."""
        assert load.trace and load.trace_sha256
        path = posixpath.join(paths.bench_dir(transport.expand(state.workdir)), f"trace-{load.trace_sha256[:16]}.jsonl")
        with self._lock:
            if path not in self._uploaded:
                data = Path(load.trace).read_bytes()
                if transport.stat_size(path) != len(data):
                    transport.put(data, path)
                self._uploaded.add(path)
        return path

    def measure(self, transport: Transport, server: ArmServer, load: Load) -> ResultRecord:
        state, n = server.state, load.num_prompts
        if self.on_host(transport):
            traffic = ["--trace", self._trace_on_host(transport, state, load)] if load.trace else load_args(load)
            argv = [self.python, "-m", "specops.bench", "--url", f"http://127.0.0.1:{state.port}",
                    *traffic, "--num-prompts", str(n),
                    "--input-len", str(load.input_len), "--output-len", str(load.output_len),
                    "--seed", str(load.seed), "--dataset", load.dataset, "--timeout", str(load.timeout_s),
                    "--api", engine_of(state.argv, state.engine).client_api]
            result = transport.run(client_prefix(state) + argv, timeout=load.timeout_s + 60)
            line = result.stdout.strip().splitlines()[-1:]
            # a client that wrote its record and was then ended with the server's Slurm job: keep
            # the record (unless the end cut it short)
            try:
                record = json.loads(line[0]) if line and (result.ok or line[0].startswith('{"')) else None
            except ValueError:
                record = None
            if not isinstance(record, dict):
                return ResultRecord.failed_point(f"builtin client exited {result.rc}: {clip(result.tail(6), 2000)}",
                                                 requests=n, runner=self.name)
            return ResultRecord.from_dict(record)
        if state.slurm:
            return ResultRecord.failed_point(
                f"specops is not importable with {self.python} on the login node, so the client "
                f"cannot run beside the server on its compute node; install specops there", requests=n,
                runner=self.name)
        # The client is imported where a point is measured: it brings aiohttp and asyncio
        # (0.1-0.4 s), which `deploy` (the sweep through the bench step) never uses.
        from specops.bench.client import measure_point

        with reach(transport, state.port) as base_url:
            return measure_point(base_url, concurrency=load.concurrency, rate=load.rate, arrival=load.arrival,
                                 trace=load.trace, phases=load.phases, num_prompts=n, input_len=load.input_len,
                                 output_len=load.output_len, seed=load.seed, dataset=load.dataset,
                                 timeout_s=load.timeout_s, api=engine_of(state.argv, state.engine).client_api)

    def client_cores(self, transport: Transport) -> int | None:
        if not self.on_host(transport):
            return os.cpu_count()  # the clients run here, through the tunnel
        return _host_cores(transport)


def runner_for(choice: str, *, engine: str, python: str, tree: str, log: Log) -> Runner:
    """The one runner a host's sweep uses (runner_name's rule)."""
    if runner_name(choice, engine) == "builtin":
        return BuiltinRunner(python, log)
    return SglangRunner(tree)


# ----- what every point shares, whatever measures it -------------------------------------


def sampled(transport: Transport, state: ServerState, measure: Callable[[], ResultRecord]) -> ResultRecord:
    """`measure()` with the server's running batch sampled meanwhile (bench/running.py), by the
    names of the engine that started it: from `/metrics` where it serves them, else its log;
    a phase run's record gains its switches and lags from the same log window (bench/switching.py)."""
    logs = "dynamic-spec-disable" in (state.mechanism or "")  # the patch (adaptive, spec-off) logs its transitions
    engine = engine_of(state.argv, state.engine)
    if not engine.serves_metrics(state.argv or []):
        sampler = RunningSampler(transport, state.log_path, logs_transitions=logs, metrics=engine.metrics)
        sampler.start()
        raw = measure()
        return _switching(replace(raw, **sampler.stop()), sampler, state)
    with reach(transport, state.port) as base_url:
        sampler = RunningSampler(transport, state.log_path, base_url, logs_transitions=logs, metrics=engine.metrics)
        sampler.start()
        raw = measure()
        return _switching(replace(raw, **sampler.stop()), sampler, state)


def _switching(record: ResultRecord, sampler: RunningSampler, state: ServerState) -> ResultRecord:
    """A phase run's record with its server's switches placed in its phases (others as they are)."""
    if not isinstance(record.extra.get("phases"), list):
        return record
    found = switching_extra(sampler.lines, record.extra, state.effective_threshold, sampler.metrics)
    return replace(record, extra={**record.extra, **found})


def server_dead(transport: Transport, state: ServerState) -> bool:
    """The arm's server is dead (its state file says so; `baseline#2` on a Slurm host's
    second allocation is its own arm)."""
    status = arm_status(transport, state)
    return status is not None and status.state == "dead"


def crash_excerpt(transport: Transport, state: ServerState) -> str:
    """What a crashed server's log says: its last crash block, else its last 20 lines."""
    lines = tail_lines(transport, state.log_path, 400)
    blocks = crash_blocks("\n".join(lines))
    return blocks[-1] if blocks else "\n".join(lines[-20:])
