"""The dynamic-spec-disable set's worker code on real release trees (issue 21).

What runs without torch is run here: the set applied to each tree, every touched file
compiled, the helper block and its hooks where the workers call them, every name the block
uses bound in its module, the release's own API the block calls (methods, parameters,
fields), and the block's pure-Python parts executed (the decision, the transition lines,
the field-name mapping, the one-token backend factory). The tensor parts run on a real
engine in tests/support/real_sglang/adaptive_check.py. The simulator's transition lines are
checked here too, from its real scheduler loop.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import dataclasses
import io
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from specops.bench.running import parse_decode_lines
from specops.sglang.adaptive import (
    ALL_OFF_NOTE,
    DRAFTING_OFF_LINE,
    DRAFTING_ON_LINE,
    MIXED_NOTE,
    Transition,
    parse_transitions,
    transition_line,
)
from specops.sim import model as M
from specops.sim.logs import SimLog
from specops.sim.scheduler import EngineConfig, Scheduler
from tests.support.sglang_trees import apply_set, copy_tree

#: one worker builds the module's fixtures once (two would each build them)
pytestmark = pytest.mark.xdist_group("dynamic_spec_patch")

SPEC = "python/sglang/srt/speculative"
W1 = f"{SPEC}/eagle_worker.py"
W2 = f"{SPEC}/eagle_worker_v2.py"
RUNNER = "python/sglang/srt/model_executor/model_runner.py"
#: v1 only, v1 + v2, v1 with its 0.5.12 verify(batch) signature, v2 only
VERSIONS = ["0.4.10.post2", "0.5.4", "0.5.10.post1", "0.5.12", "0.5.13"]
SHARED = ("SPECOPS_DRAFTING_OFF", "SPECOPS_DRAFTING_ON", "SPECOPS_ALL_OFF_NOTE", "SPECOPS_MIXED_NOTE",
          "SPECOPS_STEPS", "should_speculate", "specops_drafting", "SpecopsDecodeLine",
          "specops_annotate_decode_lines", "specops_verify_input", "specops_root_tokens",
          "specops_one_token_verify_input", "SPECOPS_ONE_TOKEN_BACKENDS", "specops_backend_problem",
          "specops_worker_start", "specops_refuse_unproven_backend", "specops_one_token_backend",
          "SPECOPS_SKIP_EXTEND_ENV", "specops_skip_extend_set", "specops_skips_off_extend",
          "specops_stub_skipped_extend")
OWN = {W1: ("specops_trivial_verify_input", "specops_trivial_verify", "SPECOPS_CAN_SKIP_EXTEND",
            "specops_skipped_extend_v1"),
       W2: ("SpecopsTrivialVerifyInput", "specops_v2_trivial_verify_input", "SPECOPS_CAN_SKIP_EXTEND",
            "specops_skipped_extend_v2")}
#: worker method -> the helper its first statement calls
HOOKS = {W1: {"EAGLEWorker.__init__": "specops_worker_start", "EAGLEWorker.draft": "specops_drafting",
              "EAGLEWorker.verify": "specops_trivial_verify",
              "EAGLEWorker.forward_draft_extend_after_decode": "specops_skipped_extend_v1"},
         W2: {"EagleDraftWorker.__init__": "specops_worker_start",
              "EagleDraftWorker.draft": "specops_v2_trivial_verify_input",
              "EagleDraftWorker._draft_extend_for_decode": "specops_skipped_extend_v2"}}


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> dict[str, Path]:
    """Each release's tree, copied from the cache and patched once for the module."""
    out = {}
    for version in VERSIONS:
        tree = tmp_path_factory.mktemp("dsd") / version
        apply_set("dynamic-spec-disable", copy_tree(version, tree))
        out[version] = tree
    return out


def _workers(tree: Path) -> list[str]:
    return [w for w in (W1, W2) if (tree / w).exists()]


def _defs(mod: ast.Module) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in mod.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.Assign):
            out.update({t.id: node for t in node.targets if isinstance(t, ast.Name)})
    return out


def _method(mod: ast.Module, qual: str) -> ast.FunctionDef:
    cls, name = qual.split(".")
    klass = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == name)


