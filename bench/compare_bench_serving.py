"""SGLang's own `bench_serving` beside specops's builtin client, on one simulator run.

Issue 5 ("Measure"): where SGLang's benchmark installs without a GPU, show the builtin
client's figures next to it on the same simulator. SGLang 0.5.4 to 0.5.8 import
`sglang.bench_serving` without torch; this script puts 0.5.4 (`--no-deps`) and the few
packages its import chain needs into a venv under /tmp, builds a word-level tokenizer
locally (no download: HF_HUB_OFFLINE=1), starts the simulator with this interpreter and
runs both clients, one after the other, at each concurrency.

Units: the simulator runs on a scaled clock (wall = model x scale). The builtin client
reads `sim_time_scale` from /server_info and reports model units; bench_serving only
knows the wall clock, so its figures are converted here the same way (latencies / scale,
throughputs x scale). With --sim-time-scale 1 no conversion happens.

    python bench/compare_bench_serving.py [--concurrency 1 8 32] [--sim-time-scale 1]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specops.bench.bench_serving import parse_bench_serving_output
from specops.bench.client import default_num_prompts, measure_point
from specops.sglang.source import ensure_tree
from specops.sim.testing import run_sim

SGLANG_VERSION = "0.5.4"
# What `python -m sglang.bench_serving` needs to import and run against an HTTP server,
# found by trying: bench_serving imports aiohttp, numpy, pybase64, requests, datasets,
# PIL, tqdm, transformers; `import sglang` (sglang/__init__ -> sglang.utils) adds
# IPython and pydantic. No torch: a tokenizer *directory* goes straight to AutoTokenizer.
BENCH_PACKAGES = ["aiohttp", "numpy", "pybase64", "requests", "datasets", "pillow", "tqdm",
                  "transformers", "tokenizers", "ipython", "pydantic"]
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
               "TOKENIZERS_PARALLELISM": "false"}

_TOKENIZER_SCRIPT = r"""
import json, sys
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
from transformers import PreTrainedTokenizerFast
words = json.load(open(sys.argv[1]))
vocab = {"[UNK]": 0, "[EOS]": 1}
for w in words:
    vocab.setdefault(w, len(vocab))
tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")   # joins words with spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", eos_token="[EOS]")
fast.save_pretrained(sys.argv[2])
from transformers import AutoTokenizer
t = AutoTokenizer.from_pretrained(sys.argv[2])
ids = t.encode(" ".join(words[:5]), add_special_tokens=False)
assert len(ids) == 5 and 0 not in ids, ids
print(t.vocab_size)
"""


def run(argv: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """A command with a timeout; raises with its output tail when it fails."""
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})
    if proc.returncode != 0:
        raise SystemExit(f"command failed (rc {proc.returncode}): {' '.join(argv)}\n"
                         f"{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def ensure_venv(venv: Path) -> Path:
    """The venv's python, with sglang (no deps) and BENCH_PACKAGES; reused when it imports."""
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import sglang.bench_serving, sglang.version as v; print(v.__version__)"]
    if py.exists():
        ok = subprocess.run(probe, capture_output=True, text=True, timeout=300, env={**os.environ, **OFFLINE_ENV})
        if ok.returncode == 0 and ok.stdout.strip() == SGLANG_VERSION:
            return py
    if not py.exists():
        run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    pip = [str(py), "-m", "pip", "install", "-q"]
    run(pip + ["--no-deps", f"sglang=={SGLANG_VERSION}"], timeout=900)
    run(pip + BENCH_PACKAGES, timeout=1800)
    run(probe, timeout=300, env=OFFLINE_ENV)
    torch = subprocess.run([str(py), "-c", "import torch"], capture_output=True, timeout=120)
    if torch.returncode == 0:
        print("note: torch is importable in the venv (it was not asked for)", file=sys.stderr)
    return py


def _words() -> list[str]:
    """~1000 short token-like words, the same on every machine: the tokenizer's vocabulary
    (the builtin client sends token ids; bench_serving's random prompts are decoded through it)."""
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
              "st", "tr", "pl", "gr", "ch", "sh", "th"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou"]
    codas = ["", "n", "r", "s", "t", "l"]
    return [o + v + c for o in onsets for v in vowels for c in codas]


def ensure_tokenizer(py: Path, out: Path, env: dict[str, str]) -> Path:
    """A WordLevel tokenizer over `_words()`: one token per word."""
    if (out / "tokenizer.json").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    words = out.parent / "vocab-words.json"
    words.write_text(json.dumps(_words()))
    script = out.parent / "make_tokenizer.py"
    script.write_text(_TOKENIZER_SCRIPT)
    run([str(py), str(script), str(words), str(out)], timeout=300, env=env)
    return out


def run_bench_serving(py: Path, url: str, tokenizer: Path, model: str, *, concurrency: int, num_prompts: int,
                      input_len: int, output_len: int, seed: int, workdir: Path,
                      env: dict[str, str]) -> tuple[dict, float]:
    """One bench_serving point; (parsed record in wall units, seconds the process took)."""
    out = workdir / f"bs-c{concurrency}.jsonl"
    out.unlink(missing_ok=True)
    argv = [str(py), "-m", "sglang.bench_serving", "--backend", "sglang", "--base-url", url,
            "--model", model, "--tokenizer", str(tokenizer),
            "--dataset-name", "random-ids", "--random-input-len", str(input_len),
            "--random-output-len", str(output_len), "--random-range-ratio", "1.0",
            "--num-prompts", str(num_prompts), "--max-concurrency", str(concurrency),
            "--warmup-requests", str(concurrency), "--flush-cache", "--seed", str(seed),
            "--output-file", str(out), "--disable-tqdm"]
    t0 = time.perf_counter()
    proc = run(argv, timeout=900, env=env)
    took = time.perf_counter() - t0
    (workdir / f"bs-c{concurrency}.stdout").write_text(proc.stdout + proc.stderr)
    return parse_bench_serving_output(out.read_text(), num_prompts=num_prompts), took


