"""A phase run on the simulator (bench --phases): the timeline's per-phase figures are
functions of the workload alone (the same at two time scales), and the simulator's log lines
carry the model clock the switching lag is read on, the last step's line in the log by the
time the client has its last token."""

from __future__ import annotations

from typing import Any

from specops.bench.client import measure_point
from specops.bench.switching import MODEL_STAMP_RE, switching_extra
from specops.sglang.source import ensure_tree
from specops.sim.testing import run_sim

MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct", "--max-running-requests", "64",
         "--decode-log-interval", "1"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/EAGLE3-draft",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
PHASES = "2/s:3s,24/s:2s,2/s:3s"


def _run(scale: str) -> tuple[dict[str, Any], str]:
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + EAGLE + ["--sim-time-scale", scale]) as sim:
        rec = measure_point(sim.url, phases=PHASES, arrival="poisson", input_len=32, output_len=32, seed=3)
        return rec.extra, sim.log_text()


def test_phase_figures_are_the_workloads_and_the_log_carries_the_model_clock() -> None:
    fast, log = _run("0.005")
    slow, _ = _run("0.02")
    rows = fast["phases"]
    assert [r["label"] for r in rows] == ["2/s:3s", "24/s:2s", "2/s:3s"]
    assert all(r["failed"] == 0 and r["completed"] == r["requests"] > 0 for r in rows)
    assert rows[1]["requests"] > 5 * rows[0]["requests"] / 3       # the burst phase carries its rate
    assert rows[1]["p50_tpot_ms"] > rows[0]["p50_tpot_ms"]         # a bigger batch decodes slower per token
    # the model clock's figures: identical (not close) at another time scale
    assert slow["phases"] == rows and slow["phase_series"] == fast["phase_series"]
    assert fast["phase_clock"]["kind"] == "model" and slow["phase_clock"] == fast["phase_clock"]
    # the step that streamed the last token is in the log, stamped with that token's model time
    origin = fast["phase_clock"]["origin"]
    bins = len(fast["phase_series"]["tokens"])
    # the last bin starts at the last token; bin_s is rounded to 6 places, so that start is
    # known to within half a microsecond a bin
    last_token = origin + (bins - 1) * fast["phase_series"]["bin_s"] - bins * 5e-7
    stamps = [float(m["t"]) for line in log.splitlines() if "Decode batch" in line
              for m in [MODEL_STAMP_RE.search(line)] if m]
    assert stamps and stamps == sorted(stamps) and max(stamps) >= last_token
    # an EAGLE-3 arm never switches; its running batch over time comes from the same lines
    found = switching_extra("\n".join(log.splitlines()), fast, threshold=4)
    assert found["switching"]["switches"] == [] and [r["switches"] for r in found["phases"]] == [0, 0, 0]
    running = [v for v in found["phase_series"]["running"] if v is not None]
    assert running and max(running) > 4 >= min(running)
