"""The normalized result record: one benchmark point, whichever runner produced it.

Both runners (SGLang's `bench_serving` and the builtin client) map their output onto
this one shape so the store, the report and the plots never care where a number came
from. `results.csv` carries `CSV_COLUMNS` in this order (and `RATE_COLUMNS` after them in a
run with rate points); `results.jsonl` carries every
field (percentiles, client lag, the raw runner output, provenance).

Timing values are milliseconds (`*_ms`), throughputs per second. A value the runner did
not report, or reported as NaN/Infinity, is None: never NaN, so the JSON stays strict.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Literal, Mapping, TypeVar

CSV_COLUMNS: tuple[str, ...] = (
    "host", "arm", "mechanism", "concurrency", "repeat", "completed", "failed",
    "duration_s", "output_throughput", "request_throughput",
    "mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "p99_tpot_ms",
    "mean_itl_ms", "p99_itl_ms", "mean_e2e_ms", "p99_e2e_ms",
    "accept_length", "simulated", "status", "input_len", "output_len", "run_id",
    "running_req_p50", "running_req_p90", "server_accept_length", "drafting_off_share",
)
#: the columns results.csv adds where the run has rate points: the offered rate and the verdict
RATE_COLUMNS: tuple[str, ...] = ("rate", "saturated")

#: the fields only a rate point (open loop) has
RATE_FIELDS: tuple[str, ...] = ("rate", "arrival", "offered_rate", "saturated")

#: Whether a point counts: failed points are kept (with the error) but never averaged.
PointStatus = Literal["ok", "failed"]
STATUS_OK: PointStatus = "ok"
STATUS_FAILED: PointStatus = "failed"

# The latency families every runner reports (as far as it can) and the statistics kept.
LATENCY_METRICS: tuple[str, ...] = ("ttft", "tpot", "itl", "e2e")
LATENCY_STATS: tuple[str, ...] = ("mean", "p50", "p90", "p99")
# [TTFT, TPOT, E2E] ms per completed request in `extra` (what an SLO is checked against,
# decide/slo.py), and why a record has none where its runner said so
LATENCIES_KEY = "request_latencies_ms"
MISSING_KEY = "request_latencies_missing"


@dataclass
class ResultRecord:
    """One point of the matrix: (host, arm, load level, repeat) and what it measured. The load
    level is `concurrency` (a closed loop) or, on a rate point, `rate` (requests/s offered in an
    open loop; concurrency is then 0): `load_level` reads either."""

    host: str = ""
    arm: str = ""
    mechanism: str = ""
    concurrency: int = 0
    rate: float | None = None
    # a rate point's arrivals (bench/arrivals.py), the rate they offered and whether the
    # server kept up (bench/saturation.py)
    arrival: str | None = None
    offered_rate: float | None = None
    saturated: bool | None = None
    repeat: int = 0
    completed: int = 0
    failed: int = 0
    duration_s: float | None = None
    output_throughput: float | None = None
    request_throughput: float | None = None
    mean_ttft_ms: float | None = None
    p99_ttft_ms: float | None = None
    mean_tpot_ms: float | None = None
    p99_tpot_ms: float | None = None
    mean_itl_ms: float | None = None
    p99_itl_ms: float | None = None
    mean_e2e_ms: float | None = None
    p99_e2e_ms: float | None = None
    accept_length: float | None = None
    simulated: bool = False
    # the server's running batch during the point (bench/running.py), and its own accept length
    running_req_p50: float | None = None
    running_req_p90: float | None = None
    server_accept_length: float | None = None
    running_samples: int | None = None
    running_source: str | None = None   # "metrics" | "log"
    # an arm whose server logs drafting transitions (bench/running.py): None elsewhere
    drafting_off: bool | None = None
    drafting_off_share: float | None = None  # of the point's decode steps (Decode batch lines)
    drafting_transitions: int | None = None
    # --- kept in results.jsonl only ---
    status: PointStatus = STATUS_OK
    error: str | None = None          # failure text, with the server log excerpt if any
    runner: str = ""                  # "builtin" | "sglang"
    p50_ttft_ms: float | None = None
    p90_ttft_ms: float | None = None
    p50_tpot_ms: float | None = None
    p90_tpot_ms: float | None = None
    p50_itl_ms: float | None = None
    p90_itl_ms: float | None = None
    p50_e2e_ms: float | None = None
    p90_e2e_ms: float | None = None
    total_input_tokens: int | None = None
    total_output_tokens: int | None = None
    num_prompts: int | None = None
    input_len: int | None = None
    output_len: int | None = None
    itl_spread: bool | None = None    # a chunk carried several tokens; its gap was spread
    client_lag_mean_ms: float | None = None
    client_lag_p99_ms: float | None = None
    client_lag_max_ms: float | None = None
    sim_time_scale: float | None = None
    started_at: str | None = None     # ISO-8601 UTC, when the measured run began
    engine: str | None = None         # the host's engine (its registry name: sglang, vllm, sim, ...)
    engine_version: str | None = None  # that engine's release as the server says (older records: sglang_version)
    sglang_commit: str | None = None
    run_id: str | None = None         # the run directory's name (filled in by the store when absent)
    # the server instance measured: pid, proc_start, args_hash, config_hash, started_at, launched_by
    # (servers.lease); the report refuses to combine an arm's points of different config hashes
    server: dict[str, Any] | None = None
    shared_with: list[str] | None = None  # other runs whose clients loaded the same server meanwhile
    raw: Any = None                   # the runner's own output (bench_serving's JSON line)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def failed_point(cls, error: str, *, requests: int = 0, runner: str = "", **fields_: Any) -> "ResultRecord":
        """The one shape of a point that measured nothing: `error` says why, `requests`
        (the point's prompts) all count as failed; `fields_` name the point and add context
        (host, arm, concurrency, repeat, lengths, server, ...). Unknown names go to `extra`."""
        return cls.from_dict({**fields_, "status": STATUS_FAILED, "completed": 0, "failed": requests,
                              "runner": runner, "error": error})

    @property
    def ok(self) -> bool:
        """Whether the point counts (failed points are kept but never averaged)."""
        return self.status == STATUS_OK

    def to_dict(self) -> dict[str, Any]:
        """Plain dict for results.jsonl; non-finite floats become None. A closed-loop point
        leaves out the rate fields (it has none), so its line reads as before rates existed."""
        return {k: clean_number(v) for k, v in asdict(self).items() if not (k in RATE_FIELDS and v is None)}

    def csv_row(self, columns: tuple[str, ...] = CSV_COLUMNS) -> list[str]:
        """The CSV cells, in `columns` order (CSV_COLUMNS; empty cell for None)."""
        return [format_cell(getattr(self, name)) for name in columns]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ResultRecord":
        """Build from a stored dict; unknown keys go to `extra` so nothing is lost. A key an
        older record used (`RENAMED`) reads as its new name, unless the record has both."""
        data = current_names(data)
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        unknown = {k: v for k, v in data.items() if k not in known}
        if unknown or "extra" in kwargs:
            kwargs["extra"] = {**dict(kwargs.get("extra") or {}), **unknown}
        return cls(**kwargs)


#: keys older records wrote -> the field that holds them now (the release was `sglang_version`
#: whatever the engine, vLLM's included, before records named the engine)
RENAMED = {"sglang_version": "engine_version"}


def current_names(data: Mapping[str, Any]) -> dict[str, Any]:
    """A stored record's keys under their current names (`RENAMED`), a key kept as it is where
    the record also holds its new name: the one reading path of older results and state files."""
    return {(RENAMED[k] if k in RENAMED and RENAMED[k] not in data else k): v for k, v in data.items()}

_T = TypeVar("_T")


def clean_number(value: _T) -> _T | None:
    """NaN and +-Infinity become None; everything else passes through."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def format_cell(value: Any) -> str:
    """CSV text for one value: stable float formatting so the file diffs cleanly."""
    value = clean_number(value)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e-3 and value != 0 else f"{value:.4f}".rstrip("0").rstrip(".")
    return str(value)


#: `extra` key of a record from a sweep of several context lengths: its length is part of its point
CONTEXT_AXIS = "context_axis"


#: the load axes a run sweeps: closed-loop concurrency or open-loop request rate
AXIS_CONCURRENCY = "concurrency"
AXIS_RATE = "rate"


def load_level(record: ResultRecord) -> float:
    """The point's load level on its axis: its rate (requests/s) on a rate point, else its
    concurrency. The report, repeats and thresholds group by this one notion."""
    return float(record.rate) if record.rate is not None else int(record.concurrency)


def load_axis(record: ResultRecord) -> str:
    return AXIS_RATE if record.rate is not None else AXIS_CONCURRENCY


def level_text(record: ResultRecord) -> str:
    """`c=4` or `rate=4/s`: a point's level in labels and messages."""
    return level_label(load_level(record), load_axis(record))


def level_label(value: float | None, axis: str = AXIS_CONCURRENCY, sep: str = "=") -> str:
    """A level on its axis: `c=4`, `rate=2.5/s` (`sep` "≈" for an interpolated one)."""
    if value is None:
        return "-"
    shown = f"{value:.1f}" if sep != "=" else f"{value:g}"
    return f"rate{sep}{shown}/s" if axis == AXIS_RATE else f"c{sep}{shown}"


def point_key(record: ResultRecord) -> tuple[Any, ...]:
    """The identity of a point in a run: (host, arm, concurrency, repeat), a rate point's
    ("rate", rate) after it, and its (input_len, output_len) where the sweep had several
    lengths (CONTEXT_AXIS)."""
    key: tuple[Any, ...] = (record.host, record.arm, record.concurrency, record.repeat)
    if record.rate is not None:
        key += (AXIS_RATE, float(record.rate))
    if record.extra.get(CONTEXT_AXIS):
        key += (record.input_len, record.output_len)
    return key
