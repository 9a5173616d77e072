"""The SGLang simulator, run for real: real SGLang trees (from the wheels), real subprocesses,
real HTTP. What a user of specops would notice: which flags a tree accepts, how a broken
tree dies, when the server says it is ready, what it streams, how it crashes, and whether
its throughput tells the story the project is about (EAGLE-3 wins at low concurrency,
loses at high)."""

from __future__ import annotations

import asyncio
import io
import json
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from specops.bench.client import measure_point
from specops.records.schema import ResultRecord
from specops.sglang.flags import tree_flags
from specops.sglang.serving import READY_LINE
from specops.sglang.source import ensure_tree
from specops.sim import model as M
from specops.sim.closedloop import loop_header
from specops.sim.server import arm_model
from specops.sim.testing import SimStartError, drive, health_status, run_sim, start_sim, stop_sim, wait_ready
from tests.support.waiting import wait_until

FAST = ["--sim-time-scale", "0.05"]
#: For throughput assertions: at 0.05 the simulator and the client share 2 cores and become
#: CPU-bound at c=32, so what is measured is the machine, not the model.
STEADY = ["--sim-time-scale", "0.25", "--sim-noise", "0"]
EAGLE = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "lmsys/EAGLE3-draft",
         "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
MODEL = ["--model-path", "meta-llama/Llama-3.1-8B-Instruct"]


def run_cli(tree: Path, args: list[str], timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "specops.sim", "--sglang-tree", str(tree), *args],
                          capture_output=True, text=True, timeout=timeout)


def add_threshold_flag(tree: Path) -> None:
    """Hand-patch a classic tree the way the dynamic-spec-disable patch set would (field + flag)."""
    path = tree / "python/sglang/srt/server_args.py"
    lines = path.read_text().splitlines(keepends=True)
    field_at = next(i for i, ln in enumerate(lines) if ln.strip().startswith("speculative_accept_threshold_acc:"))
    lines.insert(field_at + 1, "    speculative_disable_batch_threshold: int = 0\n")
    call_at = next(i for i, ln in enumerate(lines) if '"--speculative-accept-threshold-acc"' in ln)
    end = next(i for i in range(call_at, len(lines)) if lines[i].strip() == ")")
    lines.insert(end + 1, '        parser.add_argument(\n            "--speculative-disable-batch-threshold",\n'
                          "            type=int,\n            default=ServerArgs.speculative_disable_batch_threshold,\n"
                          '            help="Disable speculation above this running batch size (0 = always speculate).",\n'
                          "        )\n")
    path.write_text("".join(lines))


def post_stream(url: str, payload: dict, timeout: float = 30) -> list[dict | str]:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    events: list[dict | str] = []
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data: "):
                body = line[len("data: "):]
                events.append(body if body == "[DONE]" else json.loads(body))
    return events


def post_json(url: str, payload: dict, timeout: float = 30) -> dict:
    req = urllib.request.Request(url, data=json.dumps(payload).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read())


# ------------------------------------------------------------------ flags read from the tree


def test_flags_follow_each_versions_source():
    old = tree_flags(ensure_tree("0.4.10.post2"))
    classic = tree_flags(ensure_tree("0.5.10.post1"))
    native = tree_flags(ensure_tree("0.5.14"))
    assert old.layout == classic.layout == "classic" and native.layout == "annotated"
    assert classic.version == "0.5.10.post1" and native.version == "0.5.14"
    for flags in (old, classic, native):
        for name in ("--model-path", "--host", "--port", "--tp-size", "--mem-fraction-static", "--speculative-algorithm",
                     "--speculative-draft-model-path", "--speculative-num-steps", "--speculative-eagle-topk",
                     "--speculative-num-draft-tokens", "--max-running-requests", "--cuda-graph-max-bs"):
            assert flags.has_flag(name), (flags.version, name)
        assert not flags.has_flag("--speculative-disable-batch-threshold")
    assert not classic.has_flag("--speculative-adaptive")
    assert native.has_flag("--speculative-adaptive") and native.has_flag("--speculative-adaptive-config")
    assert native.has_flag("--cuda-graph-max-bs-decode") and not classic.has_flag("--cuda-graph-max-bs-decode")
    # 0.5.14's --cuda-graph-max-bs is an alias that lands on the decode field, as in SGLang
    args = native.parse(MODEL + ["--cuda-graph-max-bs", "32", "--speculative-adaptive"])
    assert args["cuda_graph_max_bs_decode"] == 32 and args["speculative_adaptive"] is True
    assert args["model_path"] == MODEL[1] and args["tp_size"] == 1  # default read from the field


