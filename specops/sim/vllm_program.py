"""`python -m specops.sim --vllm-tree TREE <vLLM api_server flags>`: a stand-in for
`python -m vllm.entrypoints.openai.api_server`. The flags are judged by the parser read from
the tree (an unknown flag exits 2 with argparse's message, as vLLM's does); the simulator's own
`--sim-*` knobs are those of the SGLang face (sim.program)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from specops.hostfiles.treefiles import LocalTreeFiles
from specops.sim.server import SimOptions, bind_socket
from specops.sim.vllm_logs import VLLMLog
from specops.sim.vllm_server import VLLMSimServer
from specops.vllm.tree import detect_layout


def main(tree: Path, opts: SimOptions, rest: list[str]) -> int:
    layout = detect_layout(LocalTreeFiles(tree))
    if layout.flags is None:
        print(f"specops.sim: error: {tree} is not a vLLM tree ({'; '.join(layout.notes)})", file=sys.stderr)
        return 2
    args = layout.flags.parse(rest)  # argparse prints the usage and exits 2 itself
    if not args.get("model"):
        print("api_server.py: error: --model is required by the simulator", file=sys.stderr)
        return 2
    args["host"] = args.get("host") or "127.0.0.1"
    args["port"] = int(args.get("port") or 8000)
    log = VLLMLog()
    shown = {k: v for k, v in args.items() if v not in (None, False)}
    log.record(f"vLLM API server version {layout.version}", "api_server.py:1900")
    log.record(f"non-default args: {shown}", "utils.py:250")
    try:
        sock = bind_socket(args["host"], args["port"])
    except OSError as e:
        log.record(f"[Errno {e.errno}] error while attempting to bind on address {(args['host'], args['port'])!r}: "
                   f"Address already in use" if e.errno == 98 else str(e), "api_server.py:100", "ERROR")
        return 1
    server = VLLMSimServer(layout.flags, tree, layout.has_schedule, args, opts, log)
    try:
        asyncio.run(server.start(sock))
    except KeyboardInterrupt:
        return 0
    return 0
