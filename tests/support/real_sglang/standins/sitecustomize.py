"""Stand-ins for SGLang's CUDA-only EAGLE kernels, for the specops real_sglang test tier only.

Python imports this at start-up because this folder is on the test server's PYTHONPATH
(never on the project's own). With SGLANG_USE_CPU_ENGINE=1 it puts a meta-path finder in
front that wraps the loader of a few SGLang modules, so that right after such a module has
executed, the CPU versions from `specops_cpu_spec_kernels` replace what is missing or
wrong there on CPU. The SGLang tree on disk is never touched. Each stand-in it installs is
announced on stderr as `[specops-standin] <module>: <what>`.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
from types import ModuleType
from typing import Callable


def _announce(module: ModuleType, what: str) -> None:
    print(f"[specops-standin] {module.__name__}: {what}", file=sys.stderr, flush=True)


def _on_device(module: ModuleType) -> bool:
    """Whether the module took a device branch (then it has its real kernels)."""
    return any(bool(getattr(module, flag, False)) for flag in ("_is_cuda", "_is_hip", "_is_npu"))


def _patch_eagle_utils(module: ModuleType) -> None:
    import specops_cpu_spec_kernels as kernels

    if _on_device(module):
        return
    if not hasattr(module, "sgl_build_tree_kernel_efficient"):  # imported only under CUDA/HIP
        vars(module)["sgl_build_tree_kernel_efficient"] = kernels.build_tree_kernel_efficient
        _announce(module, "sgl_build_tree_kernel_efficient = CPU stand-in")
    original = getattr(module, "verify_tree_greedy_func", None)
    if original is not None:
        def verify_tree_greedy_func(predicts, accept_index, accept_token_num, candidates, *tree,
                                    topk=-1, **named):
            """On CPU the release's version returns its inputs unwritten; this one verifies.
            The tree tensors come positionally or by name: `retrive_*` up to 0.5.10.x,
            `retrieve_*` from 0.5.14 (which calls it with keywords only)."""
            if not tree:
                spelling = "retrieve" if "retrieve_index" in named else "retrive"
                tree = (*(named.pop(f"{spelling}_{part}") for part in ("index", "next_token", "next_sibling")),
                        named.pop("target_predict"))
            if named or len(tree) != 4:
                raise TypeError(f"verify_tree_greedy_func stand-in: unexpected arguments {sorted(named)}, "
                                f"{len(tree)} tree tensors")
            kernels.verify_tree_greedy(predicts, accept_index, accept_token_num, candidates, *tree)
            return predicts, accept_index, accept_token_num

        vars(verify_tree_greedy_func)["__wrapped__"] = original
        vars(module)["verify_tree_greedy_func"] = verify_tree_greedy_func
        _announce(module, "verify_tree_greedy_func = CPU stand-in")


def _patch_eagle_info_v2(module: ModuleType) -> None:
    """`assign_extend_cache_locs_func` returns None on CPU. 0.5.9/0.5.10.x define it in
    eagle_info_v2; 0.5.14 in speculative/triton_ops/cache_locs, which eagle_info_v2 imports it
    from (the patch there runs first, so eagle_info_v2 gets the stand-in and is left alone) and
    eagle_utils imports it from at each verify."""
    import specops_cpu_spec_kernels as kernels

    current = getattr(module, "assign_extend_cache_locs_func", None)
    if _on_device(module) or current is None or current is kernels.assign_extend_cache_locs:
        return
    vars(module)["assign_extend_cache_locs_func"] = kernels.assign_extend_cache_locs
    _announce(module, "assign_extend_cache_locs_func = CPU stand-in")


def _patch_record_stream(module: ModuleType) -> None:
    """EAGLE v2 (SGLANG_ENABLE_SPEC_V2) calls Tensor.record_stream, which CPU tensors refuse."""
    import torch

    original = torch.Tensor.record_stream
    if getattr(original, "_specops_standin", False):
        return
    try:
        torch.empty(1).record_stream(torch.cpu.current_stream())
        return  # this torch accepts it on CPU
    except Exception:  # noqa: BLE001 - any refusal means the stand-in is needed
        pass

    def record_stream(self, stream):
        if self.device.type == "cpu":
            return None  # no caching allocator on CPU: nothing to keep alive
        return original(self, stream)

    vars(record_stream)["_specops_standin"] = True
    torch.Tensor.record_stream = record_stream
    _announce(module, "torch.Tensor.record_stream on CPU tensors = no-op stand-in")


def _patch_llama_embed_sharing(module: ModuleType) -> None:
    """LlamaForCausalLM.set_embed / set_embed_and_head (the EAGLE-3 head takes the target's
    embedding when it is as wide as the target, as real heads are) end with
    torch.cuda.empty_cache() and torch.cuda.synchronize(), which raise without a CUDA driver.
    Here they run with those two calls as no-ops; the sharing itself is SGLang's own code."""
    import contextlib

    import torch

    cls = getattr(module, "LlamaForCausalLM", None)
    if cls is None or torch.cuda.is_available():
        return

    @contextlib.contextmanager
    def no_cuda_sync():
        saved = torch.cuda.synchronize, torch.cuda.empty_cache
        torch.cuda.synchronize = torch.cuda.empty_cache = lambda *a, **k: None  # type: ignore[assignment]
        try:
            yield
        finally:
            torch.cuda.synchronize, torch.cuda.empty_cache = saved

    for name in ("set_embed", "set_embed_and_head"):
        original = getattr(cls, name, None)
        if original is None or getattr(original, "_specops_standin", False):
            continue

        def shared(self, *args, _original=original, **kwargs):
            with no_cuda_sync():
                return _original(self, *args, **kwargs)

        vars(shared)["_specops_standin"] = True
        setattr(cls, name, shared)
        _announce(module, f"LlamaForCausalLM.{name} without torch.cuda.synchronize/empty_cache = CPU stand-in")


PATCHES: dict[str, Callable[[ModuleType], None]] = {
    "sglang.srt.models.llama": _patch_llama_embed_sharing,
    "sglang.srt.speculative.eagle_utils": _patch_eagle_utils,
    "sglang.srt.speculative.eagle_info_v2": _patch_eagle_info_v2,
    "sglang.srt.speculative.triton_ops.cache_locs": _patch_eagle_info_v2,  # 0.5.14+
    "sglang.srt.managers.overlap_utils": _patch_record_stream,
    "sglang.srt.speculative.eagle_worker_v2": _patch_record_stream,
}


class _PatchAfterExec(importlib.abc.MetaPathFinder):
    """Finds the modules in PATCHES as the path finder would, wrapping the loader's
    exec_module so that the patch runs right after the module body."""

    def find_spec(self, fullname, path, target=None):
        patch = PATCHES.get(fullname)
        if patch is None:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path, target)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        loader = spec.loader
        exec_original = loader.exec_module

        def exec_module(module: ModuleType) -> None:
            exec_original(module)
            patch(module)

        loader.exec_module = exec_module  # this spec's own loader instance
        return spec


if os.environ.get("SGLANG_USE_CPU_ENGINE") == "1":
    sys.meta_path.insert(0, _PatchAfterExec())
