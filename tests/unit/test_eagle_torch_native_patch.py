"""The eagle-torch-native patch set (issue 54, point 3) on the real release trees it is written
for, and refused on the others.

What runs without torch is run here: the set applied to each tree (and again: nothing to do;
reverted: byte for byte), every touched file compiled, the hooks in front of torch_native's
two sdpa calls, and the patched code itself executed on stand-in tensors (numpy): the
lengths each EAGLE forward mode hands torch_native's extend and decode, and the draft
backends the factory builds (topk > 1 refused at worker start), the torch code that stands in
for EAGLE's three bookkeeping kernels on a CPU; and where deploy and bench apply the set (the
step's `when`, evaluated for each kind of host and arms). The tensors on a real server,
greedy identity and the accept length: tests/real_sglang/test_eagle_torch_native.py.
"""

from __future__ import annotations

import ast
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specops.config.playbook import load_playbook
from specops.config.templating import evaluate, render
from specops.data import shipped_playbooks
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching import APPLIED, NEW, PatchError, load_patchset, revert
from specops.steps import KINDS
from tests.support.eagle_views import Lens, Mode, bare_backend_class, batch, class_def, ints, method
from tests.support.sglang_trees import apply_set, copy_tree

pytestmark = pytest.mark.xdist_group("eagle_torch_native_patch")

SET = "eagle-torch-native"
SET_V2 = "eagle-torch-native-v2"
BACKEND = "python/sglang/srt/layers/attention/torch_native_backend.py"
DRAFT = "python/sglang/srt/speculative/draft_utils.py"
SPEC_UTILS = "python/sglang/srt/speculative/spec_utils.py"
#: Triton kernel -> the torch function that stands in for it on a CPU
KERNELS = {"create_extend_after_decode_spec_info": "specops_create_extend_after_decode_spec_info",
           "assign_req_to_token_pool": "specops_assign_req_to_token_pool",
           "assign_draft_cache_locs": "specops_assign_draft_cache_locs"}
VERSIONS = ["0.5.9", "0.5.10.post1"]


@pytest.fixture(scope="module")
def patched(tmp_path_factory) -> dict[str, Path]:
    out = {}
    for version in VERSIONS:
        tree = copy_tree(version, tmp_path_factory.mktemp("etn") / version)
        report = apply_set(SET, tree)
        assert {r.status for r in report.results} == {NEW}, report.summary()
        out[version] = tree
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_applies_compiles_and_is_idempotent(patched, version):
    tree = patched[version]
    for rel in (BACKEND, DRAFT, SPEC_UTILS):
        compile((tree / rel).read_bytes(), rel, "exec")
    again = apply_set(SET, tree)
    assert not again.changed and {r.status for r in again.results} == {APPLIED}


@pytest.mark.parametrize("version", VERSIONS)
def test_hooks_come_right_before_torch_natives_sdpa_calls(patched, version):
    mod = ast.parse((patched[version] / BACKEND).read_text())
    for name, hook, call in (("forward_extend", "eagle_extend_view", "_run_sdpa_forward_extend"),
                             ("forward_decode", "eagle_draft_step_view", "_run_sdpa_forward_decode")):
        body = method(mod, "TorchNativeAttnBackend", name).body
        at = next(i for i, s in enumerate(body) if call in ast.unparse(s))
        before = at - 2 if name == "forward_extend" else at - 1
        assert ast.unparse(body[before]) == f"forward_batch = self.{hook}(forward_batch)", (version, name)
    # an EAGLE extend is attended with its own queries only, on the view, before the full extend
    body = method(mod, "TorchNativeAttnBackend", "forward_extend").body
    at = next(i for i, s in enumerate(body) if "_run_sdpa_forward_extend" in ast.unparse(s))
    tail = ast.unparse(body[at - 1])
    assert tail.startswith("if self.eagle_tail_extend(q_, o_, forward_batch.token_to_kv_pool,"), tail
    assert tail.endswith("layer, forward_batch, causal):\n    return o"), tail
    draft = ast.parse((patched[version] / DRAFT).read_text())
    for name, factory in (("create_decode_backend", "_create_torch_native_decode_backend"),
                          ("create_draft_extend_backend", "_create_torch_native_prefill_backend")):
        src = ast.unparse(method(draft, "DraftBackendFactory", name))
        assert f"backend_map['torch_native'] = self.{factory}" in src
        method(draft, "DraftBackendFactory", factory)  # defined


