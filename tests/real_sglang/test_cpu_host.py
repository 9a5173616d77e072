"""Real SGLang 0.5.10.post1 on this machine's CPU, driven by specops as a user drives it.

One host over the sshd fixture, `engine: sglang`, `device: cpu`: a git repository built from
the real sdist is cloned (shallow), patched with dynamic-spec-disable, installed editable
into a venv that sees the tier's cached runtime (`sglang_runtime`), the tiny local models
checked, and baseline, EAGLE-3 and adaptive (threshold 1) launched and waited for on the
real ready line and /health; then greedy identity with the adaptive path proven by the
server's own log, the `sglang` runner (real bench_serving), a real crash, and a revert.

What is a stand-in here, and why (tests/support/real_sglang/standins/README.md): the
GPU/AMX kernel package `sgl_kernel` and two CUDA-only EAGLE kernels, which this CPU cannot
run. Everything else is SGLang's own code.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import threading
import urllib.request
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from specops.sglang.adaptive import parse_transitions
from specops.sim.testing import health_status
from tests.support.arms import free_port
from tests.support.deploy import deployed, events, only_run_dir, run_cli, verify_json, write_yaml
from tests.support.real_sglang import PATCH_ROUTE_GROUP
from tests.support.real_sglang.hosts import sglang_inventory
from tests.support.real_sglang.models import TinyModels, ensure_models
from tests.support.real_sglang.runtime import ensure_runtime
from tests.support.real_sglang.server import (
    BREAK_ACCEPT_ENV,
    HEALTH_TIMEOUT_S,
    STANDINS,
    accept_path_broken,
    arm_extra_args,
    arm_profile,
)
from tests.support.standin import STANDIN_VERSION, bare_repo
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(PATCH_ROUTE_GROUP), pytest.mark.timeout(1800)]

THRESHOLD = 1
PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model"]
NEW_TOKENS = 5
LATENCY_PROMPTS = 3


@dataclass
class Host:
    inventory: Path
    workdir: Path
    runs: Path
    ports: dict[str, int]
    models: TinyModels
    deploy_output: str
    #: per arm, the file whose presence breaks its accept path (standins: BREAK_ACCEPT_ENV)
    break_accept: dict[str, Path]


def _generate(port: int, prompt: str) -> list[int]:
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return list(json.loads(resp.read())["output_ids"])


def _break_accept_flags(tmp: Path) -> dict[str, Path]:
    return {arm: tmp / f"break-accept-{arm}" for arm in ("baseline", "eagle3", "adaptive")}


def _inventory(tmp: Path, sshd, models: TinyModels, python: Path, ports: dict[str, int],
               arms: dict[str, dict] | None = None) -> Path:
    common = ["--enable-metrics", "--decode-log-interval", "1"]  # a Decode batch line per step: few steps here
    if arms is None:
        arms = {
            "baseline": arm_profile("baseline", models.target, port=ports["baseline"]),
            "eagle3": arm_profile("eagle3", models.target, port=ports["eagle3"], draft=models.draft),
            "adaptive": {**arm_profile("adaptive", models.target, port=ports["adaptive"], draft=models.draft),
                         "threshold": THRESHOLD},
        }
        for name, arm in arms.items():
            arm["extra_args"] = [*arm["extra_args"], *common]  # type: ignore[misc]
            arm["env"] = {**arm["env"], BREAK_ACCEPT_ENV: str(_break_accept_flags(tmp)[name])}  # type: ignore[dict-item]
    return sglang_inventory(tmp, sshd, models, python, repo=bare_repo(), ref=f"v{STANDIN_VERSION}", arms=arms)


@pytest.fixture(scope="module")
def host(tmp_path_factory, sshd):
    python = ensure_runtime().python
    models = ensure_models()
    tmp = tmp_path_factory.mktemp("real-cpu")
    ports = {"baseline": free_port(), "eagle3": free_port(), "adaptive": free_port()}
    inv = _inventory(tmp, sshd, models, python, ports)
    runs = tmp / "runs"
    with deployed(inv, runs) as res:
        yield Host(inv, tmp / "w", runs, ports, models, res.output, _break_accept_flags(tmp))


def _log(host: Host, arm: str) -> str:
    return (host.workdir / ".specops" / "logs" / f"{arm}.log").read_text(errors="replace")


def test_deploy_clones_patches_installs_and_serves_three_real_arms(host: Host) -> None:
    run = only_run_dir(host.runs)
    evs = events(run)
    done = {e.get("step") for e in evs if e["event"] == "done"}
    assert {"check out sglang", "dynamic speculation disable", "install sglang into its environment",
            "launch servers", "smoke request"} <= done, sorted(done)
    weights = [e for e in evs if e.get("step") == "model weights" and e["event"] == "skip"]
    assert weights and weights[0]["reason"] == "already verified"  # the local tiny models: config.json checked
    assert any(e["event"] == "note" and e["message"] == "GPU preflight skipped: device cpu" for e in evs
               if e.get("step") == "gpu preflight")
    tree = host.workdir / "sglang"
    assert (tree / "python/sglang/srt/speculative").is_dir()
    shallow = (tree / ".git" / "shallow").exists()
    assert shallow, "the checkout is shallow"
    for arm, port in host.ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=120) as resp:
            assert resp.status == 200, arm
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=120) as resp:
            info = json.loads(resp.read())
        assert info["version"] == STANDIN_VERSION, (arm, info["version"])
        assert info["device"] == "cpu"
        assert "The server is fired up and ready to roll!" in _log(host, arm)
    # the servers' sglang is the patched checkout, installed editable into a venv that sees the runtime
    where = subprocess.run([str(host.workdir / "venv" / "bin" / "python"), "-c",
                            "import sglang, torch; print(sglang.__file__); print(torch.__file__)"],
                           cwd="/", capture_output=True, text=True, timeout=300, check=True).stdout.split()
    assert Path(where[0]).resolve().is_relative_to((tree / "python").resolve()), where
    assert Path(where[1]).resolve().is_relative_to(ensure_runtime().root.resolve()), where
    with urllib.request.urlopen(f"http://127.0.0.1:{host.ports['adaptive']}/server_info", timeout=120) as resp:
        assert json.loads(resp.read())["speculative_disable_batch_threshold"] == THRESHOLD
    status = run_cli("status", "--host", "cpu", "-i", str(host.inventory), "--json")
    assert status.exit_code == 0, status.output
    rows = {row["arm"]: row for row in json.loads(status.output)["cpu"]}
    assert set(rows) == set(host.ports)
    assert all(row["state"] == "ready" and row["health"] == "200" for row in rows.values()), rows
    assert "--device cpu" in rows["baseline"]["command"] and "SGLANG_USE_CPU_ENGINE=1" in rows["baseline"]["command"]
    assert "TOKENIZERS_PARALLELISM=false" in rows["baseline"]["command"]  # a boolean is never a secret
    logs = run_cli("logs", "--host", "cpu", "-i", str(host.inventory), "--json")
    assert logs.exit_code == 0 and all(arm in logs.output for arm in host.ports)


def _stream(port: int, prompt: str, seen: Callable[[int], None]) -> None:
    """A streamed greedy request of NEW_TOKENS tokens; `seen(n)` after each chunk (n tokens so far)."""
    body = {"text": prompt, "stream": True,
            "sampling_params": {"temperature": 0, "max_new_tokens": NEW_TOKENS, "ignore_eos": True}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if line.startswith("data:") and line != "data: [DONE]":
                seen(json.loads(line[5:])["meta_info"]["completion_tokens"])


@pytest.mark.parametrize("arm,running", [("eagle3", 1), ("adaptive", 1), ("adaptive", 2)])
def test_a_request_arriving_during_the_last_step_of_the_running_batch_is_served(host: Host, arm: str,
                                                                                running: int) -> None:
    """The sequence verify once aborted on: the running requests finish in a verify step while a
    new one arrives, so the new request is prefilled and merged into a batch whose draft input
    is empty (adaptive with 2 running, when both decode in step: that last step is a trivial
    verify, drafting off). The new request is sent once every running request has streamed all
    but its last token (the trained head's drafts are accepted: 1, 4, then 5 tokens while
    drafting; a token a step while it is off), a step about a second. SGLang 0.5.10.post1 sizes that empty input by the target's hidden width, so a head
    narrower than the target aborted the scheduler here, patched or not (make_models.DRAFT_HIDDEN)."""
    port = host.ports[arm]
    progress = [0] * running
    late: list[Future] = []
    lock = threading.Lock()

    def seen(k: int, n: int) -> None:
        with lock:
            progress[k] = n
            if not late and min(progress) >= NEW_TOKENS - 1:
                late.append(pool.submit(_generate, port, PROMPTS[2]))

    with ThreadPoolExecutor(running + 1) as pool:
        streams = [pool.submit(_stream, port, PROMPTS[k], lambda n, k=k: seen(k, n)) for k in range(running)]
        for f in streams:
            f.result()
        assert late, progress
        answer = late[0].result()
    assert answer == _generate(host.ports["baseline"], PROMPTS[2]), arm
    # still serving: SGLang's /health generates a token and answers 503 when that took over its own
    # 20 s (Triton's interpreter, ~1 s a step, beside the other worker's servers), so ask until it
    # answers 200; an aborted scheduler never does
    wait_until(lambda: health_status(f"http://127.0.0.1:{port}", HEALTH_TIMEOUT_S) == 200,
               f"{arm}'s /health to answer 200", timeout=300)
    assert "Traceback" not in _log(host, arm)


def test_bench_with_real_bench_serving_reads_the_running_batch(host: Host) -> None:
    out = host.runs / "bench"
    # the two EAGLE arms (the baseline's bench_serving points are the next test's)
    res = run_cli("bench", "--host", "cpu", "-i", str(host.inventory), "--runner", "sglang", "--arms", "eagle3,adaptive",
                  "--concurrency", "1,2", "--repeats", "1", "--num-prompts", "2", "--input-len", "8",
                  "--output-len", "4", "--keep-servers", "--out", str(out))
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["concurrency"]) for r in records} == {(a, c) for a in ("eagle3", "adaptive") for c in (1, 2)}
    assert all(r["status"] == "ok" and r["runner"] == "sglang" and not r.get("simulated") for r in records), records
    assert all(r["completed"] == 2 and r["output_throughput"] > 0 for r in records)
    assert all(r.get("running_req_p50") is not None for r in records), [r.get("running_req_p50") for r in records]
    by = {(r["arm"], r["concurrency"]): r for r in records}
    # the adaptive server's own log: drafting off at 2 in flight (threshold 1), on at 1
    assert by["adaptive", 2]["drafting_off"] is True, by["adaptive", 2]
    assert by["adaptive", 1]["drafting_off_share"] == 0.0, by["adaptive", 1]
    assert by["eagle3", 2]["drafting_off"] is None
    summary = json.loads((out / "summary.json").read_text())
    assert summary and (out / "report.md").is_file()
    report = (out / "report.md").read_text()
    assert "SIMULATED" not in report and "cpu" in report.lower()


def test_a_phase_run_shows_the_adaptive_arm_switching_with_its_lag(host: Host) -> None:
    """bench --phases against the real baseline and adaptive arms (issue 34 point 2): one
    low-high-low timeline through the builtin client; the adaptive server (threshold 1) logs its
    transition lines in the run's window, and summary.json gives the lag read from its decode
    and switch lines. Not EAGLE-3 alone: on this shared CPU its steps take seconds each, and an
    open loop's queue at the high rate would take it many minutes to drain."""
    out = host.runs / "phases"
    before = len(parse_transitions(_log(host, "adaptive")))
    res = run_cli("bench", "--host", "cpu", "-i", str(host.inventory), "--arms", "baseline,adaptive",
                  "--phases", "0.5/s:4s,3/s:4s,0.5/s:4s", "--runner", "builtin", "--repeats", "1",
                  "--input-len", "8", "--output-len", "4", "--keep-servers", "--out", str(out))
    assert res.exit_code == 0, res.output
    records = {r["arm"]: r for r in map(json.loads, (out / "results.jsonl").read_text().splitlines())}
    assert all(r["status"] == "ok" and not r.get("simulated") for r in records.values()), records
    requests = {arm: [p["requests"] for p in r["extra"]["phases"]] for arm, r in records.items()}
    assert len({tuple(v) for v in requests.values()}) == 1, requests     # one timeline for every arm
    assert len(parse_transitions(_log(host, "adaptive"))) > before       # the switch is in the server's log
    switching = records["adaptive"]["extra"]["switching"]
    assert switching["threshold"] == THRESHOLD and switching["switches"], switching
    phases = json.loads((out / "summary.json").read_text())["hosts"][0]["phases"]
    assert phases["worst_lag_steps"] is not None and phases["lag"]["worst_s"] is not None, phases
    assert all(p["envelope"] is not None for p in phases["phases"]), phases["phases"]
    assert (out / "plots" / "phases.png").is_file() and "Phases on cpu" in (out / "report.md").read_text()


