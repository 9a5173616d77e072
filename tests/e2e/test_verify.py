"""Issue 23: `specops verify --host H`, the acceptance check a user runs after `deploy`,
against simulated arms on the `local` host and over the real sshd. The simulator's
/generate returns greedy `output_ids` that depend on the prompt and the simulated model
(`--sim-seed`) only, as real SGLang's do; a baseline launched with another seed is a model
that decodes other tokens, which verify must catch."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from specops.bench.acceptance import Acceptance
from specops.decide.verify import RESUME_FLOOR
from specops.report.verify import (
    Check,
    Verification,
    accept_check,
    drafting_check,
    report_markdown,
    resumed_check,
    transitions_check,
)
from specops.secrets import remember
from specops.servers.lifecycle import ServerState
from specops.sglang.adaptive import transition_line
from tests.support.arms import arm_vars, sim_inventory
from tests.support.deploy import run_cli, write_yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = str(REPO / "playbooks/deploy.yaml")
#: the simulator at its model's own speed: the threshold+2 requests sent at once overlap in
#: one decode batch however loaded this machine is (at 0.05 a request lasts a few ms)
REAL_TIME = {"time_scale": 0.05}


def deployed(inv: Path, host: str) -> None:
    res = run_cli("deploy", "--host", host, "-i", str(inv), "-p", DEPLOY)
    assert res.exit_code == 0, res.output


def checks(doc: dict) -> dict[str, str]:
    return {c["name"]: c["verdict"] for c in doc["checks"]}


#: a `Decode batch` line per step: the adaptive arm's acceptance either side of an off stretch
EVERY_STEP = {"extra_args": ["--decode-log-interval", "1"]}


def test_verify_passes_on_a_deployed_local_host_and_writes_the_report(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, name="local", sim=REAL_TIME,
                        arms=arm_vars(adaptive=EVERY_STEP)["arms"])
    try:
        before = run_cli("verify", "--host", "local", "-i", str(inv))
        assert before.exit_code == 1 and "not ready" in before.output and "specops deploy --host local" in before.output
        deployed(inv, "local")
        out = tmp_path / "verify.md"
        res = run_cli("verify", "--host", "local", "-i", str(inv), "--out", str(out), "--json")
    finally:
        run_cli("stop", "--host", "local", "-i", str(inv))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["ok"] and doc["threshold"] == 8 and doc["report"] == str(out)
    assert checks(doc) == {
        "/server_info of the three arms": "PASS", "greedy token identity at concurrency 1": "PASS",
        "greedy token identity at concurrency 10 (above the threshold)": "PASS",
        "drafting stopped above the threshold and resumed below it": "PASS", "drafted tokens accepted": "PASS",
        "acceptance after drafting resumed": "PASS"}
    assert {k: a["mechanism"] for k, a in doc["arms"].items()} == {
        "baseline": "none", "eagle3": "eagle3", "adaptive": "dynamic-spec-disable-patch"}
    assert all(a["info"]["version"] == "0.5.10.post1" for a in doc["arms"].values())
    for kind in ("eagle3", "adaptive"):  # the requests' own counts: 3 + 1 requests of 8 tokens alone
        acc = doc["arms"][kind]["acceptance"]
        assert acc["requests"] == 4 and acc["tokens"] == 32 and acc["accepted_drafts"] > 0, acc
        assert acc["accept_length"] == round(32 / acc["verify_steps"], 4) > 2, acc
        assert doc["arms"][kind]["server_accept_length"] > 1
    # the simulator drafts as well after a resume as before: its accept model has no cache to go stale;
    # the long request of the 10 ran on alone, so drafting resumed in the middle of it
    [stretch] = doc["arms"]["adaptive"]["off_stretches"]
    assert stretch["off_batch"] > 8 and stretch["on_batch"] == 1 and len(stretch["after"]) == 8, stretch
    assert stretch["ratio"] >= RESUME_FLOOR and len(stretch["before"]) >= 3, stretch
    report = out.read_text()
    assert report.startswith("# specops verify: local") and "Result: **PASS**" in report
    assert "SGLang 0.5.10.post1 (simulated)" in report and "- driver:" in report and "- CPU:" in report
    # the evidence: the transition lines with their timestamps, off above 8 and on below it
    off = next(ln for ln in report.splitlines() if "drafting off" in ln)
    match = re.search(r"^\[20\d\d-.*\] specops adaptive: drafting off \(running batch (\d+) > threshold 8\)"
                      r"(\[model t=[\d.]+s\])?$", off)  # the simulator stamps its model clock
    assert match and int(match[1]) > 8, off
    assert any("drafting on (running batch 1 <= threshold 8)" in ln for ln in report.splitlines())
    assert json.loads(out.with_suffix(".json").read_text())["ok"] is True


def test_verify_fails_naming_the_check_when_baseline_decodes_other_tokens(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, name="local", sim=REAL_TIME)
    data = yaml.safe_load(inv.read_text())
    data["vars"]["arms"]["baseline"]["extra_args"] = ["--sim-seed", "7"]  # another model, other greedy tokens
    write_yaml(inv, data)
    try:
        deployed(inv, "local")
        res = run_cli("verify", "--host", "local", "-i", str(inv), "--prompts", "1", "--max-new-tokens", "4")
    finally:
        run_cli("stop", "--host", "local", "-i", str(inv))
    assert res.exit_code == 1, res.output
    assert "FAIL greedy token identity at concurrency 1" in res.output
    assert "FAILED: greedy token identity at concurrency 1, greedy token identity at concurrency 10" in \
        " ".join(res.output.split())
    assert "eagle3 prompt 0 'Speculative decoding': differs at token 0" in res.output
    report = next((tmp_path / "runs").glob("*-verify-*/verify.md")).read_text()
    assert "### FAIL: greedy token identity at concurrency 1" in report
    assert "### PASS: drafting stopped above the threshold and resumed below it" in report


@pytest.mark.slow
def test_verify_and_status_see_ready_arms_whose_health_answers_slowly(tmp_path: Path) -> None:
    """The real-SGLang tier's verify once refused its adaptive arm as "starting": SGLang's
    /health runs a one-token generation, which a busy host answers in more than the 3 s a
    probe waited. The simulator's /health here takes 4 s once ready."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, name="local",
                        sim={**REAL_TIME, "slow_health": 4})
    try:
        deployed(inv, "local")
        status = run_cli("status", "--host", "local", "-i", str(inv), "--json")
        res = run_cli("verify", "--host", "local", "-i", str(inv), "--prompts", "1", "--max-new-tokens", "4", "--json")
    finally:
        run_cli("stop", "--host", "local", "-i", str(inv))
    assert status.exit_code == 0, status.output
    assert {s["arm"]: (s["state"], s["health"]) for s in json.loads(status.output)["local"]} == {
        a: ("ready", "200") for a in ("baseline", "eagle3", "adaptive")}, status.output
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["ok"], res.output


