"""What specops knows about vLLM, checked against vLLM 0.32.0's own source: the schedule form
and vLLM's validation rules, the tree reader (version, schedule, flags), the crash messages,
and the launch plans of the three arms (and the adaptive arm refused on a release without the
schedule)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specops.engines import ENGINES, engine_named, engine_of
from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.servers.arms import ArmSpec
from specops.servers.launch import build_launch
from specops.vllm import crashlines, schedule
from specops.vllm.tree import detect_layout
from tests.support.vllm_trees import old_release, vllm_tree  # noqa: F401 - fixture

KEY = schedule.SCHEDULE_KEY


# ---------------------------------------------------------------- the schedule
def test_threshold_gives_two_ranges_and_its_threshold() -> None:
    plan = schedule.from_threshold(4, 3, 64)
    assert plan.schedule == [[1, 4, 3], [5, 64, 0]]
    assert plan.effective_threshold == 4
    assert schedule.lookup(plan.schedule, 8, 3)[1:] == [3, 3, 3, 3, 0, 0, 0, 0]


def test_threshold_at_the_running_limit_always_drafts() -> None:
    plan = schedule.from_threshold(8, 2, 8)
    assert plan.schedule == [[1, 8, 2]] and plan.effective_threshold is None


def test_tiers_become_ranges() -> None:
    plan = schedule.from_tiers({1: [3], 8: [1], 32: [0]}, 3, 64)
    assert plan.schedule == [[1, 7, 3], [8, 31, 1], [32, 64, 0]]
    assert plan.effective_threshold == 31
    with pytest.raises(schedule.ScheduleError, match="one K per batch range"):
        schedule.from_tiers({1: [1, 3]}, 3, 64)


@pytest.mark.parametrize(("bad", "message"), [
    ([], "must not be empty"),
    ([[2, 4, 1]], "must start at 1"),
    ([[1, 4, 1], [4, 8, 0]], "non-overlapping"),
    ([[1, 0, 1]], "must be positive"),
    ([[3, 2, 1]], "start must be <= end"),
    ([[1, 4, -1]], "must be >= 0"),
    ([[1, 4]], "3-item sequence"),
    ({"1": 2}, "non-empty list"),
])
def test_vllms_rules(bad: object, message: str) -> None:
    with pytest.raises(schedule.ScheduleError, match=message):
        schedule.validate(bad)


def test_lookup_carries_gaps_and_tail_as_vllm_does() -> None:
    # vLLM's own example: [(1, 16, 3), (32, 128, 2)] maps 17-31 to K=3; the tail keeps the last K
    dense = schedule.lookup([[1, 16, 3], [32, 40, 2]], 50, 3)
    assert dense[17] == dense[31] == 3 and dense[32] == dense[50] == 2
    assert schedule.lookup([[1, 4, 5]], 4, 2)[1:] == [2, 2, 2, 2]  # capped at num_speculative_tokens


def test_rules_are_vllms_own(vllm_tree: Path) -> None:  # noqa: F811
    """Our validation agrees with the release's function on good and bad schedules alike."""
    src = (vllm_tree / "vllm/v1/spec_decode/dynamic/utils.py").read_text()
    ns: dict[str, object] = {}
    exec(compile(src, "utils.py", "exec"), ns)  # the file imports nothing
    theirs = ns["build_dynamic_sd_schedule_lookup"]
    cases: list[object] = [[[1, 4, 3], [5, 64, 0]], [[1, 16, 3], [32, 40, 2]], [[2, 4, 1]], [[1, 4, 1], [4, 8, 0]],
                           [[1, 0, 1]], [], [[1, 4, -1]], [[1, 8, 2]], [[5, 9, 0], [1, 4, 2]]]
    for case in cases:
        try:
            want = theirs(case, 32, 3)  # type: ignore[operator]
        except ValueError:
            with pytest.raises(schedule.ScheduleError):
                schedule.lookup(case, 32, 3)
        else:
            assert schedule.lookup(case, 32, 3) == want, case


# ---------------------------------------------------------------- the tree
def test_tree_reader(vllm_tree: Path) -> None:  # noqa: F811
    layout = detect_layout(LocalTreeFiles(vllm_tree))
    assert layout.version == "0.32.0" and layout.has_schedule and layout.schedule_refusal() is None
    assert layout.flags is not None
    for flag in ("--model", "--port", "--host", "--speculative-config", "--max-num-seqs", "--served-model-name",
                 "--dtype", "--max-model-len", "--enforce-eager"):
        assert layout.flags.has_flag(flag), flag
    assert layout.flags.check(["--model", "m", "--max-num-seqs", "8"]) is None
    assert "unrecognized arguments: --max-running-requests" in str(
        layout.flags.check(["--model", "m", "--max-running-requests", "8"]))