def test_fields_layout_derives_flags_from_struct_fields(tmp_path):
    """0.5.20+: flags come from annotated fields of `_NS_PATH` structs; --cuda-graph-max-bs is gone."""
    srt = tmp_path / "python/sglang/srt"
    (srt / "arg_groups/fields").mkdir(parents=True)
    (srt / "server_args.py").write_text(
        "import dataclasses\nfrom sglang.srt.arg_groups.arg_utils import add_cli_args_from_dataclass\n\n"
        "@dataclasses.dataclass\nclass ServerArgs:\n    @staticmethod\n    def add_cli_args(parser):\n"
        "        add_cli_args_from_dataclass(parser, ServerArgs)\n")
    (srt / "arg_groups/fields/spec.py").write_text(
        "import msgspec\nfrom typing import Optional, Literal\nfrom sglang.srt.arg_groups.arg_utils import A, Arg\n\n"
        "class Spec(msgspec.Struct):\n    _NS_PATH = 'spec'\n"
        "    speculative_algorithm: A[Optional[str], 'Speculative algorithm.'] = None\n"
        "    speculative_draft_model_path: A[Optional[str], Arg(help='draft', aliases=['--speculative-draft-model'])] = None\n"
        "    speculative_adaptive: A[bool, 'adaptive'] = False\n"
        "    speculative_ngram_match_type: A[Literal['BFS', 'PROB'], 'match'] = 'BFS'\n"
        "    _explicit: A[Optional[bool], Arg(no_cli=True)] = None\n")
    (srt / "arg_groups/fields/model.py").write_text(
        "import msgspec\nfrom typing import Optional\nfrom sglang.srt.arg_groups.arg_utils import A, Arg\n\n"
        "class Model(msgspec.Struct):\n    _NS_PATH = 'model'\n"
        "    model_path: A[str, Arg(help='weights', aliases=['--model'])]\n"
        "    port: A[int, 'port'] = 30000\n"
        "    cuda_graph_max_bs_decode: A[Optional[int], 'decode graph max bs'] = None\n"
        "    cuda_graph_max_bs_prefill: A[Optional[int], 'prefill graph max bs'] = None\n")
    flags = tree_flags(tmp_path)
    assert flags.layout == "arg_groups"
    args = flags.parse(["--model", "m", "--speculative-draft-model", "d", "--speculative-adaptive",
                        "--cuda-graph-max-bs-decode", "16", "--speculative-ngram-match-type", "PROB"])
    assert (args["model_path"], args["speculative_draft_model_path"], args["cuda_graph_max_bs_decode"]) == ("m", "d", 16)
    assert args["port"] == 30000 and args["speculative_adaptive"] is True
    assert not flags.has_flag("--cuda-graph-max-bs") and not flags.has_flag("--explicit")
    # argparse prefix matching, as in SGLang: the old name is now ambiguous, so it is refused
    proc = run_cli(tmp_path, ["--model", "m", "--cuda-graph-max-bs", "16"])
    assert proc.returncode == 2 and "ambiguous option: --cuda-graph-max-bs could match" in proc.stderr


def test_unpatched_tree_rejects_threshold_flag_like_sglang():
    proc = run_cli(ensure_tree("0.5.10.post1"), MODEL + EAGLE + ["--speculative-disable-batch-threshold", "8"])
    assert proc.returncode == 2
    assert "sglang serve: error: unrecognized arguments: --speculative-disable-batch-threshold 8" in proc.stderr
    assert proc.stderr.startswith("usage: sglang serve")
    assert READY_LINE not in proc.stdout


def test_missing_required_model_path_exits_2():
    proc = run_cli(ensure_tree("0.4.10.post2"), ["--port", "1"])
    assert proc.returncode == 2 and "the following arguments are required: --model-path" in proc.stderr