def test_verify_over_ssh_reaches_the_arms_through_the_connection(tmp_path: Path, sshd) -> None:
    inv = sim_inventory(tmp_path, sshd.host_entry(3, workdir=str(tmp_path / "w")), sim=REAL_TIME,
                        arms=arm_vars(threshold=2)["arms"])
    try:
        deployed(inv, "gpu")
        res = run_cli("verify", "--host", "gpu", "-i", str(inv), "--json")
    finally:
        run_cli("stop", "--host", "gpu", "-i", str(inv))
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert checks(doc)["greedy token identity at concurrency 4 (above the threshold)"] == "PASS"
    assert checks(doc)["drafting stopped above the threshold and resumed below it"] == "PASS"
    # SGLang's default: a Decode batch line every 40 steps, too few to see a resume's first steps
    resumed = next(c for c in doc["checks"] if c["name"] == "acceptance after drafting resumed")
    assert resumed["verdict"] == "UNAVAILABLE" and "--decode-log-interval 1" in resumed["detail"], resumed
    assert Path(doc["report"]).is_file() and Path(doc["report"]).is_relative_to(tmp_path / "runs")


def test_bad_host_is_bad_input(tmp_path: Path) -> None:
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")}, name="local", sim=REAL_TIME)
    res = run_cli("verify", "--host", "nosuch", "-i", str(inv))
    assert res.exit_code == 2 and "nosuch" in res.output


def test_transitions_without_drafting_back_on_fail_and_quote_the_lines() -> None:
    log = f"[2026-01-01 00:00:01 TP0] {transition_line(False, 5, 3)}\n[2026-01-01 00:00:02] Decode batch\n"
    check = transitions_check(log, 3)
    assert check.ok is False and "never came back on" in check.detail
    assert check.evidence == [f"[2026-01-01 00:00:01 TP0] {transition_line(False, 5, 3)}"]
    assert transitions_check("", 3).ok is False
    assert transitions_check(log + f"[x] {transition_line(True, 1, 3)}\n", 3).ok is True


def test_the_report_masks_secrets() -> None:
    remember("hf_verysecretvalue1234")
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=1,
                     checks=[Check("c", False, "token hf_verysecretvalue1234 HF_TOKEN=abc123xyz", ["x"])])
    text = report_markdown(v)
    assert "hf_verysecretvalue1234" not in text and "abc123xyz" not in text and "FAIL: c" in text


def test_a_native_adaptive_arm_makes_the_log_evidence_unavailable_not_failed() -> None:
    state = _state("native-adaptive")
    check = drafting_check(state, None, 8)
    assert check.ok is None and check.verdict == "UNAVAILABLE" and "native-adaptive" in check.detail
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=1, checks=[check])
    assert v.ok and "### UNAVAILABLE: drafting stopped" in report_markdown(v)
    assert resumed_check(v, state, None).verdict == "UNAVAILABLE"


