"""Every SGLang release from 0.4.10 to the newest on the package index, through specops.

For each release: fetch its wheel once (cached under ~/.cache/specops by
specops.sglang.source), detect the tree's layout with the one flag reader, build the three
arms' launch plans (applying the dynamic-spec-disable patch set to a copy of the tree
where the adaptive arm needs it) and have them validated against that release's parser,
launch the three arms on the simulator, wait until each is ready and reports the
release's version, stop them, and build the benchmark runner's argv against the tree's
own benchmark module. A release specops cannot run is "refused" with the reason a user
would see. With --real-python, each release's real parser (bench/sglang_real_parser.py)
is counted too, to show how close the reader is.

    python bench/version_matrix.py [--from 0.4.10] [--versions 0.5.14,0.5.23] [--offline]
                                   [--real-python /tmp/realvenv/bin/python] [--no-deploy]

Prints a Markdown table (the one in bench/RESULTS.md) and the totals.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from specops.bench.bench_serving import bench_command
from specops.errors import SpecopsError
from specops.hostfiles.cache import cache_root
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching.applier import apply
from specops.patching.model import PatchError, load_patchset
from specops.servers import arms_from_vars, build_launch, launch_arms, server_info, stop_arms, wait_ready_many
from specops.servers.plans import bucket_sources
from specops.sglang.layout import detect_layout
from specops.sglang.source import _find_local_wheel, ensure_tree
from specops.sim.testing import free_port
from specops.transport.local import LocalTransport

HERE = Path(__file__).resolve().parent
REAL_PARSER = HERE / "sglang_real_parser.py"
TIME_SCALE = "0.05"
_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


def version_key(version: str) -> tuple[int, ...] | None:
    """'0.5.4.post3' -> (0, 5, 4, 3); None for what is not a plain release (rc, dev)."""
    m = _VERSION.match(version)
    return tuple(int(g or 0) for g in m.groups()) if m else None


def index_versions() -> list[str]:
    """What `pip index versions sglang` lists, oldest first."""
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"],
                          capture_output=True, text=True, timeout=120)
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("Available versions:")), None)
    if line is None:
        raise SystemExit(f"pip index versions sglang: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
    found = [v.strip() for v in line.split(":", 1)[1].split(",")]
    return sorted((v for v in found if version_key(v)), key=lambda v: version_key(v) or ())


def cached_versions() -> list[str]:
    names = [p.name.split("-")[1] for p in (cache_root() / "wheels").glob("sglang-*.whl")]
    return sorted({v for v in names if version_key(v)}, key=lambda v: version_key(v) or ())


@dataclass
class Row:
    version: str
    layout: str = ""
    flags: int = 0
    arguments: int = 0
    real: str = ""
    cuda_graph_flag: str = ""
    mechanism: str = ""
    ready_path: str = ""
    bench_module: str = ""
    wheel_mb: float = 0.0
    seconds: float = 0.0
    ok: bool = False
    reason: str = ""
    notes: list[str] = field(default_factory=list)

    def markdown(self) -> str:
        result = "ok" if self.ok else f"refused: {self.reason}"
        return (f"| {self.version} | {self.layout} | {self.flags} ({self.arguments}) | {self.real or '-'} "
                f"| `{self.cuda_graph_flag}` | {self.mechanism} | {self.ready_path} | {self.bench_module} "
                f"| {result} |")


HEADER = ("| version | layout | flags found (arguments) | real parser | cuda-graph flag | adaptive mechanism "
          "| ready | benchmark module | result |\n|---|---|---|---|---|---|---|---|---|")


def real_parser_counts(python: str, tree: Path) -> str:
    proc = subprocess.run([python, str(REAL_PARSER), str(tree)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return "n/a"
    actions = json.loads(proc.stdout)
    return f"{sum(len(a['names']) for a in actions)} ({len(actions)})"


def arm_vars() -> dict:
    return {"model": "meta-llama/Llama-3.1-8B-Instruct", "draft_model": "lmsys/sglang-EAGLE3-LLaMA3.1-Instruct-8B",
            "max_running_requests": 64, "cuda_graph_max_bs": 64,
            "arms": {"baseline": {"port": free_port()}, "eagle3": {"port": free_port()},
                     "adaptive": {"port": free_port(), "threshold": 8}}}


def deploy(tree: Path, row: Row, workdir: Path, ready_timeout: float) -> None:
    """The three arms on the simulator: plans validated by the tree's parser, launched,
    ready, reporting the tree's version, stopped."""
    files = LocalTreeFiles(tree)
    layout = detect_layout(files)
    plans = [build_launch(arm, layout, workdir=str(workdir), python=sys.executable, engine="sim",
                          sglang_tree=str(tree), sim_options=["--sim-time-scale", TIME_SCALE],
                          bucket_sources=bucket_sources(files, layout), where=f"sglang {row.version}, arm '{name}'")
             for name, arm in arms_from_vars(arm_vars()).items()]
    transport = LocalTransport()
    try:
        states = [o.state for o in launch_arms(transport, plans, reuse=False)]
        wait_ready_many(transport, states, timeout_s=ready_timeout, poll_s=0.3)
        for state in states:
            info = server_info(transport, state)
            if info.get("version") != row.version:
                raise SpecopsError(f"server '{state.arm}' reports version {info.get('version')}, not {row.version}")
        adaptive = next(p for p in plans if p.arm == "adaptive")
        row.notes += adaptive.notes
    finally:
        stop_arms(transport, str(workdir), grace_s=3, port_wait_s=10, gpu_wait_s=0)


