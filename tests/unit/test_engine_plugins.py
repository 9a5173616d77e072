"""Engines registered by entry points (group `specops.engines`), read the way an installed
package's are: a `*.dist-info` folder with its entry_points.txt on sys.path, and the module it
names beside it. Each test's plugin has its own name; the registry reads the entry points again
before and after (`engine_registry.forget`)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Iterator

import pytest

from specops import steps
from specops.config import engine_registry
from specops.config.engine_registry import Feature
from specops.config.inventory import Host, load_inventory
from specops.engines import ENGINES, engine_named, engine_of
from specops.engines.sglang import Simulator
from specops.errors import ConfigError
from specops.servers import recordfile
from specops.servers.records import ServerState
from tests.support.deploy import inventory


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    engine_registry.forget()
    yield tmp_path
    engine_registry.forget()


def install(site: Path, dist: str, module: str, source: str, entry_points: dict[str, str]) -> None:
    """A package as pip leaves it: the module, and its dist-info with METADATA and entry points."""
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[specops.engines]\n" + "".join(f"{k} = {v}\n"
                                                                       for k, v in entry_points.items()))


GOOD = """
    from specops.engines import EngineSpec, Feature
    from specops.engines.sglang import Simulator

    class Mine(Simulator):
        spec = EngineSpec("{name}", face="sglang", features=frozenset({{Feature.SIMULATED}}))
        title = "Mine"

    ENGINE = Mine()
"""


def test_an_instance_registered_by_an_entry_point_is_an_engine(site: Path, tmp_path: Path) -> None:
    install(site, "mine-engine", "mine_one", GOOD.format(name="mine-one"), {"mine-one": "mine_one:ENGINE"})
    assert engine_registry.names()[-1] == "mine-one" and "mine-one" in ENGINES
    engine = engine_named("mine-one")
    assert isinstance(engine, Simulator) and engine.title == "Mine" and engine.simulated
    assert engine is ENGINES["mine-one"]
    assert engine_registry.spec("mine-one").plugin == "mine-engine (mine_one:ENGINE)"
    facts = Host(name="h", connection="local", engine="mine-one").facts_vars()
    assert (facts["simulated"], facts["engine_face"], facts["engine_features"]) == (True, "sglang", ["simulated"])
    # hosts.yaml accepts it; `device: cpu` is refused: it does not declare Feature.CPU
    path = inventory(tmp_path, {"a": {"connection": "local", "engine": "mine-one"}})
    assert load_inventory(path).hosts["a"].engine == "mine-one"
    path = inventory(tmp_path, {"a": {"connection": "local", "engine": "mine-one", "device": "cpu"}})
    with pytest.raises(ConfigError, match=r"hosts.yaml:\d+: host 'a': device cpu needs engine sglang or sim or "
                                          r"vllm or sim-vllm, got 'mine-one'"):
        load_inventory(path)
    assert "mine-one" not in engine_registry.with_feature(Feature.CPU)


def test_a_class_is_made_an_engine_and_a_builtins_name_stays_the_builtins(site: Path) -> None:
    install(site, "mine-engine", "mine_two", GOOD.format(name="mine-two"),
            {"mine-two": "mine_two:Mine", "sim": "mine_two:Mine"})
    assert type(engine_named("mine-two")).__name__ == "Mine"
    assert engine_named("sim").title == "SGLang" and engine_registry.names().count("sim") == 1


@pytest.mark.parametrize(("source", "target", "message"), [
    ("X = 1\n", "mine_bad1:X", "declares no EngineSpec \\(its `spec` attribute\\): it is not a ServingEngine"),
    (GOOD.format(name="other"), "mine_bad2:Mine", "names itself 'other' in its spec"),
    ("from specops.engines import EngineSpec\nclass Half:\n    spec = EngineSpec('mine-bad', 'sglang')\n",
     "mine_bad3:Half", "is not a ServingEngine \\(type\\)"),
    ("from specops.engines import EngineSpec, ServingEngine\n"
     "class Half(ServingEngine):\n    spec = EngineSpec('mine-bad', 'sglang')\n    title = 'Half'\n",
     "mine_bad4:Half", "does not set ready_line, crash_messages, metrics, tree_marker, tree_name, client_api"),
    ("raise RuntimeError('needs a GPU driver')\n", "mine_bad5:X",
     "cannot be loaded: RuntimeError: needs a GPU driver"),
])
def test_a_broken_plugin_is_refused_naming_it(site: Path, source: str, target: str, message: str) -> None:
    install(site, "mine-engine", target.split(":")[0], source, {"mine-bad": target})
    with pytest.raises(ConfigError, match=f"^host x: engine plugin mine-engine \\({target}\\) registered as "
                                          f"'mine-bad' (.* )?{message}"):
        engine_named("mine-bad", where="host x")  # the spec is read with `where` too


def test_an_unknown_engine_names_the_plugins_too(site: Path) -> None:
    install(site, "mine-engine", "mine_three", GOOD.format(name="mine-three"), {"mine-three": "mine_three:Mine"})
    with pytest.raises(ConfigError, match=r"unknown engine 'trtllm' \(sglang or sim or vllm or sim-vllm or "
                                          r"mine-three\)"):
        engine_named("trtllm")


def test_a_server_is_the_engine_its_state_file_names_though_its_argv_is_the_simulators(site: Path) -> None:
    """A plugin subclassing the simulator launches what the simulator launches, so only the state
    file's `engine` tells its servers apart (verify, status and the runners word them by it)."""
    install(site, "mine-engine", "mine_four", GOOD.format(name="mine-four"), {"mine-four": "mine_four:Mine"})
    argv = ["python3", "-m", "specops.sim", "--sglang-tree", "/t"]
    assert engine_named("mine-four").launched(argv)  # the same launch command as the simulator's
    assert engine_of(argv, "mine-four").title == "Mine"
    assert engine_of(argv) is ENGINES["sim"]  # an older state file, no name: recognised by argv
    assert engine_of(argv, "uninstalled-engine") is ENGINES["sim"]
    state = ServerState(arm="a", kind="eagle3", pid=1, pgid=1, proc_start="", port=1, command="", argv=argv,
                        env={}, args_hash="", log_path="", state_path="", mechanism="", started_at=0.0,
                        workdir="/w", engine="mine-four")
    assert recordfile.load(ServerState, state.to_json()).engine == "mine-four"