def to_model_units(rec: dict, scale: float) -> dict:
    """Wall-clock bench_serving figures in model units, as the builtin client reports them."""
    conv = dict(rec)
    for key, value in rec.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            continue
        if key.endswith("_ms"):
            conv[key] = value / scale
        elif key.endswith("_throughput"):
            conv[key] = value * scale
        elif key == "duration_s":
            conv[key] = value / scale
    return conv


def fmt(value: float | None, width: int = 8, prec: int = 1) -> str:
    return f"{value:{width}.{prec}f}" if isinstance(value, (int, float)) else f"{'-':>{width}}"


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.3f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and b else f"{'-':>6}"


def print_table(rows: list[tuple[int, dict, dict]], scale: float) -> None:
    print(f"\nmodel units (sim_time_scale {scale:g}); bs = sglang.bench_serving {SGLANG_VERSION}, "
          "bi = specops builtin; ratio = bs / bi")
    head = (f"{'conc':>4} {'n':>4} | {'tok/s bs':>9} {'tok/s bi':>9} {'ratio':>6} | {'TTFT bs':>8} {'TTFT bi':>8} "
            f"{'ratio':>6} | {'TPOT bs':>8} {'TPOT bi':>8} {'ratio':>6} | {'ITL bs':>8} {'ITL bi':>8} {'ratio':>6} | "
            f"{'ok bs/bi':>9}")
    print(head)
    print("-" * len(head))
    for c, bs, bi in rows:
        print(f"{c:>4} {bi.get('num_prompts') or 0:>4} | "
              f"{fmt(bs.get('output_throughput'), 9)} {fmt(bi.get('output_throughput'), 9)} "
              f"{ratio(bs.get('output_throughput'), bi.get('output_throughput'))} | "
              f"{fmt(bs.get('mean_ttft_ms'))} {fmt(bi.get('mean_ttft_ms'))} "
              f"{ratio(bs.get('mean_ttft_ms'), bi.get('mean_ttft_ms'))} | "
              f"{fmt(bs.get('mean_tpot_ms'), prec=2)} {fmt(bi.get('mean_tpot_ms'), prec=2)} "
              f"{ratio(bs.get('mean_tpot_ms'), bi.get('mean_tpot_ms'))} | "
              f"{fmt(bs.get('mean_itl_ms'), prec=2)} {fmt(bi.get('mean_itl_ms'), prec=2)} "
              f"{ratio(bs.get('mean_itl_ms'), bi.get('mean_itl_ms'))} | "
              f"{bs.get('completed')}/{bi.get('completed'):<4}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/specops-bs-venv"))
    ap.add_argument("--python", type=Path, default=None,
                    help="an interpreter whose environment already has bench_serving's packages (e.g. the "
                         f"real-SGLang tier's runtime): sglang {SGLANG_VERSION}'s tree goes on its PYTHONPATH, "
                         "no venv is built")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "specops-bs-compare")
    ap.add_argument("--tree-version", default="0.5.10.post1")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--num-prompts", type=int, default=None, help="default max(4 x concurrency, 16)")
    ap.add_argument("--input-len", type=int, default=128)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--sim-time-scale", type=float, default=0.2)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None, help="also write all records here")
    args = ap.parse_args()

    args.workdir.mkdir(parents=True, exist_ok=True)
    env = dict(OFFLINE_ENV)
    if args.python:
        py = args.python
        env["PYTHONPATH"] = str(ensure_tree(SGLANG_VERSION) / "python")
    else:
        py = ensure_venv(args.venv)
    tokenizer = ensure_tokenizer(py, args.workdir / "tokenizer", env)
    tree = ensure_tree(args.tree_version)
    model = "sim-model"
    sim_args = ["--model-path", model, "--max-running-requests", "64", "--sim-time-scale", str(args.sim_time_scale)]
    rows: list[tuple[int, dict, dict]] = []
    raw: list[dict] = []
    with run_sim(tree, sim_args, log_path=args.workdir / "sim.log") as sim:
        scale = float(sim.server_info().get("sim_time_scale", 1.0))
        for c in args.concurrency:
            n = args.num_prompts or default_num_prompts(c)
            bs_wall, took = run_bench_serving(py, sim.url, tokenizer, model, concurrency=c, num_prompts=n,
                                              input_len=args.input_len, output_len=args.output_len,
                                              seed=args.seed, workdir=args.workdir, env=env)
            bi = measure_point(sim.url, concurrency=c, num_prompts=n, input_len=args.input_len,
                               output_len=args.output_len, seed=args.seed, dataset="random").to_dict()
            bs = to_model_units(bs_wall, scale)
            rows.append((c, bs, bi))
            raw.append({"concurrency": c, "bench_serving_wall": bs_wall, "bench_serving_model": bs,
                        "bench_serving_process_s": took, "builtin": bi})
            print(f"c={c}: done (bench_serving process {took:.1f}s, builtin wall "
                  f"{bi['extra']['duration_wall_s']:.2f}s)", flush=True)
    print_table(rows, scale)
    if args.json:
        args.json.write_text(json.dumps(raw, indent=1, default=str))


if __name__ == "__main__":
    main()
