"""SGLang simulator: `python -m specops.sim --sglang-tree TREE <launch_server flags>`.

Modules: `flags` (what a tree's launcher accepts, read from its source), `model` (the
calibrated performance model and pure predictions), `engine` (continuous-batching
scheduler), `server` (HTTP endpoints and start-up), `logs` (SGLang-shaped log text),
`testing` (run the real simulator as a subprocess; a small load generator).
"""