def test_tree_broken_by_a_bad_insertion_dies_with_the_syntax_error(sglang_tree):
    tree = sglang_tree("0.5.10.post1")
    path = tree / "python/sglang/srt/server_args.py"
    lines = path.read_text().splitlines(keepends=True)
    at = next(i for i, ln in enumerate(lines) if '"--speculative-accept-threshold-acc",' in ln)
    lines.insert(at + 1, '        parser.add_argument("--speculative-disable-batch-threshold", type=int, default=0)\n')
    path.write_text("".join(lines))
    proc = run_cli(tree, MODEL + ["--speculative-disable-batch-threshold", "8"])
    assert proc.returncode == 1
    err = proc.stderr
    assert err.startswith("Traceback (most recent call last):")
    assert f'File "{path.resolve()}", line {at + 2}' in err
    assert "SyntaxError: invalid syntax. Perhaps you forgot a comma?" in err
    assert re.search(r"\n\s+\^+\n", err), err  # the caret line, as Python prints it


def test_hand_patched_tree_accepts_the_flag_and_runs_adaptive(sglang_tree):
    tree = sglang_tree("0.5.10.post1")
    add_threshold_flag(tree)
    with run_sim(tree, MODEL + EAGLE + FAST + ["--speculative-disable-batch-threshold", "4",
                                                "--max-running-requests", "64"]) as sim:
        info = sim.server_info()
        low = asyncio.run(drive(sim.url, 2, 4, max_new_tokens=64))["output_throughput"]
        high = asyncio.run(drive(sim.url, 32, 64, max_new_tokens=64))["output_throughput"]
        steps = sim.server_info()["sim_stats"]["steps_by_batch"]
    # The simulator's own accounting, independent of machine speed: it drafted at every batch
    # of at most 4 requests and at none above.
    assert any(int(b) <= 4 and s["speculative"] > 0 for b, s in steps.items())
    assert all(s["speculative"] == 0 for b, s in steps.items() if int(b) > 4)
    assert all(s["plain"] == 0 for b, s in steps.items() if int(b) <= 4)
    assert steps["32"]["plain"] > 0
    # Throughputs are on the model clock (chunk stamps), so only the batch mix differs from the
    # steady-state prediction (prefill steps, the ramp and tail of each point): 15% covers it.
    assert low > 1.4 * M.predicted_output_throughput("baseline", 2)
    assert high == pytest.approx(0.97 * M.predicted_output_throughput("baseline", 32), rel=0.15)
    assert high > 1.5 * M.predicted_output_throughput("eagle3", 32)
    assert info["speculative_disable_batch_threshold"] == 4
    assert (info["sim_arm"], info["sim_mechanism"]) == ("adaptive", "disable-batch-threshold")
    assert info["max_running_requests"] == 64 and info["simulated"] is True


#: ResultRecord fields a loaded machine may change: the client's own lag and the wall clock
WALL_FIELDS = {"client_lag_mean_ms", "client_lag_p99_ms", "client_lag_max_ms", "started_at"}
WALL_EXTRA = {"loop_lag_p99_ms", "loop_lag_max_ms", "duration_wall_s"}


def _model_clock_view(record: ResultRecord) -> dict[str, object]:
    data = {k: v for k, v in record.to_dict().items() if k not in WALL_FIELDS}
    data["extra"] = {k: v for k, v in record.extra.items() if k not in WALL_EXTRA}
    return data


def _measure(tree: Path) -> tuple[dict[str, object], dict[str, float | None], dict[str, object]]:
    """One fresh simulator, one bench point through the builtin client and one `drive` loop."""
    with run_sim(tree, MODEL + EAGLE + ["--sim-time-scale", "0.01", "--max-running-requests", "64"]) as sim:
        record = measure_point(sim.url, concurrency=8, num_prompts=24, input_len=32, output_len=48)
        driven = asyncio.run(drive(sim.url, 6, 15, max_new_tokens=40))
        stats = sim.server_info()["sim_stats"]
    driven.pop("wall_s")
    return _model_clock_view(record), driven, stats


def test_model_clock_figures_do_not_depend_on_the_machines_speed(sglang_tree):
    """The same closed-loop load on two fresh simulators, the second beside two CPU hogs on
    this 2-core machine: every figure read on the model clock is identical (not close), since
    the client declares its loop and the simulator runs no step while a refill is on its way.
    (Measured on main before the declaration: 339.61 against 351.96 tok/s under load.)"""
    tree = ensure_tree("0.5.10.post1")
    calm = _measure(tree)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        loaded = _measure(tree)
    finally:
        for h in hogs:
            h.kill()
            h.wait()
    assert calm[0]["completed"] == 24 and calm[0]["extra"]["clock"] == "sim-model"  # type: ignore[index]
    assert calm[1]["output_tokens"] == 15 * 40
    assert calm[2]["loop_timeouts"] == 0
    assert loaded == calm