# --- an engine's own step kinds and deploy steps (specops.steps.load) ----------------------

STEPS = """
    from specops.engines import EngineSpec, Feature
    from specops.engines.sglang import Simulator
    from specops.steps.base import Outcome, StepKind

    class Own(StepKind):
        name = "{kind}"
        keys = ("path",)
        required = ("path",)

        def apply(self, ctx):
            return Outcome()

    class Mine(Simulator):
        spec = EngineSpec("{name}", face="sglang", features=frozenset({{Feature.SIMULATED}}))
        title = "Mine"

        def step_kinds(self):
            return {{"{kind}": Own}}

        def deploy_steps(self):
            return [{step}]
"""
DEPLOY = Path(__file__).resolve().parents[2] / "specops/data/playbooks/deploy.yaml"


@pytest.fixture
def kinds(monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    """The registry `load` adds an engine's kinds to, fresh for each test (the built-ins' only)."""
    fresh: dict[str, object] = dict(steps.BUILTIN)
    monkeypatch.setattr(steps, "KINDS", fresh)
    return fresh


def test_an_engines_own_step_runs_where_the_placeholder_stands_on_its_hosts_only(site: Path, kinds: dict) -> None:
    step = '{"name": "mine stamp", "mine_stamp": {"path": "{{ workdir }}/m"}, "when": "not check"}'
    install(site, "mine-engine", "mine_steps", STEPS.format(name="mine-steps", kind="mine_stamp", step=step),
            {"mine-steps": "mine_steps:Mine"})
    builtin = steps.load(DEPLOY, [Host(name="b", engine="sim")])
    book = steps.load(DEPLOY, [Host(name="a", engine="mine-steps"), Host(name="b", engine="sim")])
    names = [s.name for s in book.steps]
    at = names.index("mine stamp")
    assert names[:at] + names[at + 1:] == [s.name for s in builtin.steps]   # nothing else moved
    assert names[at + 1] == "model weights" and book.steps[at].index == at and book.steps[at + 1].index == at + 1
    assert book.steps[at].when == "engine == 'mine-steps' and (not check)"   # run on its hosts only
    assert book.steps[at].kind == "mine_stamp" and type(kinds["mine_stamp"]).__name__ == "Own"
    assert "mine_stamp" not in steps.BUILTIN


@pytest.mark.parametrize(("kind", "step", "message"), [
    ("shell", "{}", r": step kind 'shell' collides with specops's built-in step kind 'shell'"),
    ("mine_x", '{"name": "mine x", "mine_x": {"paht": "/m"}}',
     r"'s deploy_steps: unknown key 'paht' in step 1 'mine x' \(mine_x\)"),
    ("mine_y", '{"name": "mine y", "mine_z": {}}', r"'s deploy_steps: step 1: unknown step kind 'mine_z'"),
    ("mine_w", '__import__("acme_runtime")', r": deploy_steps\(\) failed: ModuleNotFoundError: No module named 'acme_runtime'"),
])
def test_an_engines_colliding_kind_or_malformed_step_is_refused_naming_the_plugin(
        site: Path, kinds: dict, kind: str, step: str, message: str) -> None:
    module, name = f"mine_bad_{kind}", f"mine-bad-{kind}".replace("_", "-")   # one name each: loaded engines are kept
    install(site, "mine-engine", module, STEPS.format(name=name, kind=kind, step=step), {name: f"{module}:Mine"})
    with pytest.raises(ConfigError, match=rf"^(.*: )?engine plugin mine-engine \({module}:Mine\){message}"):
        steps.load(DEPLOY, [Host(name="a", engine=name)])
    assert kinds.keys() == steps.BUILTIN.keys()   # nothing of a refused engine's was registered
