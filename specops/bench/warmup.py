"""What every runner sends before a point's measured requests, in one place: the builtin client
(specops.bench.client) and the bench_serving runner (specops.bench.runners) both read it, and
this module imports nothing, so the runner side does not load the client's aiohttp."""

#: warm-up requests sent alone, before the closed loop at the point's concurrency: an adaptive arm
#: drafts only while its running batch is at or below its threshold, so a warm-up above it never
#: drafts, and the first drafting step's one-time cost falls inside the measured run (real SGLang
#: 0.5.14 on CPU: ~10 s, an adaptive point at 0.32x of baseline). At batch 1 every arm that can
#: draft does.
WARMUP_ALONE = 1
