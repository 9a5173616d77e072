"""Real SGLang on this machine's CPU with every arm on torch_native attention (issue 54, point
3), on both routes: 0.5.10.post1 (the patch route: the eagle-torch-native set, the adaptive arm
dynamic-spec-disable's threshold) and 0.5.14 (native tiers: the eagle-torch-native-v2 set, the
adaptive arm specops' generated tier config, 2 draft steps up to batch 1 and 0 above). `deploy`
applies the release's set because the EAGLE arms ask for torch_native, so EAGLE-3 (topk 1) and
the adaptive arm run on the baseline's attention path instead of Triton's kernels under
Triton's interpreter. `specops verify` then proves greedy identity with the baseline below and
above the threshold, drafting off and on again, and that drafts are accepted (the server's own
counters), and fails when the EAGLE arm's accept path is broken (the stand-in verify kernel's
fault switch). One release's servers at a time (the host fixture is parametrized by release).
That a bench of these arms records one attention backend is checked on the same routes' whole
loop (test_real_crossover_sglang.py), which benches them anyway.

The stand-ins (tests/support/real_sglang/standins) are the tier's usual ones: the GPU kernel
package and the two CUDA-only EAGLE tree kernels. Attention, drafting and the cache
bookkeeping are SGLang's code as the patch set leaves it.
"""

from __future__ import annotations

import json
import re
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.arms import free_port
from tests.support.deploy import deployed, events, only_run_dir, verify_json
from tests.support.real_sglang import NEWER_ENGINES_GROUP, PATCH_ROUTE_GROUP
from tests.support.real_sglang.hosts import sglang_inventory
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import ensure_runtime
from tests.support.real_sglang.server import (
    BREAK_ACCEPT_ENV,
    EAGLE3_SETTINGS,
    accept_path_broken,
    arm_extra_args,
    arm_profile,
)
from tests.support.standin import STANDIN_VERSION, bare_repo, wheel_repo

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(900)]

ARMS = ("baseline", "eagle3", "adaptive")
THRESHOLD = 1
STEP = "eagle on torch_native attention"
NEW_TOKENS = 8
NATIVE = "0.5.14"
#: release -> the patch set deploy applies to it
SETS = {STANDIN_VERSION: "eagle-torch-native", NATIVE: "eagle-torch-native-v2"}


@dataclass
class Host:
    version: str
    inventory: Path
    workdir: Path
    runs: Path
    ports: dict[str, int]
    deploy_output: str
    break_accept: dict[str, Path]


#: each release's servers in its runtime's xdist group (tests/support/real_sglang: one group a worker)
@pytest.fixture(scope="module", params=[pytest.param(STANDIN_VERSION, marks=pytest.mark.xdist_group(PATCH_ROUTE_GROUP)),
                                        pytest.param(NATIVE, marks=pytest.mark.xdist_group(NEWER_ENGINES_GROUP))])
def host(request, tmp_path_factory, sshd):
    version = request.param
    python = ensure_runtime(version).python
    models = ensure_models()
    tmp = tmp_path_factory.mktemp(f"real-torch-native-{version}")
    ports = {arm: free_port() for arm in ARMS}
    flags = {arm: tmp / f"break-accept-{arm}" for arm in ARMS}
    arms = {}
    for arm in ARMS:
        profile = arm_profile(arm, models.target, port=ports[arm], draft=models.draft if arm != "baseline" else None)
        profile["extra_args"] = arm_extra_args(arm, attention="torch_native") + ["--decode-log-interval", "1"]
        profile["env"] = {**profile["env"], BREAK_ACCEPT_ENV: str(flags[arm])}  # type: ignore[dict-item]
        arms[arm] = profile
    arms["adaptive"]["threshold"] = THRESHOLD
    repo = bare_repo() if version == STANDIN_VERSION else wheel_repo(version)
    inv = sglang_inventory(tmp, sshd, models, python, repo=repo, ref=f"v{version}", arms=arms)
    runs = tmp / "runs"
    with deployed(inv, runs) as res:
        yield Host(version, inv, tmp / "w", runs, ports, res.output, flags)


def _server_info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=120) as resp:
        return json.loads(resp.read())


