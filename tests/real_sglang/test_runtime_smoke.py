"""The real_sglang tier's stand-in kernels equal SGLang's own Triton ports of the CUDA ones.

That real SGLang serves the tiny models on this CPU, and that EAGLE-3 with those stand-ins
gives token for token the plain server's greedy output, is proven where the tier's servers
run anyway: tests/real_sglang/test_adaptive_releases.py (0.5.10.post1's v2 worker, 0.5.9's
v1 and v2, each against a plain server, the stand-ins' log lines checked) and
test_cpu_host.py (0.5.10.post1's v1 through specops deploy). This file once started five
more servers to show the same (issue 36: one server start costs 20-60 s here).
"""

from __future__ import annotations

import json
import subprocess

import pytest

from specops.sglang.source import ensure_tree
from tests.support.real_sglang import PATCH_ROUTE_GROUP
from tests.support.real_sglang import server as srv
from tests.support.real_sglang.runtime import HERE, Runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group(PATCH_ROUTE_GROUP),
              pytest.mark.timeout(1800)]  # a first run builds the runtime (~4-9 min) in its setup

KERNEL_CHECK = HERE / "kernel_check.py"


def test_cpu_spec_kernels_equal_sglangs_triton_ports(real_runtime: Runtime) -> None:
    """The stand-ins, reached through the import hook in SGLang 0.5.10.post1's eagle_utils,
    against 0.5.23's Triton kernels under the interpreter, on random trees (topk 1-3)."""
    reference = ensure_tree("0.5.23") / "python/sglang/kernels/ops/speculative/spec_tree.py"
    proc = subprocess.run([str(real_runtime.python), str(KERNEL_CHECK), str(reference), "60"],
                          env=srv.server_env(ensure_tree("0.5.10.post1")), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    counts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert counts["trees"] == 60 and counts["topk>1"] > 0 and counts["accepted_tokens"] > 0, counts