def _decode(running: int, accept: float | None, tokens: int = 40) -> str:
    figures = f"accept len: {accept:.2f}, accept rate: 0.75, " if accept is not None else \
        "drafting off (one-token verify, no accept figures), "
    return (f"[2026-12-03 10:00:00 TP0] Decode batch, #running-req: {running}, #token: {tokens}, token usage: 0.01, "
            f"{figures}cuda graph: False, gen throughput (token/s): 2.00, #queue-req: 0, ")


def _adaptive_log(resumed: list[float]) -> str:
    """A patched adaptive server's lines around one off stretch (threshold 1), as SGLang 0.5.10.post1
    writes them with --decode-log-interval 1: a request's last step, cut short by max_new_tokens,
    frees its KV (`#token: 0`); the step logged with the on transition still counts the requests
    that finished in it."""
    lines = [_decode(1, 3.0), _decode(1, 3.0), _decode(1, 2.0), _decode(1, 1.0, tokens=0),
             f"[2026-12-03 10:00:01 TP0] {transition_line(False, 3, 1)}", _decode(3, None), _decode(3, None),
             f"[2026-12-03 10:00:02 TP0] {transition_line(True, 1, 1)}", _decode(3, 1.0),
             *[_decode(1, a) for a in resumed]]
    return "\n".join(lines) + "\n"


def _state(mechanism: str = "dynamic-spec-disable-patch") -> ServerState:
    return ServerState(arm="adaptive", kind="adaptive", pid=1, pgid=1, proc_start="1", port=1, command="",
                       argv=[], env={}, args_hash="", log_path="/x.log", state_path="", started_at=0.0,
                       mechanism=mechanism, workdir="/")


def test_acceptance_that_drops_after_drafting_resumes_fails_the_check_quoting_both_sides() -> None:
    """A draft KV cache left stale while drafting was off: the steps right after the resume
    accept fewer drafts; the identity of the tokens need not change, so only this shows it."""
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=8, threshold=1,
                     arms={"adaptive": {}})
    stale = resumed_check(v, _state(), _adaptive_log([1.0, 1.5, 2.0, 3.0, 3.0]), steps=3)
    assert stale.ok is False and f"below {RESUME_FLOOR}x" in stale.detail, stale
    # the before side leaves out the request's last step (`#token: 0`: cut by the token limit)
    assert stale.evidence == ["off at running batch 3, on at running batch 1; accept length before 2.67 (3 steps), "
                              "after 1.50 (3 steps): 0.56x (at most 0.78x within two standard errors)"]
    assert v.arms["adaptive"]["off_stretches"] == [{"off_batch": 3, "on_batch": 1, "before": [3.0, 3.0, 2.0],
                                                    "after": [1.0, 1.5, 2.0], "ratio": 0.5625, "ratio_bound": 0.7790}]
    fresh = resumed_check(v, _state(), _adaptive_log([3.0, 3.0, 2.0, 1.0]), steps=3)
    assert fresh.ok is True and fresh.evidence[0].endswith("after 2.67 (3 steps): 1.00x (at most 1.25x within two "
                                                           "standard errors)"), fresh
    # a real head's step-to-step spread: a mean below 0.9x that the steps' noise covers passes
    noisy = resumed_check(v, _state(), _adaptive_log([3.0, 1.0, 3.0]), steps=3)
    assert noisy.ok is True and "0.88x" in noisy.evidence[0], noisy
    # lines every 40 steps: nothing logged right after the resume
    sparse = resumed_check(v, _state(), _adaptive_log([]))
    assert sparse.ok is None and "--decode-log-interval 1" in sparse.detail


def test_an_arm_that_accepts_no_drafted_token_fails_the_check() -> None:
    v = Verification(host="h", specops_version="0", prompts=1, max_new_tokens=8,
                     arms={"eagle3": {"server_accept_length": None}, "adaptive": {"server_accept_length": 2.5}})
    drafting, wasted, silent = Acceptance(), Acceptance(), Acceptance()
    drafting.requests, drafting.tokens, drafting.verify_steps = 2, 16, 6  # 8 drafts accepted
    wasted.requests, wasted.tokens, wasted.verify_steps = 2, 16, 14  # each verify committed the target's token only
    assert (drafting.accepted_drafts, wasted.accepted_drafts) == (8, 0)
    check = accept_check(v, {"eagle3": wasted, "adaptive": drafting})
    assert check.ok is False and check.detail.startswith("eagle3 accepted none of its drafted tokens"), check
    assert accept_check(v, {"eagle3": drafting, "adaptive": drafting}).ok is True
    silent.requests, silent.tokens, silent.reported = 2, 16, False  # a server that does not count
    assert accept_check(v, {"eagle3": drafting, "adaptive": silent}).ok is None