def test_revert_restores_every_file(tmp_path):
    tree = copy_tree("0.5.10.post1", tmp_path / "t")
    before = {rel: (tree / rel).read_bytes() for rel in (BACKEND, DRAFT, SPEC_UTILS)}
    apply_set(SET, tree)
    assert all((tree / rel).read_bytes() != data for rel, data in before.items())
    revert(load_patchset(SET), LocalTreeFiles(tree))
    assert {rel: (tree / rel).read_bytes() for rel in before} == before


def test_a_tree_missing_an_anchor_is_refused_and_left_unchanged(tmp_path):
    """A release whose torch_native extend no longer calls _run_sdpa_forward_extend: the set
    says which edit has no anchor and writes nothing."""
    tree = copy_tree("0.5.10.post1", tmp_path / "t")
    path = tree / BACKEND
    text = path.read_text().replace("self._run_sdpa_forward_extend(", "self._sdpa_extend(")
    path.write_text(text)
    draft_before = (tree / DRAFT).read_bytes()
    with pytest.raises(PatchError) as err:
        apply_set(SET, tree)
    assert "backend-extend-lengths" in str(err.value) and "nothing was changed" in str(err.value)
    assert path.read_text() == text and (tree / DRAFT).read_bytes() == draft_before


def test_other_releases_are_refused_with_the_reason(tmp_path):
    tree = copy_tree("0.5.14", tmp_path / "t")
    with pytest.raises(PatchError) as err:
        apply_set(SET, tree)
    assert "version 0.5.14 is newer than 0.5.10.post1" in str(err.value)
    assert "Triton's interpreter" in (err.value.hint or "")


# ---------------------------------------------------------------- the patched code, run

def _backend_class(tree: Path) -> type:
    return bare_backend_class(tree, BACKEND)


def _batch(mode: str, seq_lens: Lens, spec: Any = None) -> types.SimpleNamespace:
    return batch(Mode(mode), seq_lens, spec)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_eagle_mode_hands_torch_native_its_lengths(patched, version):
    backend = _backend_class(patched[version])(types.SimpleNamespace(device="cpu"))
    assert backend.eagle_draft_step is None
    # verify: each request's seq_len tokens, then its 3-token chain (k = 2 draft tokens + root)
    verify = _batch("TARGET_VERIFY", ints(5, 9), types.SimpleNamespace(topk=1, draft_token_num=3))
    view = backend.eagle_extend_view(verify)
    assert view is not verify and list(verify.seq_lens) == [5, 9]  # the batch itself untouched
    assert (list(view.seq_lens), list(view.extend_prefix_lens), list(view.extend_seq_lens)) == ([8, 12], [5, 9],
                                                                                                 [3, 3])
    # draft extend after verify: seq_lens already count the accepted tokens (+1 each)
    extend = _batch("DRAFT_EXTEND", ints(8, 10), types.SimpleNamespace(accept_length=ints(3, 1)))
    view = backend.eagle_extend_view(extend)
    assert (list(view.seq_lens), list(view.extend_prefix_lens), list(view.extend_seq_lens)) == ([8, 10], [5, 9],
                                                                                                 [3, 1])
    plain = _batch("EXTEND", ints(4))
    assert backend.eagle_extend_view(plain) is plain
    # a tree verify is refused (the factory refuses it before any forward runs)
    with pytest.raises(ValueError, match="topk 1"):
        backend.eagle_extend_view(_batch("TARGET_VERIFY", ints(5), types.SimpleNamespace(topk=2, draft_token_num=4)))
    # a decode not drafting reads seq_lens as they are
    decode = _batch("DECODE", ints(7))
    assert backend.eagle_draft_step_view(decode) is decode


