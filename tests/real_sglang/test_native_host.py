"""Real SGLang 0.5.14 on this machine's CPU, its native adaptive route driven by specops as a
user drives it (issue 39, part 2).

One host over the sshd fixture, `engine: sglang`, `device: cpu`: a git repository made from
0.5.14's wheel (`standin.wheel_repo`: 0.5.14 has no sdist that runs here) is cloned, left
unpatched (0.5.14 has zero-step tiers: the adaptive arm takes the native route), installed
editable into a venv that sees the cached 0.5.14 runtime (torch 2.11.0, transformers 5.8.1),
and baseline, EAGLE-3 and adaptive (threshold 1: specops generates the tier config, 2 steps
up to batch 1, 0 above) are launched and waited for on the real ready line. Then `specops
verify` (greedy identity across a tier switch, SGLang's own `Switch adaptive runtime state`
lines read as the drafting evidence, drafts accepted) and the same verify failing on the
adaptive arm once its accept path is broken, a spec-off arm (0 steps at every batch) benched
beside the baseline with the tax of staying speculation-capable reported, and `stop`; `tune
--write` on this release's tiers runs in the `--small` SGLang crossover
(test_real_crossover_sglang.py), every arm on torch_native. tests/support/real_sglang/native_check.py
makes the same identity, switch and acceptance checks on servers it launches itself, by hand:
`python -m tests.support.real_sglang.native_check`.

What is a stand-in here, and why (tests/support/real_sglang/standins/README.md): the
GPU/AMX kernel package `sgl_kernel` and two CUDA-only EAGLE kernels, which this CPU cannot
run. Everything else is SGLang's own code.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from specops.sglang.adaptive import parse_step_switches, parse_transitions
from specops.sim.testing import free_ports
from tests.support.deploy import deployed, events, only_run_dir, run_cli, verify_json, write_yaml
from tests.support.real_sglang import NEWER_ENGINES_GROUP
from tests.support.real_sglang.hosts import sglang_inventory
from tests.support.real_sglang.models import TinyModels, ensure_models
from tests.support.real_sglang.runtime import ensure_runtime
from tests.support.real_sglang.server import (
    BREAK_ACCEPT_ENV,
    EAGLE3_SETTINGS,
    accept_path_broken,
    arm_extra_args,
    arm_profile,
)
from tests.support.standin import wheel_repo

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(NEWER_ENGINES_GROUP), pytest.mark.timeout(1800)]

VERSION = "0.5.14"
THRESHOLD = 1
NEW_TOKENS = 5
STEPS = EAGLE3_SETTINGS["num_steps"]
#: flags every arm gets: /metrics, and a `Decode batch` line per step (few steps here)
COMMON = ["--enable-metrics", "--decode-log-interval", "1"]


@dataclass
class Host:
    inventory: Path
    workdir: Path
    runs: Path
    ports: dict[str, int]
    models: TinyModels
    #: per arm, the file whose presence breaks its accept path (the stand-ins' BREAK_ACCEPT_ENV)
    break_accept: dict[str, Path]


def _arm(kind: str, models: TinyModels, port: int, nccl: int, break_accept: Path) -> dict:
    """A CPU arm of `kind`; a spec-off arm runs as the EAGLE-3 one does (the head loaded). Every
    arm decodes with the Triton backend (EAGLE's only one here, interpreted: about a second a
    token), the baseline too: against a torch_native baseline (milliseconds a token) the tax
    measured 0.011x and tune found EAGLE-3 slower at every level, the backends' difference."""
    draft = None if kind == "baseline" else models.draft
    arm = arm_profile("eagle3" if kind == "spec-off" else kind, models.target, port=port, draft=draft, nccl_port=nccl)
    arm["kind"] = kind
    arm["extra_args"] = [*arm_extra_args(kind, attention="triton"), "--nccl-port", str(nccl), *COMMON]
    arm["env"] = {**arm["env"], BREAK_ACCEPT_ENV: str(break_accept)}
    if kind == "adaptive":
        arm["threshold"] = THRESHOLD
    return arm


