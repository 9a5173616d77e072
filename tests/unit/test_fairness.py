"""One fairness rule for `deploy` (the server step's live /server_info) and `report.md`
(the server args the sweep recorded in manifest.json)."""

from __future__ import annotations

from typing import Any

from specops.launchargs import args_from_argv
from specops.report.markdown import render_markdown
from specops.report.summary import summarize
from specops.servers import fairness_warnings as deploy_warnings
from specops.servers.fairness import IGNORED_KEYS, ignored

# /server_info of two arms as SGLang reports it, trimmed. Before the fairness rule had one
# home, deploy's list ignored `version`, `last_gen_throughput`, `memory_usage` and `status`
# (runtime state, different on every server) while the report's did not, and the report's
# list ignored `log_requests` while deploy's did not: the same two servers drew different
# warnings from `specops deploy` and from report.md.
BASELINE: dict[str, Any] = {
    "model_path": "meta-llama/Llama-3.1-8B-Instruct", "port": 30000, "tp_size": 1,
    "max_running_requests": 64, "cuda_graph_max_bs": 64, "log_requests": False,
    "speculative_algorithm": None, "version": "0.5.10.post1", "status": "ready",
    "last_gen_throughput": 701.5, "memory_usage": {"weight": 15.1, "kvcache": 48.8},
    "internal_states": [{"avg_spec_accept_length": 0.0}],
}
EAGLE3: dict[str, Any] = {
    **BASELINE, "port": 30001, "max_running_requests": 48, "log_requests": True,
    "speculative_algorithm": "EAGLE3", "speculative_num_steps": 3, "status": "busy",
    "last_gen_throughput": 354.2, "memory_usage": {"weight": 15.9, "kvcache": 44.0},
    "internal_states": [{"avg_spec_accept_length": 2.7}],
}


def _report_warnings(infos: dict[str, dict[str, Any]]) -> list[str]:
    """What report.md says about these servers, with the manifest written as the sweep writes it."""
    manifest = {"arms": {arm: {"server_args": {k: v for k, v in info.items() if k != "internal_states"},
                               "argv": ["python3", "-m", "sglang.launch_server"]}
                         for arm, info in infos.items()}}
    return summarize([], manifest).warnings


def test_deploy_and_report_warn_about_the_same_things() -> None:
    infos = {"baseline": BASELINE, "eagle3": EAGLE3}
    deploy = deploy_warnings(infos)
    assert deploy == ["max_running_requests differs between arms: baseline=64, eagle3=48"]
    assert _report_warnings(infos) == deploy


def test_a_key_ignored_by_one_old_list_only_is_judged_the_same_way() -> None:
    for key, a, b in (("last_gen_throughput", 1.0, 2.0), ("log_requests", False, True),
                      ("version", "0.5.10", "0.5.10.post1"), ("tp_size", 1, 2)):
        infos = {"baseline": {**BASELINE, key: a}, "eagle3": {**BASELINE, key: b}}
        assert _report_warnings(infos) == deploy_warnings(infos), key
    assert deploy_warnings({"baseline": {**BASELINE, "tp_size": 1}, "eagle3": {**BASELINE, "tp_size": 2}}) == \
        ["tp_size differs between arms: baseline=1, eagle3=2"]


def test_ignored_keys_are_placement_labels_and_runtime_state_not_workload() -> None:
    assert ignored("speculative_num_steps") and ignored("sim_arm") and ignored("port")
    for key in ("max_running_requests", "cuda_graph_max_bs", "model_path", "tp_size", "mem_fraction_static",
                "chunked_prefill_size", "disable_radix_cache"):
        assert not ignored(key) and key not in IGNORED_KEYS


def test_argv_values_compare_equal_to_resolved_values() -> None:
    """An arm recorded only by its argv ('256') is not flagged against one with server_args (256)."""
    assert args_from_argv(["x", "--max-running-requests", "256", "--mem-fraction-static=0.8", "--enable-x"]) == \
        {"max_running_requests": 256, "mem_fraction_static": 0.8, "enable_x": True}
    manifest = {"arms": {"baseline": {"server_args": {"max_running_requests": 256}},
                         "eagle3": {"argv": ["python3", "-m", "sglang.launch_server", "--max-running-requests",
                                             "256", "--speculative-algorithm", "EAGLE3"]}}}
    assert summarize([], manifest).warnings == []


def test_no_cuda_graph_warning_when_every_arm_runs_without_cuda_graphs() -> None:
    """Issue 38: `cuda_graph_bs differs` meant nothing on a run where every arm had
    `--disable-cuda-graph` (measured on real SGLang 0.5.8 on a CPU host)."""
    off = {"disable_cuda_graph": True}
    infos = {"baseline": {**BASELINE, **off, "cuda_graph_bs": [1, 2, 4], "cuda_graph_max_bs": 4},
             "eagle3": {**EAGLE3, **off, "max_running_requests": 64, "cuda_graph_bs": [1, 2], "cuda_graph_max_bs": 2}}
    assert deploy_warnings(infos) == []
    assert _report_warnings(infos) == []
    on_one = {**infos, "eagle3": {**infos["eagle3"], "disable_cuda_graph": False}}
    assert any(w.startswith("cuda_graph_bs differs") for w in deploy_warnings(on_one))


def test_an_attention_backend_or_device_difference_is_in_the_reports_headline() -> None:
    """Issue 38: a baseline on torch_native against EAGLE arms on triton (a CPU host) measured
    the backends, not speculation; the report's headline says so."""
    infos = {"baseline": {**BASELINE, "attention_backend": "torch_native", "device": "cpu"},
             "eagle3": {**EAGLE3, "max_running_requests": 64, "attention_backend": "triton", "device": "cpu"}}
    manifest = {"arms": {arm: {"server_args": info, "argv": ["python3"]} for arm, info in infos.items()}}
    summary = summarize([], manifest)
    lines = [ln for ln in summary.headline if "attention_backend differs" in ln]
    assert len(lines) == 1 and "baseline=torch_native, eagle3=triton" in lines[0]
    assert "not speculation alone" in lines[0] and "CPU" in lines[0]
    assert any("attention_backend differs" in w for w in summary.warnings)
    assert "attention_backend differs" in render_markdown(summary, manifest).split("## Headline")[1].split("##")[0]
    same = {arm: {**info, "attention_backend": "triton"} for arm, info in infos.items()}
    same_manifest = {"arms": {arm: {"server_args": info} for arm, info in same.items()}}
    assert not [ln for ln in summarize([], same_manifest).headline if "differs" in ln]