def test_deploy_patches_the_tree_and_every_arm_runs_torch_native(host: Host) -> None:
    evs = events(only_run_dir(host.runs))
    done = {e.get("step") for e in evs if e["event"] == "done"}
    assert {STEP, "install sglang into its environment", "launch servers"} <= done, sorted(done)
    # the adaptive arm's threshold: the patch route's flag, or 0.5.14's native tiers (nothing to patch)
    assert ("dynamic speculation disable" in done) is (host.version == STANDIN_VERSION), sorted(done)
    tree = host.workdir / "sglang" / "python" / "sglang" / "srt"
    draft_utils = (tree / "speculative" / "draft_utils.py").read_text()
    assert f"specops {SETS[host.version]}:" in draft_utils, host.version
    if host.version == NATIVE:
        assert "specops eagle-torch-native:" not in draft_utils
        cache_locs = (tree / "speculative" / "triton_ops" / "cache_locs.py").read_text()
        assert "def specops_assign_draft_cache_locs_contiguous(" in cache_locs
    # 0.5.14's repo (from its wheel) is versioned by setuptools-scm, which names a patched (dirty)
    # checkout of tag v0.5.14 as the next dev release: 0.5.15.dev0+g<commit>.d<date>
    version = re.escape(host.version) if host.version == STANDIN_VERSION else r"0\.5\.14|0\.5\.15\.dev0\+g[0-9a-f]+\.d\d{8}"
    for arm, port in host.ports.items():
        info = _server_info(port)
        assert (info["attention_backend"], info["device"]) == ("torch_native", "cpu"), arm
        assert re.fullmatch(version, info["version"]), (arm, info["version"])
    assert _server_info(host.ports["eagle3"])["speculative_algorithm"] == "EAGLE3"
    adaptive = _server_info(host.ports["adaptive"])
    if host.version == STANDIN_VERSION:
        assert adaptive["speculative_disable_batch_threshold"] == THRESHOLD
    else:
        assert adaptive.get("speculative_adaptive"), adaptive
        state = json.loads((host.workdir / ".specops" / "servers" / "adaptive.json").read_text())
        assert state["mechanism"] == "native-adaptive" and state["effective_threshold"] == THRESHOLD, state
    assert "differs between arms" not in host.deploy_output, host.deploy_output


def test_verify_passes_with_drafts_accepted(host: Host) -> None:
    run = verify_json(host.inventory, "--prompts", "2", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "2")
    verdicts = run.verdicts
    assert run.exit_code == 0 and run.doc["ok"], run.doc["checks"]
    assert verdicts["greedy token identity at concurrency 1"] == "PASS", verdicts
    assert verdicts[f"greedy token identity at concurrency {THRESHOLD + 2} (above the threshold)"] == "PASS", verdicts
    assert verdicts["drafting stopped above the threshold and resumed below it"] == "PASS", verdicts
    # drafting resumed warm: without the skip switch the one-token steps keep the draft state current
    assert verdicts["acceptance after drafting resumed"] == "PASS", verdicts
    if host.version == NATIVE:  # SGLang's own tier switches, to no drafting and back, on torch_native
        evidence = run.check("drafting stopped above the threshold and resumed below it")["evidence"]
        steps = EAGLE3_SETTINGS["num_steps"]
        for switch in (f"steps {steps} -> 0", f"steps 0 -> {steps}"):
            assert any(f"Switch adaptive runtime state: {switch}" in ln for ln in evidence), evidence
    assert verdicts["drafted tokens accepted"] == "PASS", verdicts
    for arm in ("eagle3", "adaptive"):
        acc = run.doc["arms"][arm]["acceptance"]
        assert acc["accept_length"] > 1.0 and acc["accepted_drafts"] > 0, (arm, acc)


def test_a_broken_accept_path_fails_verify(host: Host) -> None:
    """The teeth: with the eagle3 arm committing a wrong token for its first accepted draft,
    greedy identity fails, naming that arm at token 1 (the first drafts are accepted in the
    step after prefill)."""
    with accept_path_broken(host.break_accept["eagle3"]):
        run = verify_json(host.inventory, "--prompts", "1", "--max-new-tokens", str(NEW_TOKENS), "--resume-steps", "1")
    assert run.exit_code == 1, run.doc
    identity = run.check("greedy token identity at concurrency 1")
    assert identity["verdict"] == "FAIL", run.doc["checks"]
    assert identity["evidence"][0].startswith("eagle3 prompt 0 ") and "differs at token 1" in identity["evidence"][0]