async def _late_refills(url: str, delay_s: float) -> None:
    """A closed loop (3 slots, 9 requests) whose client sends each refill `delay_s` wall
    seconds after its slot came free, as a starved client on a loaded machine would."""
    import aiohttp

    headers = loop_header(f"late-{delay_s}", 3, 9)
    left = list(range(9))
    async with aiohttp.ClientSession() as session:
        async def slot() -> None:
            first = True
            while left:
                i = left.pop()
                if not first:
                    await asyncio.sleep(delay_s)
                first = False
                body = {"text": f"prompt {i} " + "w " * 20, "sampling_params": {"max_new_tokens": 12 + 5 * i}}
                async with session.post(url + "/generate", json=body, headers=headers) as resp:
                    assert resp.status == 200
                    await resp.read()

        await asyncio.gather(*(slot() for _ in range(3)))


def test_a_late_refill_joins_the_step_it_would_join_on_a_fast_machine(sglang_tree):
    """The scheduler's accounting (steps per running batch, model time) is the same whether a
    closed-loop client refills at once or 300 ms late; without the declaration a refill that
    misses the 20 ms grace would make the next steps run one request short."""
    tree = ensure_tree("0.5.4")
    runs = []
    for delay in (0.0, 0.3):
        with run_sim(tree, MODEL + EAGLE + FAST) as sim:
            asyncio.run(_late_refills(sim.url, delay))
            runs.append(sim.server_info()["sim_stats"])
    assert runs[0]["completed"] == 10  # the 9 and the server's own warm-up request
    assert runs[0] == runs[1]


def test_a_loop_whose_client_stops_sending_is_dropped_and_counted():
    """A declared loop that never sends its other requests holds the scheduler only until
    LOOP_REFILL_TIMEOUT_S, then is dropped and counted in sim_stats.loop_timeouts."""
    from specops.sim import scheduler as S
    from specops.sim.logs import SimLog

    async def scenario() -> dict[str, object]:
        S.LOOP_REFILL_TIMEOUT_S, saved = 0.2, S.LOOP_REFILL_TIMEOUT_S
        try:
            sched = S.Scheduler(S.EngineConfig(arm=M.ArmModel("baseline"), max_running=8, time_scale=0.0),
                                SimLog(io.StringIO()))
            task = asyncio.ensure_future(sched.run())
            req = sched.new_request(8, 4, content="only one")
            sched.submit(req, ("dead", 4, 8))
            while not req.finished:
                await asyncio.sleep(0.01)
            task.cancel()
            return sched.stats()
        finally:
            S.LOOP_REFILL_TIMEOUT_S = saved

    stats = asyncio.run(scenario())
    assert stats["loop_timeouts"] == 1 and stats["completed"] == 1


def test_a_malformed_loop_header_is_a_400_naming_the_header():
    with run_sim(ensure_tree("0.5.4"), MODEL + FAST) as sim:
        req = urllib.request.Request(sim.url + "/generate", data=json.dumps({"text": "hi"}).encode(),
                                     headers={"Content-Type": "application/json", "X-Sim-Closed-Loop": "id=x"})
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=30)
    assert err.value.code == 400
    assert "X-Sim-Closed-Loop must be 'id=ID;concurrency=C;requests=N'" in err.value.read().decode()


# ------------------------------------------------------------------ lifecycle


