"""The serving engines' registry (issue 33 point 2): one engine per host, chosen once from its
`engine:`, the same names hosts.yaml accepts, and each engine answering the protocol with what
the code it wraps says (SGLang's face for both the real server and the simulator)."""

from __future__ import annotations

from pathlib import Path

import pytest

from specops import engines
from specops.bench.running import METRICS
from specops.config import engine_registry
from specops.config.engine_registry import Feature
from specops.config.inventory import Host, load_inventory
from specops.engines import ENGINES, ServingEngine, engine_for, engine_named, engine_of
from specops.engines.metrics import DEFAULT_METRICS
from specops.engines.sglang import SGLang, Simulator
from specops.errors import ConfigError
from specops.sglang import serving
from specops.sglang.crashdata import MESSAGES
from specops.sglang.layout import DISABLE_FLAG


def test_the_registry_names_what_hosts_yaml_accepts():
    """config is below engines: it holds the declarations, and each built-in engine is its own."""
    assert tuple(ENGINES) == engine_registry.names()
    assert tuple(engines.BUILTIN) == tuple(engine_registry.BUILTIN)
    for name, engine in engines.BUILTIN.items():
        assert engine.spec is engine_registry.BUILTIN[name]
    assert engines.DEFAULT is ENGINES[Host.engine]
    assert DEFAULT_METRICS is engines.DEFAULT.metrics is METRICS  # bench.running's default


def test_every_engine_is_a_serving_engine_with_every_member():
    for name, engine in ENGINES.items():
        assert isinstance(engine, ServingEngine) and engine.name == name
        assert engine.missing_members() == []


def test_a_hosts_variables_come_from_its_engines_declaration():
    facts = {n: Host(name="h", connection="local", engine=n).facts_vars() for n in engines.BUILTIN}
    assert {n: f["simulated"] for n, f in facts.items()} == {"sglang": False, "sim": True, "vllm": False,
                                                            "sim-vllm": True}
    assert {n: f["engine_face"] for n, f in facts.items()} == {"sglang": "sglang", "sim": "sglang",
                                                              "vllm": "vllm", "sim-vllm": "vllm"}
    assert "patch-route" in facts["sim"]["engine_features"] and "patch-route" not in facts["vllm"]["engine_features"]
    assert engine_registry.with_feature(Feature.CPU) == ("sglang", "sim", "vllm", "sim-vllm")


def test_a_feature_is_checked_in_one_place_with_the_engines_reason():
    vllm, sim = engine_named("vllm"), engine_named("sim")
    sim.require(Feature.NATIVE_TIERS)  # SGLang's face has the tiers: nothing raised
    with pytest.raises(ConfigError, match="^arm .adaptive.: vLLM has no adaptive config file"):
        vllm.require(Feature.NATIVE_TIERS, where="arm 'adaptive'")
    with pytest.raises(ConfigError, match="no adaptive config file"):  # the default body checks it first
        vllm.adaptive_flags("/x.json")
    with pytest.raises(ConfigError, match="^engine sglang has no per-batch-size draft schedule$"):
        engine_named("sglang").require(Feature.BATCH_SCHEDULE)


def test_a_required_member_an_engine_lacks_raises_naming_it():
    class Half(ServingEngine):
        spec = engine_registry.EngineSpec("half", "sglang")

    half = Half()
    assert "ready_line" in half.missing_members() and "launch_module" in half.missing_members()
    with pytest.raises(NotImplementedError, match="engine half does not implement ServingEngine.layout"):
        half.layout(None)  # type: ignore[arg-type]
    assert half.launch_options({}) == [] and half.runner_name("auto") == "builtin"  # defaults, once


def test_engine_for_a_sglang_host_and_a_sim_host():
    real = engine_for(Host(name="gpu", connection="local", engine="sglang"))
    sim = engine_for(Host(name="box", connection="local", engine="sim"))
    assert isinstance(real, SGLang) and not real.simulated
    assert isinstance(sim, Simulator) and sim.simulated
    assert engine_for(Host(name="plain", connection="local")) is real  # no `engine:`: SGLang
    # the same face: one ready line, one set of crash messages, one set of metrics
    assert real.ready_line == sim.ready_line == serving.READY_LINE
    assert real.crash_messages is sim.crash_messages is MESSAGES
    assert real.metrics is sim.metrics
    assert engines.ready_lines()[0] == serving.READY_LINE  # then vLLM's (tests/unit/test_vllm_engine.py)
    assert [m for face, m in engines.crash_messages() if face == "sglang"] == list(MESSAGES)
    assert real.patch_threshold_flag == DISABLE_FLAG


