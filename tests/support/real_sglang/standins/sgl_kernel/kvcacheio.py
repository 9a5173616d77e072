"""Stand-in for `sgl_kernel.kvcacheio` (CUDA host<->device KV-cache copies): the names exist
so that SGLang's unconditional import succeeds; calling any of them raises, since the
tier never enables the hierarchical cache that would use them."""

from __future__ import annotations

from typing import Any, Callable, NoReturn

_NAMES = (
    "transfer_kv_all_layer", "transfer_kv_all_layer_direct_lf_pf", "transfer_kv_all_layer_lf_pf",
    "transfer_kv_all_layer_lf_ph", "transfer_kv_all_layer_mla", "transfer_kv_all_layer_mla_lf_pf",
    "transfer_kv_direct", "transfer_kv_per_layer", "transfer_kv_per_layer_direct_pf_lf",
    "transfer_kv_per_layer_mla", "transfer_kv_per_layer_mla_pf_lf", "transfer_kv_per_layer_pf_lf",
    "transfer_kv_per_layer_ph_lf",
)


def _unavailable(name: str) -> Callable[..., NoReturn]:
    def call(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise RuntimeError(f"sgl_kernel.kvcacheio.{name} is a stand-in (specops real_sglang tier, CPU): "
                           "the CUDA KV-cache transfer kernels are not available here")
    call.__name__ = name
    return call


for _name in _NAMES:
    globals()[_name] = _unavailable(_name)


def __getattr__(name: str) -> Callable[..., NoReturn]:
    """A later release's new `transfer_*` names import too (and raise when called)."""
    if name.startswith("transfer_"):
        return _unavailable(name)
    raise AttributeError(name)
