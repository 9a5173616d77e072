"""bench/real_crossover.py --small on real SGLang, one route each: 0.5.10.post1 through the patch
route and 0.5.14 on its native tiers, every arm on torch_native (deploy applies the release's
eagle-torch-native set), the tier's tiny models, two levels of two short requests. The whole loop
(deploy, bench, tune --write, bench, verify, stop) through the specops CLI, its benches on the
builtin client (`--small`: bench_serving's start-up was 8-11 s of each point; the full run keeps
it). Structure only: which keys the last line carries, that every command ran, every bench
recorded one attention backend, verify passed and the servers are gone; never a throughput ratio
(the tiny models make EAGLE-3 lose everywhere on a loaded machine). On 0.5.14 this is the real
tier's only deploy of the eagle-torch-native-v2 set, so it also holds what deploy left in the
tree (test_eagle_torch_native.py holds the patch route's set to more: a warm resume, the teeth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from specops.records.manifest import Manifest
from specops.sglang.adaptive import SKIP_ZERO_STEP_EXTEND
from tests.support.deploy import events
from tests.support.real_sglang import NEWER_ENGINES_GROUP, PATCH_ROUTE_GROUP
from tests.support.real_sglang.crossover import check_loop_ran, check_tune_kept_its_word
from tests.support.real_sglang.models import ensure_models
from tests.support.real_sglang.runtime import ensure_runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
#: route -> (release, the patch set deploy applies, the adaptive mechanism)
ROUTES = {"sglang-patch": ("0.5.10.post1", "eagle-torch-native", "dynamic-spec-disable-patch"),
          "sglang-native": ("0.5.14", "eagle-torch-native-v2", "native-adaptive")}


#: each route in its runtime's xdist group (tests/support/real_sglang: one group a worker)
GROUPS = {"sglang-patch": PATCH_ROUTE_GROUP, "sglang-native": NEWER_ENGINES_GROUP}


@pytest.mark.parametrize("route", [pytest.param(r, marks=pytest.mark.xdist_group(GROUPS[r])) for r in ROUTES])
def test_the_small_configuration_runs_the_loop_on_each_sglang_route(route: str, tmp_path: Path) -> None:
    release, patch_set, mechanism = ROUTES[route]
    ensure_runtime(release)
    ensure_models()
    work = tmp_path / "work"
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "real_crossover.py"), "--small", "--route", route,
                           "--work", str(work)], capture_output=True, text=True, timeout=1700, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    assert set(doc) == {"vllm", "sglang-patch", "sglang-native"}, doc.keys()
    for other in set(doc) - {route}:
        assert doc[other] == {"infeasible": f"not run this time: `--route {other}` runs it"}, doc[other]
    run = doc[route]
    check_loop_ran(run)
    # tune --write (test_native_host.py's tune folded in here: the same tune on 0.5.14's tiers),
    # its arms beside the deployed ones, whose --nccl-port it drops: what every route's tune
    # holds to, and here the arms it added were measured and none died
    tune = check_tune_kept_its_word(run, work)
    tuned = [json.loads(line) for line in (work / "tune" / "results.jsonl").read_text().splitlines() if line]
    added = [(r["arm"], r["status"]) for r in tuned if r["arm"].startswith("adaptive-t")]
    if tune["status"] != "no-speculation":
        assert added and all(status == "ok" for _, status in added), added
    # verify passes whatever tune decided: a written threshold (1) switches; the placeholder (2, the
    # servers' max running requests) cannot, which verify says instead of failing
    assert run["verify"] is True, run.get("verify_checks")
    switch = run["verify_checks"]["drafting stopped above the threshold and resumed below it"]
    assert switch in ("PASS", "UNAVAILABLE"), run["verify_checks"]
    assert all(a and a > 1 for a in run["verify_accept_length"].values()), run["verify_accept_length"]
    # deploy applied the release's set to the tree (and only it), the patch route's threshold flag
    # only there (0.5.14's tiers need no patch), with no warning that the arms' backends differ;
    # the adaptive arm ran the release's mechanism, and stop left no server behind
    [deploy_run] = (work / "runs").glob("*-deploy-*")
    done = {e.get("step") for e in events(deploy_run) if e["event"] == "done"}
    assert {"eagle on torch_native attention", "install sglang into its environment", "launch servers"} <= done, done
    assert ("dynamic speculation disable" in done) is (route == "sglang-patch"), sorted(done)
    assert "differs between arms" not in (work / "00-deploy.log").read_text()
    tree = work / "w" / "sglang" / "python" / "sglang" / "srt"
    draft_utils = (tree / "speculative" / "draft_utils.py").read_text()
    assert f"specops {patch_set}:" in draft_utils
    if route == "sglang-native":
        assert "specops eagle-torch-native:" not in draft_utils  # the patch route's set left alone
        cache_locs = (tree / "speculative" / "triton_ops" / "cache_locs.py").read_text()
        assert "def specops_assign_draft_cache_locs_contiguous(" in cache_locs
    assert f"mechanism {mechanism}" in (work / "verify.md").read_text()
    # on both routes the adaptive arm skips the draft extend of its drafting-off steps (SGLang 0.5.14's
    # switch, which the patch route's dynamic-spec-disable honours too)
    arms = yaml.safe_load((work / "hosts.yaml").read_text())["vars"]["arms"]
    assert arms["adaptive"]["env"].get(SKIP_ZERO_STEP_EXTEND) == "1", arms["adaptive"]
    assert all(SKIP_ZERO_STEP_EXTEND not in arms[arm]["env"] for arm in ("baseline", "eagle3")), arms
    assert not list((work / "w" / ".specops" / "servers").glob("*.json"))
    # every arm on one attention backend, the comparison the eagle-torch-native sets exist for: each
    # bench's recorded server args say torch_native and no report flags a difference (before the
    # sets, on this host: adaptive=triton, baseline=torch_native, eagle3=triton)
    for bench, benched in (("bench-before", ("baseline", "eagle3")),
                           ("bench-after", ("baseline", "eagle3", "adaptive"))):
        [(_, infos)] = Manifest.from_dict(json.loads((work / bench / "manifest.json").read_text())).arm_sets()
        backends = {arm: (info.server_args or {}).get("attention_backend") for arm, info in infos.items()}
        assert backends == dict.fromkeys(benched, "torch_native"), (bench, backends)
        assert "differs between arms" not in (work / bench / "report.md").read_text(), bench
        records = [json.loads(line) for line in (work / bench / "results.jsonl").read_text().splitlines() if line]
        assert {(r["arm"], r["runner"]) for r in records} == {(arm, "builtin") for arm in benched}, (bench, records)