def test_health_is_503_while_loading_then_200_with_one_ready_line(sglang_tree, tmp_path):
    log = tmp_path / "server.log"
    sim = start_sim(ensure_tree("0.5.4"), MODEL + FAST + ["--sim-slow-start", "2"], log_path=log)
    try:
        seen = set()

        def loading_or_ready() -> bool:  # from the first answer on: nothing answers while it starts
            seen.add(health_status(sim.url))
            return bool(seen & {503, 200})

        wait_until(loading_or_ready, "/health answering")
        assert 503 in seen and READY_LINE not in log.read_text()
        wait_ready(sim, timeout=20)
        assert health_status(sim.url) == 200
        with pytest.raises(urllib.error.HTTPError) as missing:  # 0.5.4 has no /ready; 0.5.20+ does
            urllib.request.urlopen(sim.url + "/ready", timeout=5)
        assert missing.value.code == 404
        text = log.read_text()
        assert text.count(READY_LINE) == 1
        assert re.search(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] server_args=ServerArgs\(model_path='meta-llama", text, re.M)
        assert re.search(r"^\[[^\]]+\] The server is fired up and ready to roll!$", text, re.M)
    finally:
        stop_sim(sim)
    assert sim.process.poll() is not None


def test_fail_at_start_logs_a_traceback_and_never_gets_healthy():
    with pytest.raises(SimStartError) as err:
        with run_sim(ensure_tree("0.5.4"), MODEL + FAST + ["--sim-fail-at-start"], ready_timeout=20):
            pass
    assert err.value.returncode == 1
    assert "Scheduler hit an exception: Traceback (most recent call last):" in err.value.log
    assert "RuntimeError: Not enough memory" in err.value.log and READY_LINE not in err.value.log


def test_port_already_in_use_is_reported():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = run_cli(ensure_tree("0.5.4"), MODEL + FAST + ["--port", str(port)])
    assert proc.returncode == 1 and "address already in use" in proc.stdout


# ------------------------------------------------------------------ endpoints


def test_endpoints_stream_tokens_and_usage():
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + FAST) as sim:
        models = sim.get_json("/v1/models")
        assert models["data"][0]["id"] == MODEL[1]

        events = post_stream(sim.url + "/generate", {"text": "one two three four", "stream": True,
                                                    "sampling_params": {"max_new_tokens": 12, "temperature": 0, "ignore_eos": True}})
        assert events[-1] == "[DONE]"
        chunks = events[:-1]
        assert len(chunks) >= 2 and chunks[-1]["meta_info"]["completion_tokens"] == 12
        assert chunks[-1]["meta_info"]["prompt_tokens"] == 4
        assert chunks[-1]["meta_info"]["finish_reason"]["type"] == "length"
        assert len(chunks[-1]["text"].split()) == 12  # SGLang's /generate streams the text so far

        whole = post_json(sim.url + "/generate", {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5}})
        assert whole["meta_info"]["completion_tokens"] == 5 and len(whole["text"].split()) == 5

        events = post_stream(sim.url + "/v1/completions", {"model": MODEL[1], "prompt": "hello there", "max_tokens": 9,
                                                           "stream": True, "stream_options": {"include_usage": True}})
        assert events[-1] == "[DONE]"
        usage = events[-2]
        assert usage["choices"] == [] and usage["usage"] == {"prompt_tokens": 2, "completion_tokens": 9,
                                                              "total_tokens": 11, "prompt_tokens_details": None}
        text = "".join(e["choices"][0]["text"] for e in events[:-2])
        assert len(text.split()) == 9 and events[-3]["choices"][0]["finish_reason"] == "length"

        plain = post_json(sim.url + "/v1/completions", {"prompt": "x", "max_tokens": 3})
        assert plain["usage"]["completion_tokens"] == 3

        assert urllib.request.urlopen(sim.url + "/flush_cache", timeout=5).status == 200
        info = sim.get_json("/get_server_info")
        assert info["sim_time_scale"] == 0.05 and info["version"] == "0.5.10.post1"
        assert info["sim_arm"] == "baseline" and "internal_states" in info