def one(version: str, args: argparse.Namespace, scratch: Path) -> Row:
    row = Row(version)
    t0 = time.monotonic()
    try:
        src = ensure_tree(version)
        wheel = _find_local_wheel(version)
        row.wheel_mb = wheel.stat().st_size / 1e6 if wheel else 0.0
        files = LocalTreeFiles(src)
        layout = detect_layout(files)
        if layout.flags is None:
            raise SpecopsError("; ".join(layout.notes) or "server_args.py unreadable")
        row.layout, row.flags, row.arguments = layout.flags_layout, len(layout.server_flags), len(layout.flags.flags)
        row.cuda_graph_flag, row.ready_path = layout.cuda_graph_flag or "none", layout.ready_path
        row.mechanism = layout.adaptive_mechanism
        if args.real_python:
            row.real = real_parser_counts(args.real_python, src)
        cmd = bench_command(files)
        cmd.argv("python3", port=30000, dataset="random", input_len=256, output_len=256, num_prompts=32,
                 concurrency=8, output_file="/tmp/out.jsonl")
        row.bench_module = cmd.module
        tree = src
        if layout.adaptive_mechanism == "needs-patch":  # patch a copy, never the cache
            tree = scratch / version
            shutil.copytree(src, tree)
            try:
                apply(load_patchset("dynamic-spec-disable"), LocalTreeFiles(tree), LocalTransport(), run_verify_cmds=False)
            except PatchError as exc:
                detail = exc.message.split("dynamic-spec-disable, ", 1)[-1].split("; nothing was changed")[0]
                raise SpecopsError(f"the adaptive arm needs the dynamic-spec-disable patch set, which does not fit "
                                   f"this release ({detail})") from None
            row.mechanism = detect_layout(LocalTreeFiles(tree)).adaptive_mechanism
        if not args.no_deploy:
            deploy(tree, row, scratch / f"wd-{version}", args.ready_timeout)
        row.ok = True
    except SpecopsError as exc:  # PatchError, ConfigError, StepError: what a user would see
        row.reason = str(exc).splitlines()[0]
    finally:
        row.seconds = time.monotonic() - t0
        if (scratch / version).exists():
            shutil.rmtree(scratch / version, ignore_errors=True)
    return row


def suggest_neighbours(rows: list[Row]) -> None:
    """A refused release's reason ends with the nearest releases that run all three arms."""
    for i, row in enumerate(rows):
        if row.ok:
            continue
        before = next((r.version for r in reversed(rows[:i]) if r.ok), None)
        after = next((r.version for r in rows[i + 1:] if r.ok), None)
        near = " or ".join(v for v in (before, after) if v)
        if near:
            row.reason += f"; use {near}, or run the baseline and eagle3 arms only"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--from", dest="start", default="0.4.10", help="oldest release (default 0.4.10)")
    ap.add_argument("--versions", help="comma list instead of the index's releases")
    ap.add_argument("--offline", action="store_true", help="only the wheels already in the cache")
    ap.add_argument("--real-python", help="an interpreter with msgspec+pydantic for bench/sglang_real_parser.py")
    ap.add_argument("--no-deploy", action="store_true", help="skip launching the simulated arms")
    ap.add_argument("--ready-timeout", type=float, default=120.0)
    args = ap.parse_args()
    if args.versions:
        versions = [v.strip() for v in args.versions.split(",") if v.strip()]
    else:
        versions = cached_versions() if args.offline else index_versions()
        floor = version_key(args.start) or ()
        versions = [v for v in versions if (version_key(v) or ()) >= floor]
    print(f"{len(versions)} releases: {versions[0]} .. {versions[-1]}", file=sys.stderr)
    rows = []
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="specops-matrix-") as tmp:
        for version in versions:
            row = one(version, args, Path(tmp))
            rows.append(row)
            print(f"{version:<14} {'ok' if row.ok else 'REFUSED':<8} {row.seconds:5.1f} s  "
                  f"{row.layout:<10} {row.mechanism:<27} {row.reason}", file=sys.stderr)
    suggest_neighbours(rows)
    print(HEADER)
    for row in rows:
        print(row.markdown())
    ok = sum(r.ok for r in rows)
    print(f"\n{ok} ok, {len(rows) - ok} refused of {len(rows)} releases; wheels {sum(r.wheel_mb for r in rows):.0f} MB "
          f"({min(r.wheel_mb for r in rows):.1f} - {max(r.wheel_mb for r in rows):.1f} MB each); "
          f"{time.monotonic() - t0:.0f} s in all")
    return 0 if ok == len(rows) or all(r.ok or r.reason for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