def _module_names(mod: ast.Module) -> set[str]:
    """Every name bound at module level, also under if/try blocks (conditional imports)."""
    names: set[str] = set()
    todo: list[ast.stmt] = list(mod.body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += [s for block in ("body", "orelse", "finalbody") for s in getattr(node, block, [])]
            todo += [s for h in getattr(node, "handlers", []) for s in h.body]
    return names


def _free_names(node: ast.AST) -> set[str]:
    """Names a definition reads that it does not bind itself (arguments, assignments, imports)."""
    bound: set[str] = set()
    loads: set[str] = set()
    for n in ast.walk(node):
        if isinstance(n, ast.arg):
            bound.add(n.arg)
        elif isinstance(n, ast.Name):
            (loads if isinstance(n.ctx, ast.Load) else bound).add(n.id)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            bound |= {(a.asname or a.name).split(".")[0] for a in n.names}
        elif isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n is not node:
            bound.add(n.name)
    return loads - bound - set(dir(builtins))


def _load(tree: Path, rel: str, names: tuple[str, ...], **ns: Any) -> dict[str, Any]:
    """Execute the named top-level definitions of a patched file in a namespace of stand-ins."""
    mod = ast.parse((tree / rel).read_text())
    defs = _defs(mod)
    env: dict[str, Any] = dict(ns)
    exec(compile(ast.Module([defs[n] for n in names], []), rel, "exec"), env)
    return env


@pytest.mark.parametrize("version", VERSIONS)
def test_helpers_and_hooks_land_where_the_workers_call_them(patched, version):
    tree = patched[version]
    workers = _workers(tree)
    assert workers, "the set applies only to trees with an EAGLE worker"
    for rel in workers:
        source = (tree / rel).read_text()
        compile(source, rel, "exec")
        mod = ast.parse(source)
        defs = _defs(mod)
        for name in SHARED + OWN[rel]:
            assert name in defs, f"{rel}: {name} missing"
            assert source.count(f"def {name}(") + source.count(f"class {name}(") <= 1
        for qual, helper in HOOKS[rel].items():
            first = _method(mod, qual).body[0]
            called = {n.func.id for n in ast.walk(first) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            assert helper in called, f"{rel}: the first statement of {qual} does not call {helper}"
        # every name the helper block reads is bound in this release's module
        known = _module_names(mod)
        for name in SHARED + OWN[rel]:
            missing = _free_names(defs[name]) - known
            assert not missing, f"{version} {rel}: {name} reads unbound {sorted(missing)}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_release_api_the_block_relies_on(patched, version):
    """What the helpers call on the release's own objects exists in this release."""
    tree = patched[version]
    runner = ast.parse((tree / RUNNER).read_text())
    assert _method(runner, "ModelRunner._get_attention_backend")
    if (tree / W1).exists():
        mod = ast.parse((tree / W1).read_text())
        assert _method(mod, "EAGLEWorker._draft_preprocess_decode")
        draft = [a.arg for a in _method(mod, "EAGLEWorker.draft").args.args]
        verify = [a.arg for a in _method(mod, "EAGLEWorker.verify").args.args]
        assert draft[:2] == ["self", "batch"]
        assert verify[:2] == ["self", "batch"] and set(verify) <= {"self", "batch", "spec_info"}
        # the draft-extend skip: its hook passes `batch`, its stub reads the draft runner
        assert [a.arg for a in _method(mod, "EAGLEWorker.forward_draft_extend_after_decode").args.args] == [
            "self", "batch"]
        assert _method(mod, "EAGLEWorker.draft_model_runner")
    if (tree / W2).exists():
        mod = ast.parse((tree / W2).read_text())
        params = [a.arg for a in _method(mod, "EagleDraftWorker.draft").args.args]
        assert params[0] == "self" and params[1] in ("batch", "model_worker_batch") and len(params) == 2
        assert [a.arg for a in _method(mod, "EagleDraftWorker._draft_extend_for_decode").args.args] == [
            "self", "batch", "batch_result"]
        assert "self.draft_runner = " in ast.unparse(_method(mod, "EagleDraftWorker.__init__"))
        info = ast.parse((tree / f"{SPEC}/eagle_info_v2.py").read_text())
        mixin = next(n for n in info.body if isinstance(n, ast.ClassDef) and n.name == "EagleVerifyInputV2Mixin")
        methods = {n.name: [a.arg for a in n.args.args] for n in mixin.body if isinstance(n, ast.FunctionDef)}
        assert methods["prepare_for_v2_verify"][1:4] == ["req_to_token_pool", "batch", "target_worker"]
        assert methods["sample"][1:3] == ["batch", "logits_output"]
    # EagleVerifyInput has every field the block fills (in this release's spelling)
    for rel in ("eagle_info.py", "eagle_utils.py"):
        path = tree / SPEC / rel
        cls = next((n for n in ast.parse(path.read_text()).body if isinstance(n, ast.ClassDef)
                    and n.name == "EagleVerifyInput"), None) if path.exists() else None
        if cls is not None:
            fields = {s.target.id for s in cls.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)}
            for name in ("draft_token", "custom_mask", "positions", "spec_steps", "topk", "draft_token_num"):
                assert name in fields
            assert {"retrive_index", "retrieve_index"} & fields
            break
    else:
        pytest.fail("no EagleVerifyInput class found")


@pytest.mark.parametrize("version", VERSIONS)
def test_transition_strings_match_specops(patched, version):
    tree = patched[version]
    for rel in _workers(tree):
        env = _load(tree, rel, ("SPECOPS_DRAFTING_OFF", "SPECOPS_DRAFTING_ON", "SPECOPS_ALL_OFF_NOTE",
                                "SPECOPS_MIXED_NOTE"))
        assert env["SPECOPS_DRAFTING_OFF"] == DRAFTING_OFF_LINE
        assert env["SPECOPS_DRAFTING_ON"] == DRAFTING_ON_LINE
        assert env["SPECOPS_ALL_OFF_NOTE"] == ALL_OFF_NOTE and env["SPECOPS_MIXED_NOTE"] == MIXED_NOTE


class _Logger:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: Any) -> None:
        self.lines.append(msg % args if args else msg)


