"""Real SGLang 0.5.10.post1 on this machine's CPU with every arm on torch_native attention
(issue 54, point 3), through the patch route: `deploy` applies the eagle-torch-native set
because the EAGLE arms ask for torch_native, so EAGLE-3 (topk 1) and the adaptive arm
(dynamic-spec-disable's threshold) run on the baseline's attention path instead of Triton's
kernels under Triton's interpreter. `specops verify` then proves greedy identity with the
baseline below and above the threshold, drafting off and on again with the draft state kept
warm (no skip switch), and that drafts are accepted (the server's own counters), and fails
when the EAGLE arm's accept path is broken (the stand-in verify kernel's fault switch).

0.5.14's torch_native route (the eagle-torch-native-v2 set, the adaptive arm on SGLang's own
tiers) runs the same deploy and verify in its `--small` crossover
(test_real_crossover_sglang.py), which checks the tree, one attention backend in every bench
and verify's verdicts there; its switch and accept path's teeth on a real server are
test_native_host.py's (Triton), and the set's one-token verify is proved equal to
torch_native's attention in test_eagle_tail_attention.py. This module ran 0.5.14 too until
2026-12-06 (196 s of the tier's 1,103 s wall, one deploy more of what the crossover deploys).

The stand-ins (tests/support/real_sglang/standins) are the tier's usual ones: the GPU kernel
package and the two CUDA-only EAGLE tree kernels. Attention, drafting and the cache
bookkeeping are SGLang's code as the patch set leaves it.
"""

from __future__ import annotations

import json
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.arms import free_port
from tests.support.deploy import deployed, events, only_run_dir, verify_json
from tests.support.real_sglang import PATCH_ROUTE_GROUP
from tests.support.real_sglang.hosts import sglang_inventory
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import ensure_runtime
from tests.support.real_sglang.server import (
    BREAK_ACCEPT_ENV,
    accept_path_broken,
    arm_extra_args,
    arm_profile,
)
from tests.support.standin import STANDIN_VERSION, bare_repo

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(PATCH_ROUTE_GROUP), pytest.mark.timeout(900)]

ARMS = ("baseline", "eagle3", "adaptive")
THRESHOLD = 1
STEP = "eagle on torch_native attention"
NEW_TOKENS = 8
VERSION = STANDIN_VERSION


@dataclass
class Host:
    inventory: Path
    workdir: Path
    runs: Path
    ports: dict[str, int]
    deploy_output: str
    break_accept: dict[str, Path]


@pytest.fixture(scope="module")
def host(tmp_path_factory, sshd):
    python = ensure_runtime(VERSION).python
    models = ensure_models()
    tmp = tmp_path_factory.mktemp(f"real-torch-native-{VERSION}")
    ports = {arm: free_port() for arm in ARMS}
    flags = {arm: tmp / f"break-accept-{arm}" for arm in ARMS}
    arms = {}
    for arm in ARMS:
        profile = arm_profile(arm, models.target, port=ports[arm], draft=models.draft if arm != "baseline" else None)
        profile["extra_args"] = arm_extra_args(arm, attention="torch_native") + ["--decode-log-interval", "1"]
        profile["env"] = {**profile["env"], BREAK_ACCEPT_ENV: str(flags[arm])}  # type: ignore[dict-item]
        arms[arm] = profile
    arms["adaptive"]["threshold"] = THRESHOLD
    inv = sglang_inventory(tmp, sshd, models, python, repo=bare_repo(), ref=f"v{VERSION}", arms=arms)
    runs = tmp / "runs"
    with deployed(inv, runs) as res:
        yield Host(inv, tmp / "w", runs, ports, res.output, flags)


def _server_info(port: int) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=120) as resp:
        return json.loads(resp.read())


def test_deploy_patches_the_tree_and_every_arm_runs_torch_native(host: Host) -> None:
    evs = events(only_run_dir(host.runs))
    done = {e.get("step") for e in evs if e["event"] == "done"}
    # the adaptive arm's threshold is the patch route's flag
    assert {STEP, "dynamic speculation disable", "install sglang into its environment", "launch servers"} <= done, \
        sorted(done)
    tree = host.workdir / "sglang" / "python" / "sglang" / "srt"
    assert "specops eagle-torch-native:" in (tree / "speculative" / "draft_utils.py").read_text()
    for arm, port in host.ports.items():
        info = _server_info(port)
        assert (info["attention_backend"], info["device"]) == ("torch_native", "cpu"), arm
        assert info["version"] == VERSION, (arm, info["version"])
    assert _server_info(host.ports["eagle3"])["speculative_algorithm"] == "EAGLE3"
    assert _server_info(host.ports["adaptive"])["speculative_disable_batch_threshold"] == THRESHOLD
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
