"""vLLM's engines beside SGLang's: one face for the real server and its simulator, the
variables playbooks choose steps by, and the metrics names the sampler reads."""

from __future__ import annotations

import pytest

from specops import engines
from specops.bench.running import RunningSampler
from specops.config.inventory import Host
from specops.engines import ENGINES, engine_for, engine_of
from specops.errors import ConfigError
from specops.vllm import serving
from specops.vllm.crashdata import MESSAGES


def test_vllm_and_its_simulator_share_one_face():
    real = engine_for(Host(name="cpu", connection="local", engine="vllm"))
    sim = engine_for(Host(name="box", connection="local", engine="sim-vllm"))
    assert not real.simulated and sim.simulated and real.face == sim.face == "vllm"
    assert real.ready_line == sim.ready_line == serving.READY_LINE in engines.ready_lines()
    assert [m for face, m in engines.crash_messages() if face == "vllm"] == list(MESSAGES)
    assert real.metrics is sim.metrics and real.metrics.running == "vllm:num_requests_running"
    assert real.patch_threshold_flag == ""  # no patch route
    with pytest.raises(ConfigError, match="no adaptive config file"):
        real.adaptive_config(4, 3, 32)


def test_the_playbook_variables_follow_the_engines():
    facts = {n: Host(name="h", connection="local", engine=n).facts_vars() for n in ENGINES}
    assert {n for n, f in facts.items() if f["simulated"]} == {n for n, e in ENGINES.items() if e.simulated}
    assert {n: f["engine_face"] for n, f in facts.items()} == {n: e.face for n, e in ENGINES.items()}
    facts = Host(name="box", connection="local", engine="sim-vllm").facts_vars()
    assert facts["simulated"] is True and facts["engine_face"] == "vllm"
    assert Host(name="gpu", connection="local", engine="sglang").facts_vars()["simulated"] is False


def test_engine_of_tells_the_faces_apart():
    assert engine_of(["py", "-m", "specops.sim", "--vllm-tree", "/t"]) is ENGINES["sim-vllm"]
    assert engine_of(["py", "-m", "specops.sim", "--sglang-tree", "/t"]) is ENGINES["sim"]
    assert engine_of(["py", "-m", "vllm.entrypoints.openai.api_server"]) is ENGINES["vllm"]
    assert ENGINES["vllm"].runner_name("auto") == ENGINES["sim-vllm"].runner_name("auto") == "builtin"


def test_accept_length_from_vllms_counters():
    """1 + accepted / drafts over the point (vLLM's own formula), from the counters' growth."""
    sampler = RunningSampler(transport=None, log_path="/x", metrics=ENGINES["vllm"].metrics)  # type: ignore[arg-type]
    drafts, accepted = serving.METRIC_DRAFTS, serving.METRIC_ACCEPTED
    assert sampler._counted_accept({drafts: 100, accepted: 150}) is None  # the point's start
    assert sampler._counted_accept({drafts: 140, accepted: 250}) == 1 + 100 / 40
    assert sampler._counted_accept({drafts: 140, accepted: 250}) == 1 + 100 / 40


def test_stats_lines_parse_as_the_decode_lines():
    text = (serving.format_stats(10.0, 250.5, 6, 2, 0.1) + "\n"
            + serving.format_spec(120, 200, 50, 5.0, [0.8, 0.6, 0.4, 0.2]) + "\n")
    stats, spec = text.splitlines()   # every reader reads line by line: each line gives its own figure
    m = serving.DECODE_RE.search(stats)
    assert m and m.group(1) == "6" and not m.group(2) and serving.DECODE_RE.search(spec) is None
    s = serving.SPEC_RE.search(spec)
    assert s and float(s.group(1)) == pytest.approx(3.4)
