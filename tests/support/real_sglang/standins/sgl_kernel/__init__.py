"""Stand-in for the `sgl_kernel` package (GPU/AMX kernels) in the real_sglang test tier only.

SGLang's CPU kernels come from a source build of sgl-kernel that PyPI does not carry, and
PyPI's `sgl-kernel` is the CUDA build, which fails to import without libcuda. SGLang imports
`sgl_kernel.kvcacheio` unconditionally (mem_cache/memory_pool_host.py), so that submodule
exists here; every other name is missing (`from sgl_kernel import x` raises ImportError,
`hasattr(sgl_kernel, x)` is False), so SGLang takes its own torch fallbacks, as on a CPU
without AMX (`torch.ops.sgl_kernel` is never registered).
"""


def __getattr__(name: str):
    # AttributeError (not ImportError) so that hasattr() works; Python turns it into
    # ImportError for `from sgl_kernel import name`.
    raise AttributeError(f"sgl_kernel stand-in (specops real_sglang tier): no {name!r}; "
                         "only sgl_kernel.kvcacheio exists here")
