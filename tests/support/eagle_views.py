"""Numpy stand-ins for running the eagle-torch-native patch sets' code without torch: the int
tensors the views and kernels read, SGLang's forward modes (0.5.9-0.5.10.post1 and 0.5.14),
and TorchNativeAttnBackend's patched methods lifted from a patched tree onto a bare class
(tests/unit/test_eagle_torch_native_patch.py and ..._v2_patch.py)."""

from __future__ import annotations

import ast
import types
from pathlib import Path
from typing import Any

import numpy as np

#: the methods the sets add to or change in TorchNativeAttnBackend
BACKEND_METHODS = ("__init__", "eagle_extend_view", "eagle_draft_step_view")


class Lens(np.ndarray):
    """A numpy stand-in for torch's int tensors (`.to(dtype)`, `.long()`, `.copy_`)."""

    def to(self, dtype: Any) -> Lens:
        return self.astype(dtype).view(Lens)

    def long(self) -> Lens:
        return self.to(np.int64)

    def copy_(self, other: Any) -> None:
        self[...] = other


def ints(*values: Any, dtype: Any = np.int64) -> Lens:
    return np.array(values, dtype=dtype).view(Lens)


class Mode:
    """ForwardMode as the views see it (0.5.9-0.5.10.post1: DRAFT_EXTEND)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_target_verify(self) -> bool:
        return self.name == "TARGET_VERIFY"

    def is_draft_extend(self) -> bool:
        return self.name == "DRAFT_EXTEND"


class V2Mode:
    """0.5.14's ForwardMode as the views see it: no is_draft_extend (v2 has DRAFT_EXTEND_V2)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def is_target_verify(self) -> bool:
        return self.name == "TARGET_VERIFY"

    def is_draft_extend_v2(self) -> bool:
        return self.name == "DRAFT_EXTEND_V2"


def class_def(mod: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == name)


def method(mod: ast.Module, cls: str, name: str) -> ast.FunctionDef:
    return next(n for n in class_def(mod, cls).body if isinstance(n, ast.FunctionDef) and n.name == name)


def bare_backend_class(tree: Path, rel: str, **names: Any) -> type:
    """TorchNativeAttnBackend's patched methods (BACKEND_METHODS) from the tree's `rel` on a
    bare class (no AttentionBackend: __init__'s super() call is left out); `names` join the
    module namespace beside a `torch` that only knows full_like."""
    mod = ast.parse((tree / rel).read_text())
    methods = [method(mod, "TorchNativeAttnBackend", n) for n in BACKEND_METHODS]
    methods[0].body = [s for s in methods[0].body if "super()" not in ast.unparse(s)]
    klass = ast.ClassDef(name="TorchNativeAttnBackend", bases=[], keywords=[], body=methods, decorator_list=[],
                         type_params=[])
    ns: dict[str, Any] = {"torch": types.SimpleNamespace(full_like=lambda x, v: np.full_like(x, v).view(Lens)),
                          **names}
    exec(compile(ast.fix_missing_locations(ast.Module(body=[klass], type_ignores=[])), rel, "exec"), ns)
    backend: type = ns["TorchNativeAttnBackend"]
    return backend


def batch(mode: Mode | V2Mode, seq_lens: Lens, spec: Any = None, own: str = "its own") -> types.SimpleNamespace:
    """A ForwardBatch as the views read it; `own` marks the lengths a view must pass on as they are."""
    return types.SimpleNamespace(forward_mode=mode, spec_info=spec, seq_lens=seq_lens,
                                 extend_prefix_lens=own, extend_seq_lens=own)