@pytest.fixture(scope="module")
def host(tmp_path_factory, sshd):
    python = ensure_runtime(VERSION).python
    models = ensure_models()
    tmp = tmp_path_factory.mktemp("real-native")
    ports = free_ports(8)
    names = ("baseline", "eagle3", "adaptive", "spec-off")
    flags = {name: tmp / f"break-accept-{name}" for name in names}
    arms = {name: _arm(name, models, ports[2 * i], ports[2 * i + 1], flags[name]) for i, name in enumerate(names)}
    spec_off = arms.pop("spec-off")  # launched by the bench test only (four servers would not fit beside CI)
    inv = sglang_inventory(tmp, sshd, models, python, repo=wheel_repo(VERSION), ref=f"v{VERSION}", arms=arms)
    runs = tmp / "runs"
    with deployed(inv, runs):
        data = yaml.safe_load(inv.read_text())
        data["vars"]["arms"]["spec-off"] = spec_off
        write_yaml(inv, data)
        yield Host(inv, tmp / "w", runs, {name: arms.get(name, spec_off)["port"] for name in names}, models, flags)


def _log(host: Host, arm: str) -> str:
    return (host.workdir / ".specops" / "logs" / f"{arm}.log").read_text(errors="replace")


def _state(host: Host, arm: str) -> dict:
    return json.loads((host.workdir / ".specops" / "servers" / f"{arm}.json").read_text())


def _config(host: Host, arm: str) -> dict[str, list[int]]:
    doc = json.loads(Path(_state(host, arm)["config_path"]).read_text())
    return {k: v["candidate_steps"] for k, v in doc.items()}


def test_deploy_launches_the_native_route_unpatched(host: Host) -> None:
    evs = events(only_run_dir(host.runs))
    done = {e.get("step") for e in evs if e["event"] == "done"}
    assert {"check out sglang", "install sglang into its environment", "launch servers", "smoke request"} <= done
    assert "dynamic speculation disable" not in done, "0.5.14 has zero-step tiers: nothing to patch"
    for arm, port in host.ports.items():
        if arm == "spec-off":
            continue
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=120) as resp:
            info = json.loads(resp.read())
        assert info["version"] == VERSION and info["device"] == "cpu", (arm, info["version"])
        assert bool(info.get("speculative_adaptive")) is (arm == "adaptive"), arm
    state = _state(host, "adaptive")
    assert state["mechanism"] == "native-adaptive" and state["effective_threshold"] == THRESHOLD, state
    # specops' generated tiers: 2 steps up to batch 1, none above; the launch's steps listed
    assert _config(host, "adaptive") == {"1": [STEPS], str(THRESHOLD + 1): [0]}
    log = _log(host, "adaptive")
    assert f"AdaptiveSpeculativeParams initialized: steps={STEPS}, candidate_steps=[{STEPS}]" in log
    assert not parse_transitions(log), "the native route logs no patch transition lines"


def test_verify_reads_the_native_switch_lines_as_drafting_evidence(host: Host, tmp_path: Path) -> None:
    out = tmp_path / "verify.md"
    run = verify_json(host.inventory, "--prompts", "1", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "3",
                      "--out", str(out))
    doc, verdicts = run.doc, run.verdicts
    assert run.exit_code == 0 and doc["ok"] and doc["threshold"] == THRESHOLD, verdicts
    assert verdicts["greedy token identity at concurrency 1"] == "PASS", verdicts
    assert verdicts[f"greedy token identity at concurrency {THRESHOLD + 2} (above the threshold)"] == "PASS"
    drafting = run.check("drafting stopped above the threshold and resumed below it")
    assert drafting["verdict"] == "PASS", drafting
    assert any(f"Switch adaptive runtime state: steps {STEPS} -> 0" in ln for ln in drafting["evidence"]), drafting
    assert any(f"Switch adaptive runtime state: steps 0 -> {STEPS}" in ln for ln in drafting["evidence"]), drafting
    assert all(a["info"]["version"] == VERSION for a in doc["arms"].values())
    assert verdicts["drafted tokens accepted"] == "PASS", verdicts
    for kind in ("eagle3", "adaptive"):
        acc = doc["arms"][kind]["acceptance"]
        assert acc["accept_length"] >= 2.0 and acc["accepted_drafts"] > 0, (kind, acc)
    assert verdicts["acceptance after drafting resumed"] == "PASS", doc["checks"]
    assert doc["arms"]["adaptive"]["off_stretches"][0]["ratio"] >= 0.9, doc["arms"]["adaptive"]
    assert "Result: **PASS**" in out.read_text()
    assert not parse_step_switches(_log(host, "eagle3")), "only the adaptive arm has tiers"