def test_crash_messages_are_in_the_release(vllm_tree: Path) -> None:  # noqa: F811
    assert crashlines.missing(LocalTreeFiles(vllm_tree)) == []


def test_a_changed_message_is_found_missing(vllm_tree: Path, tmp_path: Path) -> None:  # noqa: F811
    for rel in ("v1/engine/utils.py", "v1/engine/core.py", "v1/engine/exceptions.py", "v1/utils.py",
                "v1/executor/multiproc_executor.py"):
        (tmp_path / "vllm" / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (vllm_tree / "vllm" / rel).read_text()
        (tmp_path / "vllm" / rel).write_text(text.replace("EngineCore failed to start.", "EngineCore did not start."))
    assert crashlines.missing(LocalTreeFiles(tmp_path)) == ["'EngineCore failed to start.' (v1/engine/core.py)"]


# ---------------------------------------------------------------- launch plans
def _arm(kind: str, **kw: object) -> ArmSpec:
    base: dict[str, object] = dict(name=kind, kind=kind, model="/m/target", port=31000, max_running_requests=32,
                                   cuda_graph_max_bs=32, device="cpu")
    if kind != "baseline":
        base.update(draft_model="/m/draft", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    if kind == "adaptive":
        base["threshold"] = 6
    base.update(kw)
    return ArmSpec(**base)  # type: ignore[arg-type]


def _spec_config(argv: list[str]) -> dict[str, object]:
    return json.loads(argv[argv.index("--speculative-config") + 1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("engine", ["vllm", "sim-vllm"])
def test_three_arms(vllm_tree: Path, engine: str) -> None:  # noqa: F811
    layout = engine_named(engine).layout(LocalTreeFiles(vllm_tree))
    plans = {kind: build_launch(_arm(kind), layout, workdir="/w", python="/py", engine=engine,
                                sglang_tree=str(vllm_tree)) for kind in ("baseline", "eagle3", "adaptive")}
    base = plans["baseline"].argv
    assert "--speculative-config" not in base and base[base.index("--max-num-seqs") + 1] == "32"
    assert _spec_config(plans["eagle3"].argv) == {"method": "eagle3", "model": "/m/draft", "num_speculative_tokens": 3}
    adaptive = plans["adaptive"]
    assert _spec_config(adaptive.argv)[KEY] == [[1, 6, 3], [7, 32, 0]]
    assert adaptive.mechanism == "native-schedule" and adaptive.effective_threshold == 6
    assert all(engine_of(p.argv) is ENGINES[engine] for p in plans.values())
    if engine == "vllm":
        assert base[:3] == ["/py", "-m", "vllm.entrypoints.openai.api_server"]
        assert plans["baseline"].env["VLLM_TARGET_DEVICE"] == "cpu"
    else:
        assert base[:5] == ["/py", "-m", "specops.sim", "--vllm-tree", str(vllm_tree)]


def test_adaptive_refused_on_a_release_without_the_schedule(vllm_tree: Path, tmp_path: Path) -> None:  # noqa: F811
    old = old_release(vllm_tree, tmp_path)
    layout = engine_named("vllm").layout(LocalTreeFiles(old))
    build_launch(_arm("eagle3"), layout, workdir="/w", engine="vllm")  # EAGLE-3 still runs there
    with pytest.raises(ConfigError, match=r"vLLM 0\.11\.0 has no dynamic speculative decoding") as exc:
        build_launch(_arm("adaptive"), layout, workdir="/w", engine="vllm", where="host h, arm 'adaptive'")
    assert exc.value.where == "host h, arm 'adaptive'"


def test_bad_flag_and_bad_schedule_refused(vllm_tree: Path) -> None:  # noqa: F811
    layout = engine_named("vllm").layout(LocalTreeFiles(vllm_tree))
    with pytest.raises(ConfigError, match="would refuse this launch: unrecognized arguments: --speculative-num-steps"):
        build_launch(_arm("baseline", extra_args=["--speculative-num-steps", "3"]), layout, workdir="/w",
                     engine="vllm")
    with pytest.raises(ConfigError, match="one K per batch range"):
        build_launch(_arm("adaptive", tiers={1: [1, 3]}), layout, workdir="/w", engine="vllm")


def test_adjacent_string_literals_are_joined_as_python_joins_them() -> None:
    src = 'e = Exception(\n    "WorkerProc initialization failed due to an exception in a "\n    f"background process. See"\n)'
    assert "in a background process. See" in crashlines.joined(src)
    assert crashlines.joined('a = "x"\nb = "y"') == 'a = "x"\nb = "y"'  # two statements stay two