def test_real_bench_serving_gives_per_request_latencies_and_goodput(host: Host) -> None:
    """The `sglang` runner's per-request latencies from real bench_serving (its `--output-details`)
    and goodput under an SLO from them, on the baseline arm (torch_native decodes in milliseconds
    here). The SLOs are ones no real request can miss (10 minutes) or meet (a microsecond to
    the first token), so nothing here depends on how fast this machine is."""
    out = host.runs / "bench-latencies"
    res = run_cli("bench", "--host", "cpu", "-i", str(host.inventory), "--arms", "baseline", "--runner", "sglang",
                  "--concurrency", "1,2", "--repeats", "1", "--num-prompts", str(LATENCY_PROMPTS), "--input-len", "8",
                  "--output-len", "4", "--slo", "ttft_ms=600000,tpot_ms=600000", "--keep-servers",
                  "--out", str(out))
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert [(r["runner"], r["status"], r["completed"]) for r in records] == [("sglang", "ok", LATENCY_PROMPTS)] * 2
    for rec in records:
        lat = rec["extra"]["request_latencies_ms"]
        assert len(lat) == LATENCY_PROMPTS and "request_latencies_missing" not in rec["extra"], rec["extra"]
        assert all(ttft > 0 and tpot > 0 and e2e >= ttft for ttft, tpot, e2e in lat), lat
        # bench_serving's own mean TTFT is over the same ttfts; its TPOT and E2E also wait for
        # the closing [DONE] line, which the details omit: ours are never above them
        assert statistics.fmean(x[0] for x in lat) == pytest.approx(rec["mean_ttft_ms"], abs=0.01)
        assert statistics.fmean(x[1] for x in lat) <= rec["mean_tpot_ms"] + 0.01
        assert statistics.fmean(x[2] for x in lat) <= rec["mean_e2e_ms"] + 0.01
        assert "ttfts" not in json.loads(rec["raw"])   # the arrays (generated text too) are not kept twice
    doc = json.loads((out / "summary.json").read_text())
    points = {p["concurrency"]: p for p in doc["hosts"][0]["points"]}
    by_c = {r["concurrency"]: r for r in records}
    for c in (1, 2):   # every request met a 10-minute limit
        assert points[c]["slo_attainment"] == 1.0
        assert points[c]["goodput"] == pytest.approx(LATENCY_PROMPTS / by_c[c]["duration_s"])
    assert "goodput and attainment per point" in (out / "report.md").read_text()

    # the same files under an SLO no request meets: goodput 0 measured, not missing
    res = run_cli("report", str(out), "--slo", "ttft_ms=0.001", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["slo"] == {"ttft_ms": 0.001}
    assert [(p["goodput"], p["slo_attainment"]) for p in doc["hosts"][0]["points"]] == [(0.0, 0.0)] * 2


def _launch_alone(host: Host, tmp_path: Path, sshd, arms: dict[str, dict]) -> tuple[Path, dict]:
    """Launch `arms` (expected to fail) on the tier's host and patched tree, through a
    one-step deploy of their own: (its inventory, the run's fail event)."""
    inv = _inventory(tmp_path, sshd, host.models, ensure_runtime().python, {}, arms=arms)
    data = json.loads(json.dumps(__import__("yaml").safe_load(inv.read_text())))
    data["hosts"]["cpu"]["workdir"] = str(host.workdir)  # the same host and patched tree
    write_yaml(inv, data)
    pb = write_yaml(tmp_path / "launch.yaml", {"steps": [
        {"name": "launch", "server": {"arms": list(arms), "tree": str(host.workdir / "sglang")}, "timeout": 600}]})
    res = run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1, res.output
    return inv, [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "fail"][0]


def test_a_real_crash_fails_the_step_quoting_sglangs_reason(host: Host, tmp_path: Path, sshd) -> None:
    models = host.models
    port = free_port()
    broken = {"broken": {**arm_profile("eagle3", models.target, port=port, draft=models.bad_draft)}}
    inv, fail = _launch_alone(host, tmp_path, sshd, broken)
    assert "broken" in fail["error"] and "File \"" not in fail["error"].splitlines()[0], fail["error"]
    errors = run_cli("logs", "--host", "cpu", "-i", str(inv), "--errors", "-s", "broken")
    assert errors.exit_code == 0 and ("Error" in errors.output or "error" in errors.output), errors.output
    for arm, p in host.ports.items():  # the other arms are as they were
        with urllib.request.urlopen(f"http://127.0.0.1:{p}/health", timeout=120) as resp:
            assert resp.status == 200, arm


def test_an_attention_backend_the_patch_is_not_made_for_is_refused_at_launch(host: Host, tmp_path: Path,
                                                                            sshd) -> None:
    """Issue 28: with a threshold, the patched worker refuses a target attention backend its
    one-token verify is not made correct for, at start, saying which and what to use (here
    torch_native, which SGLang itself would refuse for EAGLE only later, in the draft worker)."""
    models = host.models
    arm = {**arm_profile("adaptive", models.target, port=free_port(), draft=models.draft), "threshold": THRESHOLD,
           "extra_args": arm_extra_args("adaptive", attention="torch_native")}
    _inv, fail = _launch_alone(host, tmp_path, sshd, {"unproven": arm})
    assert ("--speculative-disable-batch-threshold: the target's attention backend is TorchNativeAttnBackend; "
            "specops dynamic-spec-disable makes its one-token verify correct for the triton, fa3 and flashinfer "
            "attention backends only") in fail["error"], fail["error"]
    log = (host.workdir / ".specops" / "logs" / "unproven.log").read_text(errors="replace")
    assert "EAGLE is not supported" not in log  # refused by the set, before SGLang's own draft-backend check
    assert not parse_transitions(log)


def test_verify_passes_the_same_checks_against_real_sglang(host: Host, tmp_path: Path) -> None:
    """`specops verify` (issue 23) makes the tier's checks itself: greedy identity alone and
    above the threshold (the teeth test below shows that check failing), drafting off and on
    again in the adaptive server's own log and only there."""
    out = tmp_path / "verify.md"
    run = verify_json(host.inventory, "--prompts", "1", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "3",
                      "--out", str(out))
    doc, verdicts = run.doc, run.verdicts
    assert run.exit_code == 0 and doc["ok"] and doc["threshold"] == THRESHOLD, verdicts
    assert verdicts["greedy token identity at concurrency 1"] == "PASS", verdicts
    assert verdicts[f"greedy token identity at concurrency {THRESHOLD + 2} (above the threshold)"] == "PASS", verdicts
    assert verdicts["drafting stopped above the threshold and resumed below it"] == "PASS", verdicts
    assert all(a["info"]["version"] == STANDIN_VERSION for a in doc["arms"].values())
    assert "Result: **PASS**" in out.read_text() and "drafting off (running batch" in out.read_text()
    assert not parse_transitions(_log(host, "eagle3")), "only the adaptive arm has a threshold"
    # issue 37: the trained head's drafts are accepted, counted by the server per request...
    assert verdicts["drafted tokens accepted"] == "PASS", verdicts
    for kind in ("eagle3", "adaptive"):
        acc = doc["arms"][kind]["acceptance"]
        assert acc["accept_length"] >= 2.0 and acc["accepted_drafts"] > 0, (kind, acc)
    # ...and drafting resumed in the middle of the long request as good as it stopped
    assert verdicts["acceptance after drafting resumed"] == "PASS", doc["checks"]
    [stretch] = doc["arms"]["adaptive"]["off_stretches"]
    assert stretch["on_batch"] == THRESHOLD and len(stretch["after"]) == 3 and stretch["ratio"] >= 0.9, stretch


def test_a_broken_accept_path_fails_verify_naming_the_arm_the_prompt_and_the_token(host: Host) -> None:
    """Issue 37's teeth: the eagle3 server's accept path commits the first drafted token it
    accepts as another token (the stand-in kernel, while its flag file exists). Greedy identity
    must catch it; it could not while no draft was ever accepted. The first token of a request
    comes from prefill, the first drafts are accepted in the step after: token 1 differs."""
    # one resumed step: the verdict wanted is identity's at concurrency 1 (each resumed step is
    # a draft step more of the batch's first request, on each of the three arms in turn)
    with accept_path_broken(host.break_accept["eagle3"]):
        run = verify_json(host.inventory, "--prompts", "1", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "1")
    assert run.exit_code == 1, run.doc
    identity = run.check("greedy token identity at concurrency 1")
    assert identity["verdict"] == "FAIL", run.doc["checks"]
    assert identity["evidence"][0].startswith(f"eagle3 prompt 0 {PROMPTS[0]!r}: differs at token 1: "), identity
    assert not any(line.startswith("adaptive") for line in identity["evidence"]), identity
    # unbroken again: the same server answers as baseline does
    assert _generate(host.ports["eagle3"], PROMPTS[0]) == _generate(host.ports["baseline"], PROMPTS[0])


def test_after_revert_the_adaptive_launch_fails_naming_the_flag(host: Host, tmp_path: Path) -> None:
    """Last in the module: the patched tree is what ran, so once the patch is reverted the
    adaptive arm cannot start, and the launch says which flag this SGLang lacks."""
    stopped = run_cli("stop", "--host", "cpu", "-i", str(host.inventory), "-s", "adaptive")
    assert stopped.exit_code == 0, stopped.output
    tree = host.workdir / "sglang"
    res = run_cli("patch", "revert", "dynamic-spec-disable", "--tree", str(tree))
    assert res.exit_code == 0, res.output
    assert "speculative_disable_batch_threshold" not in (tree / "python/sglang/srt/server_args.py").read_text()
    pb = write_yaml(tmp_path / "launch.yaml", {"steps": [
        {"name": "launch", "server": {"arms": ["adaptive"], "tree": str(tree)}, "timeout": 600}]})
    res = run_cli("deploy", "--host", "cpu", "-i", str(host.inventory), "-p", str(pb),
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1, res.output
    assert "has neither zero-step adaptive tiers nor the dynamic-spec-disable patch" in res.output, res.output
    # and the installed SGLang itself (editable: the reverted tree) refuses the flag
    python = host.workdir / "venv" / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "sglang.launch_server", "--model-path", str(host.models.target),
                           "--device", "cpu", "--speculative-disable-batch-threshold", "1"],
                          cwd="/", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "SGLANG_USE_CPU_ENGINE": "1", "HF_HUB_OFFLINE": "1",
                               "PYTHONPATH": str(STANDINS)})
    assert proc.returncode != 0
    assert "unrecognized arguments: --speculative-disable-batch-threshold 1" in proc.stderr, proc.stderr[-2000:]