def test_a_broken_accept_path_on_the_native_route_fails_verify_naming_the_arm(host: Host) -> None:
    """The verify above could fail: the adaptive server's accept path commits the first drafted
    token it accepts as another token (the stand-in verify kernel, while the arm's flag file
    exists), and greedy identity names the arm, the prompt and token 1 (token 0 comes from
    prefill; the first drafts are accepted in the step after)."""
    # one resumed step: the verdict wanted is identity's at concurrency 1 (each resumed step is
    # a draft step more of the batch's first request, on each of the three arms in turn)
    with accept_path_broken(host.break_accept["adaptive"]):
        run = verify_json(host.inventory, "--prompts", "1", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "1")
    assert run.exit_code == 1 and not run.doc["ok"], run.verdicts
    identity = run.check("greedy token identity at concurrency 1")
    assert identity["verdict"] == "FAIL", run.doc["checks"]
    assert identity["evidence"][0].startswith("adaptive prompt 0 "), identity
    assert ": differs at token 1: " in identity["evidence"][0], identity
    assert not any(line.startswith("eagle3") for line in identity["evidence"]), identity


def test_a_spec_off_arm_is_benched_beside_the_baseline_and_the_tax_reported(host: Host) -> None:
    out = host.runs / "bench-tax"
    res = run_cli("bench", "--host", "cpu", "-i", str(host.inventory), "--arms", "baseline,spec-off",
                  "--runner", "sglang", "--concurrency", "1,2", "--repeats", "1", "--num-prompts", "2",
                  "--input-len", "8", "--output-len", "4", "--out", str(out))
    assert res.exit_code == 0, res.output
    records = [json.loads(x) for x in (out / "results.jsonl").read_text().splitlines()]
    assert {(r["arm"], r["concurrency"]) for r in records} == {(a, c) for a in ("baseline", "spec-off") for c in (1, 2)}
    assert all(r["status"] == "ok" and r["completed"] == 2 and r["output_throughput"] > 0 for r in records), records
    off = [r for r in records if r["arm"] == "spec-off"]
    assert all(r["mechanism"] == "spec-off (native tiers)" for r in off), off
    # read from SGLang's own lines by the runner: no decode step of the arm drafted
    assert all(r["drafting_off"] is True and r["drafting_off_share"] == 1.0 for r in off), off
    # SGLang's own log: it started on the launch's 2 steps and went to the zero-step tier for good
    log = _log(host, "spec-off")
    switches = parse_step_switches(log)
    assert switches and all(not s.drafting for s in switches), switches
    assert "Traceback" not in log
    doc = json.loads((out / "summary.json").read_text())["hosts"][0]["speculation_capable_tax"]
    assert doc["arm"] == "spec-off" and [x["concurrency"] for x in doc["levels"]] == [1, 2], doc
    assert all(x["ratio"] > 0 for x in doc["levels"]), doc   # measured at every level, not made up
    assert "tax of staying speculation-capable (spec-off / baseline" in (out / "report.md").read_text()
    # the bench launched it for itself and stopped it after
    assert not (host.workdir / ".specops" / "servers" / "spec-off.json").exists()


def test_stop_takes_every_server_down(host: Host) -> None:
    res = run_cli("stop", "--host", "cpu", "-i", str(host.inventory))
    assert res.exit_code == 0, res.output
    status = run_cli("status", "--host", "cpu", "-i", str(host.inventory), "--json")
    assert status.exit_code == 0, status.output
    assert not [row for row in json.loads(status.output)["cpu"] if row["state"] == "ready"], status.output