@pytest.mark.parametrize("version", VERSIONS)
def test_the_factory_builds_one_backend_per_draft_step(patched, version, monkeypatch):
    tree = patched[version]
    backend_cls = _backend_class(tree)
    names = ["sglang", "sglang.srt", "sglang.srt.layers", "sglang.srt.layers.attention",
             "sglang.srt.layers.attention.torch_native_backend"]
    for name in names:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    sys.modules[names[-1]].TorchNativeAttnBackend = backend_cls  # type: ignore[attr-defined]
    mod = ast.parse((tree / DRAFT).read_text())
    ns: dict[str, Any] = {}
    exec(compile(ast.Module(body=[class_def(mod, "TorchNativeMultiStepDraftBackend")], type_ignores=[]), DRAFT,
                 "exec"), ns)
    multi = ns["TorchNativeMultiStepDraftBackend"](types.SimpleNamespace(device="cpu"), 1, 3)
    assert [b.eagle_draft_step for b in multi.attn_backends] == [0, 1]
    assert multi.init_forward_metadata(object()) is None
    # draft step i reads the request's seq_len tokens and the i + 1 draft tokens written so far
    step1 = multi.attn_backends[1].eagle_draft_step_view(_batch("DECODE", ints(5, 9)))
    assert list(step1.seq_lens) == [7, 11]
    with pytest.raises(ValueError, match="--speculative-eagle-topk must be 1, got 4"):
        ns["TorchNativeMultiStepDraftBackend"](types.SimpleNamespace(device="cpu"), 4, 3)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_kernel_is_rebound_right_after_its_definition_on_a_cpu_only(patched, version):
    """An importer (`from ...spec_utils import assign_draft_cache_locs`) runs after the module,
    so it gets the rebinding; the module's own callers read the global at call time."""
    mod = ast.parse((patched[version] / SPEC_UTILS).read_text())
    body = mod.body
    for kernel, torch_fn in KERNELS.items():
        at = next(i for i, n in enumerate(body) if isinstance(n, ast.FunctionDef) and n.name == kernel)
        helper, guard = body[at + 1], body[at + 2]
        assert isinstance(helper, ast.FunctionDef) and helper.name == torch_fn
        assert ast.unparse(guard).startswith("if specops_on_cpu():\n    " + kernel + " = SpecopsTorchGrid(" + kernel)


def _kernels(tree: Path) -> dict[str, Any]:
    mod = ast.parse((tree / SPEC_UTILS).read_text())
    keep = [n for n in mod.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))
            and (n.name.startswith("specops_") or n.name == "SpecopsTorchGrid")]
    ns: dict[str, Any] = {"torch": types.SimpleNamespace(arange=lambda a, b, dtype: np.arange(a, b, dtype=dtype))}
    exec(compile(ast.Module(body=keep, type_ignores=[]), SPEC_UTILS, "exec"), ns)
    return ns


def _never(*args: Any) -> None:
    raise AssertionError("the Triton kernel ran")


@pytest.mark.parametrize("version", VERSIONS)
def test_the_torch_kernels_write_what_the_triton_ones_write(patched, version):
    ns = _kernels(patched[version])
    grid = ns["SpecopsTorchGrid"]
    kernel: dict[tuple[int, ...], Any] = {(2,): _never}
    # after verify: request 0 accepted 2 drafts (+1), request 1 none (+1); seq_lens count them
    positions, new_ids = np.zeros(4, dtype=np.int64), np.zeros(2, dtype=np.int64)
    grid(kernel, ns["specops_create_extend_after_decode_spec_info"])[(2,)](
        np.array([11, 12, 13, 21]), np.array([10, 6]), np.array([3, 1]), positions, new_ids, 2)
    assert list(positions) == [7, 8, 9, 5] and list(new_ids) == [13, 21]
    # verify's cache locations: rows 3 and 1 of req_to_token, from their seq_lens on
    req_to_token = np.zeros((4, 16), dtype=np.int32)
    grid(kernel, ns["specops_assign_req_to_token_pool"])[(2,)](
        np.array([3, 1]), req_to_token, np.array([5, 2]), np.array([8, 5]), np.array([40, 41, 42, 50, 51, 52]), 16, 2)
    assert list(req_to_token[3, 5:8]) == [40, 41, 42] and list(req_to_token[1, 2:5]) == [50, 51, 52]
    assert req_to_token.sum() == 40 + 41 + 42 + 50 + 51 + 52
    # the draft's locations (topk 1, 2 steps), each request's run from its seq_len on
    req_to_token = np.zeros((4, 16), dtype=np.int32)
    out = np.array([60, 61, 70, 71])
    grid(kernel, ns["specops_assign_draft_cache_locs"])[(2,)](
        np.array([0, 2]), req_to_token, np.array([4, 9]), None, None, out, None, None, None, 0, 16, 1, 2, 1, 2, 4)
    assert list(req_to_token[0, 4:6]) == [60, 61] and list(req_to_token[2, 9:11]) == [70, 71]
    assert req_to_token.sum() == out.sum()