def test_what_differs_between_sglang_and_the_simulator():
    real, sim = ENGINES["sglang"], ENGINES["sim"]
    assert (real.runner_name("auto"), sim.runner_name("auto")) == ("sglang", "builtin")
    assert real.runner_name("builtin") == "builtin" and sim.runner_name("sglang") == "sglang"
    flags = ["--port", "1", "--sim-time-scale", "0.5"]
    assert sim.parser_flags(flags, "w") == ["--port", "1"] and real.parser_flags(flags, "w") == flags
    assert real.launch_argv("py", ["--port", "1"], tree=None, options=(), where="w") == \
        ["py", "-m", "sglang.launch_server", "--port", "1"]
    assert sim.launch_argv("py", ["--port", "1"], tree="/t", options=["--sim-seed", "3"], where="w") == \
        ["py", "-m", "specops.sim", "--sglang-tree", "/t", "--port", "1", "--sim-seed", "3"]
    with pytest.raises(ConfigError, match="engine sim needs the SGLang tree path"):
        sim.launch_argv("py", [], tree=None, options=(), where="w")
    assert real.launch_env({"A": "1"}, cpu=True, hub_offline=True) == \
        {"SGLANG_USE_CPU_ENGINE": "1", "A": "1", "HF_HUB_OFFLINE": "1"}
    assert sim.launch_env({}, cpu=False, hub_offline=True) == {}
    assert sim.launch_options({"sim": {"time_scale": 0.05, "noise": None}}) == ["--sim-time-scale", "0.05"]
    assert real.launch_options({"sim": {"time_scale": 0.05}}) == []
    assert sim.server_python("python3", {"workdir": "/w"}, str) == "python3"
    assert real.server_python("python3", {"workdir": "/w"}, str) == "/w/venv/bin/python"


def test_engine_of_recognises_the_argv_it_launched():
    assert engine_of(["py", "-m", "specops.sim", "--sglang-tree", "/t"]) is ENGINES["sim"]
    assert engine_of(["py", "-m", "sglang.launch_server"]) is ENGINES["sglang"]
    assert engine_of(None) is engines.DEFAULT and engine_of(["other"]) is engines.DEFAULT
    assert ENGINES["sglang"].serves_metrics(["--enable-metrics"]) and not ENGINES["sim"].serves_metrics([])


def test_an_unknown_engine_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"unknown engine 'trtllm' \(sglang or sim or vllm or sim-vllm\)"):
        engine_named("trtllm", where="host x")


def test_an_unknown_engine_in_hosts_yaml_is_refused_where_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "hosts.yaml"
    path.write_text("hosts:\n  a: {connection: local, engine: vlm}\n")
    with pytest.raises(ConfigError, match=r"hosts.yaml:2: 'engine' in host 'a' must be one of sglang, sim, vllm, "
                                          r"sim-vllm.*did you mean"):
        load_inventory(path)


@pytest.mark.parametrize("name", ["sglang", "sim"])
def test_an_sglang_cpu_arm_has_fixed_memory_only_with_max_total_tokens(name):
    engine = engine_named(name)
    assert engine.cpu_memory_fixed(["x", "--max-total-tokens", "2048"], {})
    assert engine.cpu_memory_fixed(["x", "--max-total-tokens=2048"], {})
    assert not engine.cpu_memory_fixed(["x", "--mem-fraction-static", "0.05"], {"SGLANG_USE_CPU_ENGINE": "1"})


@pytest.mark.parametrize("name", ["vllm", "sim-vllm"])
def test_a_vllm_cpu_arm_has_fixed_memory_from_its_kv_cache_space(name):
    engine = engine_named(name)
    assert engine.cpu_memory_fixed([], engine.launch_env({}, cpu=True, hub_offline=False))
    assert not engine.cpu_memory_fixed([], engine.launch_env({}, cpu=False, hub_offline=False))
