"""What the real_sglang test tier needs to run real SGLang on a CPU-only machine (test code,
not product code): `runtime` (the cached venv of SGLang's dependencies), `models` +
`make_models` (tiny target, EAGLE-3 head, bad draft, ShareGPT file), `server` (env, flags,
launcher), `standins/` (stand-ins for GPU-only code; see its README), `kernel_check` (the
stand-in kernels against SGLang's Triton ports)."""

#: The real tier's two xdist groups (`-m real_sglang -n 2 --dist loadgroup`), one per worker.
#: Its servers decode on about one core (their kernels are interpreted Python): run alone, the
#: tier left the second of the machine's two cores idle half its time (vmstat, 2026-12-04), so
#: two modules run at once, one from each group. The groups are split by runtime and by time
#: (each about half the tier) and keep each module's servers together; a module over two
#: runtimes marks each release's parameter with its own group. Time wins over runtime where they
#: pull apart (CI builds every runtime before the tier): when test_eagle_torch_native.py's 0.5.14
#: case went (2026-12-06: 1,094 against 1,048 s of test time before, 852 s left in the second
#: group), the client agreement check (0.5.10.post1, 60 s) and the heavy model builder (vLLM's
#: runtime, 61 s) moved to the second group. The tier's wall is its slower group's test time
#: (2026-12-07: 1,068 s wall, 1,060 s of test time in the second group, 980 s in the first), so
#: the heavy builder's two SGLang tests (64 s, 0.5.10.post1's runtime) went back to the first
#: and the tail attention check's 0.5.14 case (17 s) to the second, each with its runtime.
PATCH_ROUTE_GROUP = "real_patch_route"  # SGLang 0.5.9 and 0.5.10.post1 through the patch, the kernel check
NEWER_ENGINES_GROUP = "real_newer_engines"  # SGLang 0.5.14 (native route, torch_native crossover), vLLM, and time