@pytest.mark.parametrize("version", VERSIONS)
def test_a_paged_tree_draft_is_left_to_the_triton_kernel(patched, version):
    ns = _kernels(patched[version])
    ran = []
    kernel = {(1,): lambda *args: ran.append(args)}
    args = (np.array([0]), np.zeros((1, 8), dtype=np.int32), np.array([4]), None, None, np.arange(6), None, None,
            None, 0, 8, 2, 3, 4, 1, 8)  # topk 2, page size 4
    ns["SpecopsTorchGrid"](kernel, ns["specops_assign_draft_cache_locs"])[(1,)](*args)
    assert len(ran) == 1 and ran[0][5] is args[5]


# ---------------------------------------------------------------- when deploy and bench apply it

def _step(playbook: str) -> Any:
    steps = load_playbook(shipped_playbooks() / f"{playbook}.yaml", KINDS).steps
    [step] = [s for s in steps if s.kind == "patch" and SET in str(s.args.get("set"))]
    return step


def _when(playbook: str) -> str:
    step = _step(playbook)
    assert step.when is not None
    return step.when


@pytest.mark.parametrize("playbook", ["deploy", "bench"])
@pytest.mark.parametrize("ref,chosen", [("v0.5.14", SET_V2), ("v0.5.10.post1", SET), ("v0.5.9", SET)])
def test_deploy_and_bench_choose_the_set_by_the_trees_release(playbook, ref, chosen):
    """One step: the set its release takes (each set still refuses a tree outside its releases)."""
    variables = {"sglang_ref": ref, "engine_face": "sglang"}
    variables["sglang_version"] = render(load_playbook(shipped_playbooks() / f"{playbook}.yaml", KINDS)
                                         .vars["sglang_version"], variables)
    assert render(_step(playbook).args["set"], variables) == chosen


CPU_HOST = {"engine_features": ["patch-route", "cpu"], "simulated": False, "device": "cpu"}


def _arm(attention: str) -> dict[str, Any]:
    return {"extra_args": ["--attention-backend", attention, "--disable-cuda-graph"]}


@pytest.mark.parametrize("playbook", ["deploy", "bench"])
@pytest.mark.parametrize("arms,host,applies", [
    # the speculative arms ask for torch_native: every arm runs it
    ({"baseline": _arm("torch_native"), "eagle3": _arm("torch_native")}, {}, True),
    ({"baseline": {}, "eagle3": {"extra_args": ["--attention-backend=torch_native"]}, "adaptive": {}}, {}, True),
    # the tier's old split (the EAGLE arms on Triton's interpreter) and a plain baseline only
    ({"baseline": _arm("torch_native"), "eagle3": _arm("triton"), "adaptive": _arm("triton")}, {}, False),
    ({"baseline": _arm("torch_native")}, {}, False),
    ({"baseline": None, "eagle3": None}, {}, False),
    (["baseline", "eagle3"], {}, False),
    # not a CPU host, a simulated one, an engine without the patch route
    ({"eagle3": _arm("torch_native")}, {"device": "cuda"}, False),
    ({"eagle3": _arm("torch_native")}, {"simulated": True}, False),
    ({"eagle3": _arm("torch_native")}, {"engine_features": ["cpu"]}, False),
])
def test_deploy_and_bench_apply_it_where_a_speculative_arm_asks_for_torch_native(playbook, arms, host, applies):
    assert bool(evaluate(_when(playbook), {**CPU_HOST, **host, "arms": arms})) is applies
