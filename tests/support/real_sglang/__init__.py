"""What the real_sglang test tier needs to run real SGLang on a CPU-only machine (test code,
not product code): `runtime` (the cached venv of SGLang's dependencies), `models` +
`make_models` (tiny target, EAGLE-3 head, bad draft, ShareGPT file), `server` (env, flags,
launcher), `standins/` (stand-ins for GPU-only code; see its README), `kernel_check` (the
stand-in kernels against SGLang's Triton ports)."""
