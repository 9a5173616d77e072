"""The real_sglang tier's proof that its environment works: real SGLang, run from a release's
wheel tree with the cached runtime, serves the tiny models on this CPU, and EAGLE-3 (with
the CPU stand-ins for its CUDA-only kernels) gives token for token the plain server's
greedy output. Also: the stand-in kernels equal SGLang's own Triton ports of the CUDA ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.request
from contextlib import ExitStack
from pathlib import Path

import pytest

from specops.sglang.source import ensure_tree
from specops.sim.testing import free_ports
from tests.support.real_sglang import server as srv
from tests.support.real_sglang.models import TinyModels
from tests.support.real_sglang.runtime import HERE, Runtime

pytestmark = [pytest.mark.real_sglang, pytest.mark.xdist_group("real_sglang"),
              pytest.mark.timeout(1800)]  # a first run builds the runtime (~4-9 min) in its setup

PROMPTS = ["Hello world", "Speculative decoding drafts a few tokens", "The quick brown fox"]
MAX_NEW_TOKENS = 4
READY_TIMEOUT_S = 600
#: "Decode batch" is logged every 40 decode steps by default; these requests make 4
LOG_EVERY_STEP = ["--decode-log-interval", "1"]
KERNEL_CHECK = HERE / "kernel_check.py"


def generate(server: srv.Server, prompt: str) -> dict:
    """One greedy /generate; a failure carries the server's log tail."""
    body = {"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS,
                                                "ignore_eos": True}}
    req = urllib.request.Request(server.url + "/generate", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as resp:
            return json.load(resp)
    except OSError as exc:  # URLError, RemoteDisconnected, timeouts
        raise AssertionError(f"/generate on port {server.port} ({server.log}): {exc!r}\n{server.tail(60)}") from exc


def fingerprint(tree: Path) -> list[tuple[str, int, int]]:
    """Every file under the tree with its size and mtime: the servers must leave it as it was."""
    out = []
    for dirpath, dirs, files in os.walk(tree):
        dirs.sort()
        for name in sorted(files):
            st = os.stat(os.path.join(dirpath, name))
            out.append((os.path.relpath(os.path.join(dirpath, name), tree), st.st_size, st.st_mtime_ns))
    return out


#: (release, servers): EAGLE v2 (SGLANG_ENABLE_SPEC_V2=1, its overlap scheduler) needs the
#: two extra stand-ins (cache locations, record_stream); both releases carry it
CASES: dict[str, dict[str, dict[str, str]]] = {
    "0.5.10.post1": {"eagle3": {}, "eagle3-v2": {"SGLANG_ENABLE_SPEC_V2": "1"}},
    "0.5.9": {"eagle3": {}},
}


@pytest.mark.parametrize("version", list(CASES))
def test_eagle3_on_cpu_gives_the_plain_servers_greedy_tokens(version: str, real_runtime: Runtime,
                                                             tiny_models: TinyModels, tmp_path: Path) -> None:
    tree = ensure_tree(version)
    before = fingerprint(tree)
    arms = {"plain": (None, {}), **{name: (tiny_models.draft, env) for name, env in CASES[version].items()}}
    ports = iter(free_ports(2 * len(arms)))  # HTTP and nccl ports, all distinct (see srv.launch_argv)
    with ExitStack() as stack:  # all started at once (launch is mostly imports), stopped whatever happens
        servers = {name: stack.enter_context(srv.serve(
            real_runtime.python, tree, tiny_models.target, next(ports), tmp_path / name / "server.log", draft=draft,
            extra_args=LOG_EVERY_STEP, extra_env=env, nccl_port=next(ports))) for name, (draft, env) in arms.items()}
        srv.wait_all(list(servers.values()), READY_TIMEOUT_S)
        answers, generate_s = {}, {}
        for name, server in servers.items():
            started = time.monotonic()
            answers[name] = [generate(server, p) for p in PROMPTS]
            generate_s[name] = round(time.monotonic() - started, 1)
        logs = {name: server.log_text() for name, server in servers.items()}
    print(f"SGLang {version}: ready after {({n: round(s.ready_s or 0) for n, s in servers.items()})} s; "
          f"{len(PROMPTS)}x{MAX_NEW_TOKENS} tokens in {generate_s} s; plain {[a['output_ids'] for a in answers['plain']]}")

    plain = [a["output_ids"] for a in answers["plain"]]
    assert all(len(ids) == MAX_NEW_TOKENS for ids in plain), plain
    assert len({tuple(ids) for ids in plain}) == len(PROMPTS), f"one answer for different prompts: {plain}"
    for name in CASES[version]:
        assert [a["output_ids"] for a in answers[name]] == plain, f"{name} differs from plain greedy decoding"
        assert all(a["meta_info"].get("spec_verify_ct", 0) > 0 for a in answers[name]), \
            f"{name} served without verifying drafts: {[a['meta_info'] for a in answers[name]]}"
        for line in ("sglang.srt.speculative.eagle_utils: sgl_build_tree_kernel_efficient = CPU stand-in",
                     "sglang.srt.speculative.eagle_utils: verify_tree_greedy_func = CPU stand-in"):
            assert f"{srv.STANDIN_LINE} {line}" in logs[name]
        assert any(srv.DECODE_LINE in ln and "accept len:" in ln for ln in logs[name].splitlines()), logs[name][-3000:]
    assert srv.DECODE_LINE in logs["plain"]
    assert srv.READY_LINE in logs["plain"]
    assert fingerprint(tree) == before, "a server changed the cached SGLang tree"


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