def test_a_batched_generate_runs_its_prompts_in_one_batch_and_answers_each_in_order():
    """SGLang's batched /generate, the form `specops verify` sends its at-once jobs in: every
    prompt is queued before a step runs (no loop header needed), each gets its own length and
    the ids it gets alone; a streamed batch or mismatched sampling_params is a 400."""
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + FAST) as sim:
        url = sim.url + "/generate"
        greedy = {"temperature": 0, "ignore_eos": True}
        alone = [post_json(url, {"text": t, "sampling_params": {**greedy, "max_new_tokens": n}})
                 for t, n in (("one two", 6), ("three", 3), ("four five six", 3))]
        before = sim.get_json("/get_server_info")["sim_stats"]["steps_by_batch"]
        batch = post_json(url, {"text": ["one two", "three", "four five six"],
                                "sampling_params": [{**greedy, "max_new_tokens": n} for n in (6, 3, 3)]})
        assert [r["meta_info"]["completion_tokens"] for r in batch] == [6, 3, 3]
        assert [r["output_ids"] for r in batch] == [r["output_ids"] for r in alone]
        after = sim.get_json("/get_server_info")["sim_stats"]["steps_by_batch"]
        assert "3" not in before and after["3"]["plain"] >= 1, after  # the three decoded together

        shared = post_json(url, {"input_ids": [[1, 2], [3]], "sampling_params": {"max_new_tokens": 2}})
        assert [r["meta_info"]["completion_tokens"] for r in shared] == [2, 2]
        for bad, why in (({"text": ["a", "b"], "stream": True}, "a streamed batch"),
                         ({"text": ["a", "b"], "sampling_params": [{}]}, "one for all or one per prompt (2)")):
            with pytest.raises(urllib.error.HTTPError) as err:
                post_json(url, bad)
            assert err.value.code == 400 and why in err.value.read().decode()


def test_speculative_stream_carries_several_tokens_per_step_and_logs_accept_len():
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + EAGLE + FAST + ["--sim-seed", "7"]) as sim:
        events = post_stream(sim.url + "/generate", {"text": "a b", "stream": True,
                                                    "sampling_params": {"max_new_tokens": 200, "ignore_eos": True}})
        metas = [e["meta_info"] for e in events[:-1]]
        steps = [b["completion_tokens"] - a["completion_tokens"] for a, b in zip(metas, metas[1:], strict=False)]
        assert max(steps) >= 2
        final = metas[-1]
        assert final["completion_tokens"] == 200 and 2.3 <= final["completion_tokens"] / final["spec_verify_ct"] <= 3.2
        info = sim.server_info()
        assert info["max_running_requests"] == 48  # SGLang's cap for speculative servers without the flag
        assert 2.3 <= info["internal_states"][0]["avg_spec_accept_length"] <= 3.2
        log = sim.log_text()
    assert "Max running requests is reset to 48 for speculative decoding" in log
    line = next(ln for ln in log.splitlines() if "Decode batch" in ln)
    assert re.match(r"^\[[\d\- :]+ TP0\] Decode batch, #running-req: 1, #token: \d+, token usage: [\d.]+, "
                    r"accept len: [\d.]+, accept rate: [\d.]+, cuda graph: True, gen throughput \(token/s\): [\d.]+, "
                    r"#queue-req: 0, \[model t=[\d.]+s\]$", line), line   # the simulator's model-clock stamp last


def test_a_measured_accept_length_sets_the_speculative_arms_tokens_per_step():
    """`--sim-accept-length 3` with 2 draft steps: a head whose drafts are always accepted (the
    real tier's tiny one): every step at batch 1 commits 3 tokens; the model's own calibration
    at 2 steps commits fewer."""
    two_steps = ["--speculative-num-steps", "2", "--speculative-num-draft-tokens", "3"]
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + EAGLE + FAST + two_steps + ["--sim-accept-length", "3"]) as sim:
        events = post_stream(sim.url + "/generate", {"text": "a b", "stream": True,
                                                    "sampling_params": {"max_new_tokens": 31, "ignore_eos": True}})
        info = sim.server_info()
    metas = [e["meta_info"] for e in events[:-1]]
    steps = [b["completion_tokens"] - a["completion_tokens"] for a, b in zip(metas, metas[1:], strict=False)]
    assert steps == [3] * 10, steps  # the first token from prefill, then 10 steps of 3
    assert metas[-1]["spec_verify_ct"] == 10
    assert info["internal_states"][0]["avg_spec_accept_length"] > 2.8  # with the warm-up request's short last step
    assert M.accept_length(1, 2) < 2.5 and M.accept_length(1, 2, at_batch_1=3.0) == 3.0
    assert M.accept_length(4, 2, at_batch_1=2.0) == pytest.approx(2.0 - 2 * M.EAGLE_ACCEPT_DECAY_PER_DOUBLING)
    assert M.accept_length(1024, 2, at_batch_1=2.0) == pytest.approx(2.0 * 2.4 / 3.0)  # the calibrated floor's share
    assert M.accept_length(1, 2, at_batch_1=9.0) == 3.0  # never more than steps + 1


