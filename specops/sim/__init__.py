"""SGLang simulator: `python -m specops.sim --sglang-tree TREE <launch_server flags>`.

Modules: `knobs` (its own flags, apart from SGLang's), `model` (the calibrated
performance model and pure predictions), `scheduler` (continuous batching), `server`
(HTTP endpoints and start-up), `logs` (SGLang-shaped log text), `testing` (run the real
simulator as a subprocess; a small load generator). Which flags a tree accepts comes from
`specops.sglang.flags`, the reader layout detection and launch planning use too.
"""