class _Worker:
    def __init__(self, threshold: int, tp_rank: int = 0) -> None:
        self.server_args = type("Args", (), {"speculative_disable_batch_threshold": threshold})()
        self.tp_rank = tp_rank


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.13"])
def test_the_decision_logs_transitions_only(patched, version):
    tree = patched[version]
    for rel in _workers(tree):
        log = _Logger()
        env = _load(tree, rel, ("SPECOPS_DRAFTING_OFF", "SPECOPS_DRAFTING_ON", "SPECOPS_STEPS", "should_speculate",
                                "specops_drafting"), logger=log)
        worker = _Worker(threshold=2)
        batches = [1, 2, 3, 3, 5, 2, 2, 1, 4, 4]
        decisions = [env["specops_drafting"](worker, b) for b in batches]
        assert decisions == [b <= 2 for b in batches]
        assert log.lines == [transition_line(False, 3, 2), transition_line(True, 2, 2), transition_line(False, 4, 2)]
        assert parse_transitions("\n".join(log.lines)) == [Transition(False, 3, 2), Transition(True, 2, 2),
                                                          Transition(False, 4, 2)]
        quiet, other_rank = _Logger(), _Worker(threshold=2, tp_rank=1)
        env["logger"] = quiet
        assert not env["specops_drafting"](other_rank, 9) and quiet.lines == []  # one rank logs
        always = _Worker(threshold=0)
        env["logger"] = quiet
        assert all(env["specops_drafting"](always, b) for b in (1, 64, 4096)) and quiet.lines == []
        # -1: never draft (the spec-off arm): off from the first step, said once, and read back
        never, off_log = _Worker(threshold=-1), _Logger()
        env["logger"] = off_log
        assert not any(env["specops_drafting"](never, b) for b in (1, 1, 2, 64))
        assert off_log.lines == [transition_line(False, 1, -1)]
        assert parse_transitions(off_log.lines[0]) == [Transition(False, 1, -1)]