def test_native_adaptive_config_on_0_5_14(sglang_tree, tmp_path):
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [3]}, "16": {"candidate_steps": [0]}}))
    with run_sim(ensure_tree("0.5.14"), MODEL + EAGLE + FAST + ["--speculative-adaptive", "--speculative-adaptive-config",
                                                               str(cfg), "--max-running-requests", "64"]) as sim:
        info = sim.server_info()
    assert (info["sim_arm"], info["sim_mechanism"]) == ("adaptive", "native-adaptive")


def test_crash_after_n_requests_dies_with_an_sglang_traceback():
    with run_sim(ensure_tree("0.5.10.post1"), MODEL + FAST + ["--sim-crash-after", "2"]) as sim:
        for _ in range(2):
            post_json(sim.url + "/generate", {"text": "x", "sampling_params": {"max_new_tokens": 4}})
        rc = sim.wait_exit(timeout=10)
        log = sim.log_text()
    assert rc != 0
    block = log[log.index("Scheduler hit an exception: Traceback (most recent call last):"):]
    assert 'srt/managers/scheduler.py", line' in block and "in event_loop_overlap" in block
    assert "RuntimeError: CUDA error: an illegal memory access was encountered" in block
    assert "Received sigquit from a child process" in block


# ------------------------------------------------------------------ performance model


def test_calibration_matches_the_published_observation():
    for c in (64, 128, 256):
        assert M.predicted_output_throughput("baseline", c) == pytest.approx(773, rel=0.05)
        assert M.predicted_output_throughput("eagle3", c, max_running=c) == pytest.approx(354, rel=0.05)
        assert M.predicted_output_throughput("eagle3", c) == pytest.approx(354, rel=0.05)  # 48-cap
    ratio = M.predicted_output_throughput("eagle3", 1) / M.predicted_output_throughput("baseline", 1)
    assert 1.5 <= ratio <= 2.5
    base = [M.predicted_output_throughput("baseline", c) for c in (1, 2, 4, 8, 16, 32, 64)]
    assert base == sorted(base)  # throughput never falls as concurrency rises


def test_adaptive_follows_eagle_below_threshold_and_taxed_baseline_above():
    for c in (1, 2, 4, 8):
        assert M.predicted_output_throughput("adaptive", c, threshold=8) == pytest.approx(
            M.predicted_output_throughput("eagle3", c))
    for c in (16, 32, 64):
        assert M.predicted_output_throughput("adaptive", c, threshold=8, max_running=256) == pytest.approx(
            0.97 * M.predicted_output_throughput("baseline", c, max_running=256), rel=0.005)
    levels = [1, 2, 4, 8, 16, 32, 64]
    assert M.predicted_crossover(levels) == 8 and M.predicted_best_threshold(levels) == 4


def test_adaptive_tiers_pad_to_cuda_graph_buckets_like_sglang(tmp_path):
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [3]}, "16": {"candidate_steps": [0]}, "strategy": "ema"}))
    tiers = M.load_adaptive_config(cfg, M.spec_cuda_graph_bs(256))
    assert tiers.speculates(14) and not tiers.speculates(15)  # 15 is padded to the 16 bucket
    assert tiers.threshold() == 14
    assert M.load_adaptive_config(cfg).threshold() == 15  # without CUDA graphs, no padding
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"1": {"candidate_steps": [-1]}}))
    with pytest.raises(ValueError, match="candidate_steps"):
        M.load_adaptive_config(bad)


def test_measured_throughput_baseline_beats_eagle_at_32_and_loses_at_1():
    tree = ensure_tree("0.5.10.post1")
    got = {}
    for arm, extra in (("baseline", []), ("eagle3", EAGLE)):
        with run_sim(tree, MODEL + extra + STEADY + ["--max-running-requests", "64"]) as sim:
            got[arm, 32] = asyncio.run(drive(sim.url, 32, 64, max_new_tokens=64))["output_throughput"]
            got[arm, 1] = asyncio.run(drive(sim.url, 1, 3, max_new_tokens=64))["output_throughput"]
    assert got["baseline", 32] > 1.5 * got["eagle3", 32]
    assert got["eagle3", 1] > 1.4 * got["baseline", 1]
    # model-clock figures land near the steady-state prediction (prefill and tail cost a little;
    # machine load does not enter: see test_model_clock_figures_do_not_depend_on_the_machines_speed)
    assert got["baseline", 32] == pytest.approx(M.predicted_output_throughput("baseline", 32), rel=0.15)
    assert got["eagle3", 32] == pytest.approx(M.predicted_output_throughput("eagle3", 32), rel=0.15)


