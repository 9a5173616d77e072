"""Issue 33 point 2: what is particular to one serving engine (SGLang's module paths, metric
names, log lines, launch flags, its benchmark client, a comparison with an engine's name) lives
in `specops/engines/` (and the packages it wraps: `specops/sglang/`, `specops/sim/`). This test
lists every such name anywhere else in `specops/` and compares the (file, name) pairs with
KNOWN: a new pair fails (go through `specops.engines`), and so does a KNOWN pair no longer
found (drop it: the list only shrinks as code moves behind the engine).

Names are looked for in string literals (docstrings aside: prose may name SGLang) and in
comparisons of an `...engine` expression with an engine's name (`host.engine == "sim"`)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specops.config.engine_registry import BUILTIN as ENGINES

ROOT = Path(__file__).resolve().parents[2]
#: where an engine's own names belong
ENGINE_PACKAGES = ("specops/engines/", "specops/sglang/", "specops/vllm/", "specops/sim/")

#: what marks a name as one engine's (SGLang's; the simulator speaks the same)
NAMES = (
    re.compile(r"(?<![\w.])sglang\.[a-z_]+(?:\.[a-z_]+)*"),  # a module path: sglang.launch_server
    re.compile(r"(?<![\w.])sglang:[a-z]+_[a-z_]+"),          # a /metrics name: sglang:num_running_reqs
    re.compile(r"--speculative-[a-z-]+|--enable-metrics|--decode-log-interval"),  # launch flags
    re.compile(r"\bSGLANG_[A-Z_]+"),                         # an environment variable it reads
    re.compile(r"Decode batch|#running-req|fired up and ready to roll"),  # its log lines
    re.compile(r"bench_serving"),                            # its benchmark client
    # vLLM's: its module paths, /metrics names, its one speculative flag, its variables, its lines
    re.compile(r"(?<![\w.])vllm\.entrypoints(?:\.[a-z_]+)*"),
    re.compile(r"(?<![\w.])vllm:[a-z]+_[a-z_]+"),
    re.compile(r"--speculative-config|--max-num-seqs|num_speculative_tokens_per_batch_size"),
    re.compile(r"\bVLLM_[A-Z_]+"),
    re.compile(r"Starting vLLM server on|SpecDecoding metrics|Avg prompt throughput"),
)

#: (file, name) -> why it is still there. Shrink it as code moves behind specops.engines.
KNOWN = {
    # SGLang's own benchmark client: argv from the tree's flags, its output file parsed into a
    # ResultRecord. It needs records.schema (above engines/), so it stays in bench/ as the
    # `sglang` runner's module; ServingEngine.runner_name says when it is used.
    ("specops/bench/bench_serving.py", "bench_serving"): "SGLang's runner module (needs records.schema)",
    ("specops/bench/bench_serving.py", "sglang.bench_serving"): "the module name bench_serving runs",
    ("specops/bench/runners.py", "bench_serving"): "SglangRunner's failure message names the client that failed",
    # messages and help text that name what a person reads
    ("specops/report/verify.py", "Decode batch"): "verify's hint names the log line a person looks for",
    ("specops/report/verify.py", "--decode-log-interval"): "verify's hint names the flag that logs every step",
    ("specops/bench/settings.py", "bench_serving"): "--runner's and --trace's help (the settings schema) name the client the sglang runner runs",
    ("specops/report/markdown.py", "sglang:num_running_reqs"): "the report's method note names the gauge read",
    ("specops/report/markdown.py", "#running-req"): "the report's method note names the log field read",
}


def _docstrings(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def _engine_comparison(node: ast.Compare) -> str | None:
    """`engine == "sim"` for a comparison of an `...engine` expression with an engine's name."""
    if len(node.ops) != 1 or not isinstance(node.ops[0], (ast.Eq, ast.NotEq)):
        return None
    sides = (node.left, node.comparators[0])
    for expr, value in (sides, sides[::-1]):
        if isinstance(value, ast.Constant) and value.value in ENGINES and ast.unparse(expr).endswith("engine"):
            return f'engine == "{value.value}"'
    return None


def found_in(rel: str, source: str) -> list[tuple[str, str, int]]:
    """(file, name, line) of every engine-specific name in one module's source."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            out += [(rel, m.group(0), node.lineno) for rx in NAMES for m in rx.finditer(node.value)]
        elif isinstance(node, ast.Compare):
            name = _engine_comparison(node)
            if name:
                out.append((rel, name, node.lineno))
    return out


def scan() -> list[tuple[str, str, int]]:
    out = []
    for path in sorted((ROOT / "specops").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not rel.startswith(ENGINE_PACKAGES):
            out += found_in(rel, path.read_text())
    return out


def test_no_new_engine_specific_name_outside_the_engines():
    new = sorted({(f, n, line) for f, n, line in scan() if (f, n) not in KNOWN})
    assert not new, "engine-specific names outside specops/engines (go through specops.engines: " \
                    "engine_for(host), engine_named(name), engine_of(argv)):\n" + \
                    "\n".join(f"  {f}:{line}: {n}" for f, n, line in new)


def test_every_known_name_is_still_there():
    seen = {(f, n) for f, n, _ in scan()}
    gone = sorted(k for k in KNOWN if k not in seen)
    assert not gone, "no longer found, drop from KNOWN: " + ", ".join(f"{f}: {n}" for f, n in gone)


def test_the_scan_finds_each_kind_of_name():
    """The scanner itself: each kind is found in a string, a docstring is not, nor a module of
    specops's own (`specops.sglang.layout`), and an engine comparison is."""
    source = '''
"""Docstring: sglang.launch_server, Decode batch."""
A = "python -m sglang.launch_server"
B = f"gauge sglang:num_running_reqs at {1}"
C = ["--speculative-num-steps", "--enable-metrics", "SGLANG_USE_CPU_ENGINE=1"]
D = "Decode batch, #running-req: 3"
E = "specops.sglang.layout"
F = host.engine == "sim"
G = "sim" != engine
'''
    names = [n for _, n, _ in found_in("x.py", source)]
    assert names.count("sglang.launch_server") == 1  # the docstring's is not counted
    assert {"sglang:num_running_reqs", "--speculative-num-steps", "--enable-metrics", "SGLANG_USE_CPU_ENGINE",
            "Decode batch", "#running-req", 'engine == "sim"'} <= set(names)
    assert names.count('engine == "sim"') == 2
    assert not any("layout" in n for n in names)