@pytest.mark.parametrize("version", ["0.5.10.post1", "0.5.13"])
def test_field_names_follow_the_release(patched, version):
    """retrive_* before 0.5.13, retrieve_* from it; fields a release lacks are left out."""
    tree = patched[version]
    rel = _workers(tree)[0]
    env = _load(tree, rel, ("specops_verify_input",), dataclasses=dataclasses)

    @dataclasses.dataclass
    class Old:
        retrive_index: Any
        draft_token_num: int

    @dataclasses.dataclass
    class New:
        retrieve_index: Any
        draft_token_num: int

    make = env["specops_verify_input"]
    assert make(Old, retrive_index="i", draft_token_num=1, seq_lens_cpu=None) == Old("i", 1)
    assert make(New, retrive_index="i", draft_token_num=1, seq_lens_cpu=None) == New("i", 1)


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.13"])
def test_one_token_backend_is_built_once_with_one_draft_token(patched, version):
    tree = patched[version]
    rel = _workers(tree)[0]
    env = _load(tree, rel, ("specops_one_token_backend",))
    args = type("Args", (), {"speculative_num_draft_tokens": 4, "speculative_eagle_topk": 2})()
    seen: list[tuple[int, int]] = []

    class Runner:
        server_args = args

        def _get_attention_backend(self) -> str:
            seen.append((args.speculative_num_draft_tokens, args.speculative_eagle_topk))
            return f"backend-{len(seen)}"

    runner = Runner()
    assert env["specops_one_token_backend"](runner) == "backend-1"
    assert env["specops_one_token_backend"](runner) == "backend-1"  # cached on the runner
    assert seen == [(1, 1)]  # built for a one-node tree
    assert (args.speculative_num_draft_tokens, args.speculative_eagle_topk) == (4, 2)  # put back

    class Broken(Runner):
        def _get_attention_backend(self) -> str:
            raise RuntimeError("no memory")

    with pytest.raises(RuntimeError):
        env["specops_one_token_backend"](Broken())
    assert (args.speculative_num_draft_tokens, args.speculative_eagle_topk) == (4, 2)  # also when it fails


def _backend(name: str, **attrs: Any) -> Any:
    """An object whose class is called `name` (the guard reads class names, as SGLang's are)."""
    return type(name, (), attrs)()


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.10.post1", "0.5.13"])
def test_a_backend_the_one_token_verify_is_not_made_for_is_refused_at_worker_start(patched, version, monkeypatch):
    tree = patched[version]
    for rel in _workers(tree):
        env = _load(tree, rel, ("SPECOPS_ONE_TOKEN_BACKENDS", "specops_backend_problem", "specops_worker_start",
                                "specops_refuse_unproven_backend", "SPECOPS_SKIP_EXTEND_ENV",
                                "specops_skip_extend_set", "SPECOPS_CAN_SKIP_EXTEND"),
                    specops_annotate_decode_lines=lambda: None, os=os)
        problem = env["specops_backend_problem"]
        for ok in (_backend("TritonAttnBackend"), _backend("FlashAttentionBackend", fa_impl_ver=3),
                   _backend("FlashAttentionBackend"), _backend("FlashInferAttnBackend"),
                   _backend("HybridAttnBackend", prefill_backend=_backend("FlashInferAttnBackend"),
                            decode_backend=_backend("TritonAttnBackend"))):
            assert problem(ok) is None, type(ok).__name__
        assert problem(_backend("TorchNativeAttnBackend")) == "the target's attention backend is TorchNativeAttnBackend"
        # made to verify from the verify input's count (1 here) by the eagle-torch-native set
        assert problem(_backend("TorchNativeAttnBackend", eagle_extend_view=lambda batch: batch)) is None
        assert "fa4" in problem(_backend("FlashAttentionBackend", fa_impl_ver=4))
        assert "FlashMLABackend" in problem(_backend("HybridAttnBackend", prefill_backend=_backend("TritonAttnBackend"),
                                                     decode_backend=_backend("FlashMLABackend")))
        assert "HybridLinearAttnBackend" in problem(_backend("HybridLinearAttnBackend"))

        def start(threshold: int, backend: Any, worker_start: Any = env["specops_worker_start"]) -> None:
            args = type("Args", (), {"speculative_disable_batch_threshold": threshold})()
            target = type("Target", (), {"model_runner": type("Runner", (), {"attn_backend": backend})()})()
            worker_start({"self": None, "server_args": args, "target_worker": target})

        with pytest.raises(ValueError, match=r"^--speculative-disable-batch-threshold: the target's attention "
                                             r"backend is TorchNativeAttnBackend; .* triton, fa3 and flashinfer"):
            start(1, _backend("TorchNativeAttnBackend"))
        start(0, _backend("TorchNativeAttnBackend"))  # no threshold: the set stays out of the way
        start(4, _backend("TritonAttnBackend"))
        with pytest.raises(ValueError, match="TorchNativeAttnBackend"):   # never drafting verifies one token too
            start(-1, _backend("TorchNativeAttnBackend"))
        # the draft-extend switch: refused at start only by a worker that cannot skip (0.5.12's v1)
        monkeypatch.setenv(env["SPECOPS_SKIP_EXTEND_ENV"], "1")
        start(4, _backend("TritonAttnBackend"))
        env["SPECOPS_CAN_SKIP_EXTEND"] = False
        with pytest.raises(ValueError, match=r"^SGLANG_SPEC_SKIP_ZERO_STEP_DRAFT_EXTEND is set, and .* cannot skip"):
            start(4, _backend("TritonAttnBackend"))
        start(0, _backend("TritonAttnBackend"))  # no threshold: nothing to skip, nothing refused
        monkeypatch.delenv(env["SPECOPS_SKIP_EXTEND_ENV"])
        start(4, _backend("TritonAttnBackend"))