def test_sim_knobs_come_from_flags_or_env_and_are_stripped():
    from specops.sim.knobs import UsageError
    from specops.sim.program import options, split_argv

    knobs, rest = split_argv(["--sglang-tree", "/t", "--model-path", "m", "--sim-time-scale=0.1", "--sim-fail-at-start",
                              "--port", "5"], env={"SPECOPS_SIM_TIME_SCALE": "0.5", "SPECOPS_SIM_CRASH_AFTER": "3"})
    assert rest == ["--model-path", "m", "--port", "5"]
    opts = options(knobs)
    assert (opts.time_scale, opts.fail_at_start, opts.crash_after) == (0.1, True, 3)
    knobs, _ = split_argv([], env={"SPECOPS_SIM_TREE": "/x", "SPECOPS_SIM_SLOW_START": "2", "SPECOPS_SIM_SEED": "9"})
    opts = options(knobs)
    assert (str(opts.tree), opts.slow_start, opts.seed, opts.fail_at_start) == ("/x", 2.0, 9, False)
    assert options(split_argv(["--sim-accept-length", "2.5"], env={"SPECOPS_SIM_TREE": "/x"})[0]).accept_length == 2.5
    with pytest.raises(UsageError, match="--sim-accept-length must be at least 1"):
        options(split_argv(["--sim-accept-length", "0.5"], env={"SPECOPS_SIM_TREE": "/x"})[0])


def test_broken_eagle_worker_kills_only_speculative_servers(sglang_tree):
    """A bad worker patch: the baseline never imports it; an EAGLE-3 server dies in its scheduler."""
    tree = sglang_tree("0.4.10.post2")
    worker = tree / "python/sglang/srt/speculative/eagle_worker.py"
    src = worker.read_text()
    assert "    def __init__(\n" in src
    worker.write_text(src.replace("    def __init__(\n", "    def __init__(\n        self.disable_threshold = 0\n", 1))
    with run_sim(tree, MODEL + FAST) as sim:
        assert health_status(sim.url) == 200
    with pytest.raises(SimStartError) as err:
        with run_sim(tree, MODEL + EAGLE + FAST, ready_timeout=20):
            pass
    assert err.value.returncode == 1
    assert "Scheduler hit an exception: Traceback (most recent call last):" in err.value.log
    assert f'File "{worker.resolve()}", line' in err.value.log and "SyntaxError" in err.value.log


def test_a_native_adaptive_server_without_cuda_graphs_routes_by_the_batch_itself(tmp_path):
    """As SGLang 0.5.14 does: with `--disable-cuda-graph` its adaptive router has no bucket list,
    so a tier keyed 12 starts at batch 12; with graphs on, 11 pads to the 12 bucket and is off too."""
    cfg = tmp_path / "a.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [3]}, "12": {"candidate_steps": [0]}}))
    args = {"speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "speculative_adaptive": True,
            "speculative_adaptive_config": str(cfg), "_cuda_graph_max_bs": 64}
    graphs, _ = arm_model(args)
    no_graphs, _ = arm_model({**args, "disable_cuda_graph": True})
    assert graphs.tiers is not None and no_graphs.tiers is not None
    assert (graphs.tiers.threshold(), no_graphs.tiers.threshold()) == (10, 11)


def test_bad_adaptive_config_fails_at_start_like_sglang(tmp_path):
    cfg = tmp_path / "adaptive.json"
    cfg.write_text(json.dumps({"1": {"candidate_steps": [-1]}}))
    with pytest.raises(SimStartError) as err:
        with run_sim(ensure_tree("0.5.14"), MODEL + EAGLE + FAST + ["--speculative-adaptive",
                                                                   "--speculative-adaptive-config", str(cfg)]):
            pass
    assert err.value.returncode == 1
    assert "ValueError: BS 1: candidate_steps must be a list of non-negative ints, got [-1]" in err.value.log