@pytest.mark.parametrize("version", ["0.4.10.post2", "0.5.10.post1", "0.5.13"])
def test_decode_lines_say_when_their_steps_did_not_draft(patched, version):
    """The filter on a real logging setup: a child logger's `Decode batch` line (as SGLang's
    scheduler logs it) reaches the root handler rewritten; specops reads it back."""
    tree = patched[version]
    rel = _workers(tree)[0]
    log = _Logger()
    env = _load(tree, rel, ("SPECOPS_DRAFTING_OFF", "SPECOPS_DRAFTING_ON", "SPECOPS_ALL_OFF_NOTE",
                            "SPECOPS_MIXED_NOTE", "SPECOPS_STEPS", "should_speculate", "specops_drafting",
                            "SpecopsDecodeLine", "specops_annotate_decode_lines"),
                logging=logging, re=re, logger=log)
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("[t] %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    scheduler = logging.getLogger("sglang.srt.observability.scheduler_metrics_mixin")
    scheduler.setLevel(logging.INFO)
    try:
        env["specops_annotate_decode_lines"]()
        env["specops_annotate_decode_lines"]()  # once per handler
        assert sum(isinstance(f, env["SpecopsDecodeLine"]) for f in handler.filters) == 1
        worker = _Worker(threshold=2)
        line = ("Decode batch, #running-req: {b}, #token: 40, token usage: 0.02, accept len: {a}, "
                "accept rate: 0.33, cpu graph: False, gen throughput (token/s): 5.00, #queue-req: 0, ")
        for batches, accept in (([1, 2], "2.50"), ([3, 4], "1.00"), ([4, 2], "1.75")):
            for b in batches:
                env["specops_drafting"](worker, b)
            scheduler.info(line.format(b=batches[-1], a=accept))
        scheduler.info("Prefill batch, #new-seq: 1, accept len: 9.99, ")  # other lines untouched
    finally:
        root.removeHandler(handler)
    lines = out.getvalue().splitlines()
    assert lines[0] == "[t] " + line.format(b=2, a="2.50")
    assert lines[1] == ("[t] Decode batch, #running-req: 4, #token: 40, token usage: 0.02, " + ALL_OFF_NOTE
                        + "cpu graph: False, gen throughput (token/s): 5.00, #queue-req: 0, ")
    assert lines[2] == "[t] " + line.format(b=2, a="1.75").replace("accept rate: 0.33, ", "accept rate: 0.33, "
                                                                   + MIXED_NOTE.format(off=1, steps=2))
    assert lines[3] == "[t] Prefill batch, #new-seq: 1, accept len: 9.99, "
    # specops's reader: the running batch from every line, accept figures only where every
    # step drafted
    text = "\n".join(log.lines[:1] + lines[:3])
    figures = parse_decode_lines(text)
    assert figures.running == [2.0, 4.0, 2.0] and figures.accept == [2.5]
    assert log.lines == [transition_line(False, 3, 2), transition_line(True, 2, 2)]


def _sim_log(arm: M.ArmModel, jobs: list[int], decode_log_interval: int = M.DECODE_LOG_INTERVAL) -> str:
    """Run the simulator's scheduler loop on requests of `jobs` output tokens; its log."""
    out = io.StringIO()
    sched = Scheduler(EngineConfig(arm=arm, max_running=16, time_scale=0.0, noise=0.0,
                                   decode_log_interval=decode_log_interval), SimLog(out))

    async def go() -> None:
        task = asyncio.create_task(sched.run())
        reqs = [sched.new_request(8, n, content=f"p{i}") for i, n in enumerate(jobs)]
        for r in reqs:
            sched.submit(r)
        while not all(r.finished for r in reqs):
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(go())
    return out.getvalue()


def test_simulator_logs_the_patched_servers_transition_lines():
    log = _sim_log(M.ArmModel("adaptive", threshold=2, num_steps=3), [4, 4, 4, 30])
    assert parse_transitions(log) == [Transition(False, 4, 2), Transition(True, 1, 2)]
    assert transition_line(False, 4, 2) in log and transition_line(True, 1, 2) in log
    assert parse_transitions(_sim_log(M.ArmModel("eagle3", num_steps=3), [4, 4, 4, 30])) == []


def test_simulator_notes_drafting_on_its_decode_lines_as_the_patched_server_does():
    """Four requests, threshold 2, a line every 2 steps: steps at batch 4 do not draft, the
    long request's steps alone do; the line over the crossing says 1 of 2 steps were off."""
    log = _sim_log(M.ArmModel("adaptive", threshold=2, num_steps=3), [3, 3, 3, 12], decode_log_interval=2)
    decode = [ln for ln in log.splitlines() if "Decode batch" in ln]
    notes = ["all off" if ALL_OFF_NOTE in ln else "mixed" if "specops drafting off:" in ln else "drafting"
             for ln in decode]
    assert notes[0] == "all off" and "drafting" in notes and notes[-1] == "drafting", decode
    assert all("accept len" not in ln for ln, n in zip(decode, notes, strict=True) if n == "all off")
    figures = parse_decode_lines(log)
    assert len(figures.running) == len(decode) and len(figures.accept) == notes.count("drafting")
    eagle = [ln for ln in _sim_log(M.ArmModel("eagle3", num_steps=3), [3, 3, 3, 12], 2).splitlines()
             if "Decode batch" in ln]
    assert eagle and all("accept len" in ln and "specops" not in ln for ln in eagle)


class _PastTheGuard(Exception):
    """Raised by the stand-in objects once can_run reads anything beyond the set's guard."""


class _Strict:
    """Attributes given, and _PastTheGuard for any other (can_run's own body)."""

    def __init__(self, **attrs: Any) -> None:
        self.__dict__.update(attrs)

    def __getattr__(self, name: str) -> Any:
        raise _PastTheGuard(name)


@pytest.mark.parametrize("version", VERSIONS)
def test_a_one_token_verify_never_replays_a_captured_verify_graph(patched, version):
    """The captured TARGET_VERIFY graphs hold speculative_num_draft_tokens tokens per request:
    CudaGraphRunner.can_run (the release's own method, patched) says no for a one-token verify
    before reading anything else, and leaves every other batch to the release's own checks."""
    rel = "python/sglang/srt/model_executor/cuda_graph_runner.py"
    mod = ast.parse((patched[version] / rel).read_text())
    env: dict[str, Any] = {}
    exec(compile(ast.Module([_method(mod, "CudaGraphRunner.can_run")], []), rel, "exec"), env)
    can_run = env["can_run"]

    def batch(verify: bool, tokens: int) -> _Strict:
        mode = _Strict(is_target_verify=lambda: verify)
        return _Strict(forward_mode=mode, spec_info=_Strict(draft_token_num=tokens))

    assert can_run(_Strict(num_tokens_per_bs=3), batch(True, 1)) is False
    for runner, forward in ((_Strict(num_tokens_per_bs=3), batch(True, 3)),  # a drafting verify
                            (_Strict(num_tokens_per_bs=1), batch(True, 1)),  # graphs captured for one token
                            (_Strict(num_tokens_per_bs=3), batch(False, 1))):  # not a verify
        with pytest.raises(_PastTheGuard):
            can_run(runner, forward)
