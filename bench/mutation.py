"""Mutation testing of specops with mutmut: how much of a module's behaviour the tests pin down.

    python bench/mutation.py patching              # specops/patching/ against the fast patching tests
    python bench/mutation.py engine                # Engine._run_step against the engine tests
    python bench/mutation.py patching --sample 0   # every mutant, not a sample (long)
    python bench/mutation.py patching --ref main   # the same, measured on a git ref's code and tests

Runs in a scratch copy (`.mutation/<target>/`, kept for `mutmut show NAME` / `mutmut browse`
from inside it), so the worktree is never touched. mutmut generates every mutant of the
target files; a seeded sample of them is run (each mutant only against the tests that call
its function, fastest first, stopping at the first failure), and the script prints the
score and every survivor's diff. Survivors listed in EQUIVALENT below (mutants no test can
tell from the original) are left out of the adjusted score; bench/RESULTS.md explains them.

Why mutmut (pinned in the `bench` extra): it forks each mutant from a process that has
already imported the code and collected the tests, and runs only the tests that reach the
mutated function, which is what makes a run fit a 2-core machine. cosmic-ray runs the whole
test command once per mutant: at ~45 s per run of these tests that is hours.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# The patch engine's tests on small trees (~15 s together). test_patching.py's runs on real
# SGLang trees copy and commit a whole tree per test (~40 s together): each survivor would
# pay that, so they stay in the ordinary suite, not in each mutant's run.
PATCHING_TESTS = ["tests/unit/test_patching_anchors.py", "tests/unit/test_patching_apply.py",
                  "tests/unit/test_patching_revert.py", "tests/unit/test_patching_model.py",
                  "tests/unit/test_patching_engine.py"]


@dataclass(frozen=True)
class Target:
    mutate: list[str]  # files mutmut mutates (glob patterns)
    tests: list[str]  # the tests each mutant is run against
    functions: list[str] = field(default_factory=list)  # only mutants of these (mutmut name globs)
    sample: int = 200  # default sample size; 0 = all


TARGETS = {
    "patching": Target(["specops/patching/*.py"], PATCHING_TESTS, sample=200),
    "engine": Target(["specops/run/engine.py"],
                     ["tests/integration/test_engine_local.py", "tests/integration/test_engine_run_step.py",
                      "tests/e2e/test_deploy_ssh.py"],
                     functions=["specops.run.engine.xǁEngineǁ_run_step__mutmut_*"], sample=60),
}


@dataclass(frozen=True)
class Equivalent:
    """A mutant no test can tell apart: matched by its function and the changed lines."""

    function: str  # mutmut's mangled name, e.g. "x__find_block" or "xǁEngineǁ_run_step"
    before: str  # the original line, stripped
    after: str  # the mutated line, stripped
    why: str


EQUIVALENT: list[Equivalent] = [
    Equivalent("x__git_apply", "text=True, timeout=60)", "text=True, )",
               "the timeout only acts when git hangs for a minute; no test can wait for that"),
    Equivalent("x__git_apply",
               'return False, {}, (proc.stderr or proc.stdout).strip().splitlines()[0:1][0] if '
               '(proc.stderr or proc.stdout).strip() else "git apply failed"',
               'return False, {}, (proc.stderr or proc.stdout).strip().splitlines()[0:1][0] if '
               '(proc.stderr or proc.stdout).strip() else "GIT APPLY FAILED"',
               "the fallback text is for a git that fails without a word; git always names the error"),
    Equivalent("x__git_apply", "out[rel] = p.read_bytes() if p.exists() else None",
               "out[rel] = p.read_bytes() if (p.exists()) or True else None",
               "a diff edit's files are its '+++' paths, never /dev/null, so git never deletes them"),
    Equivalent("x__undo_text", 'added = rec.get("added", "").splitlines(True)',
               'added = rec.get("added", None).splitlines(True)',
               "every manifest record _undo_text sees was written with 'added' and 'removed'"),
    Equivalent("x__undo_text", 'removed = rec.get("removed", "").splitlines(True)',
               'removed = rec.get("removed", ).splitlines(True)',
               "every manifest record _undo_text sees was written with 'added' and 'removed'"),
    Equivalent("x__undo_text", 'removed = rec.get("removed", "").splitlines(True)',
               'removed = rec.get("removed", "XXXX").splitlines(True)',
               "every manifest record _undo_text sees was written with 'added' and 'removed'"),
    Equivalent("x_apply", 'files.write(f"{sdir}/manifest.json", json.dumps(manifest, indent=1).encode())',
               'files.write(f"{sdir}/manifest.json", json.dumps(manifest, ).encode())',
               "the manifest's indentation; it is only ever read back as JSON"),
    Equivalent("x_revert", 'files.remove(entry.get("backup", f"{sdir}/backups/{rel}"))',
               'files.remove(entry.get("BACKUP", f"{sdir}/backups/{rel}"))',
               "the default is the path apply records as 'backup', and the next loop removes it anyway"),
    Equivalent("x_resolve_python", 'lines = [ln.rstrip("\\r\\n") for ln in split_lines(source)]',
               'lines = [ln.rstrip("XX\\r\\nXX") for ln in split_lines(source)]',
               "also strips trailing X's, but only a line's indentation and first character are read"),
    Equivalent("x_apply", 'files.write(backup, p.originals[rel] or b"")',
               'files.write(backup, p.originals[rel] or b"XXXX")',
               "only files that exist get new contents, so the original is never None here"),
    Equivalent("x__parse_edit",
               'return Edit(name, file, op, Anchor("none"), diff=diff, optional=is_optional, line=line)',
               'return Edit(name, file, op, Anchor(None), diff=diff, optional=is_optional, line=line)',
               "nothing reads a diff edit's anchor kind; describe() says 'unified diff' for either"),
    Equivalent("x_resolve_patchset_path", "close = difflib.get_close_matches(str(name_or_path), known, n=1)",
               "close = difflib.get_close_matches(str(name_or_path), known, n=2)",
               "only the best match, close[0], is ever read"),
    Equivalent("x__parse_anchor",
               'if not keys <= {"function", "position", "statement"} or {"position", "statement"} <= keys:',
               'if not keys <= {"function", "position", "statement"} or {"position", "statement"} < keys:',
               "reached only with 'function' in keys, so {position, statement} is never all of them"),
]


def _copy_tree(dest: Path, ref: str | None) -> None:
    """specops/, tests/, playbooks/ and pyproject.toml of the worktree (or of a git ref)."""
    parts = ["specops", "tests", "playbooks", "pyproject.toml"]
    if ref:
        with tempfile.TemporaryFile() as tar:
            subprocess.run(["git", "-C", str(REPO), "archive", ref, *parts], stdout=tar, check=True)
            tar.seek(0)
            with tarfile.open(fileobj=tar) as tf:
                tf.extractall(dest, filter="data")
        return
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
    for part in parts:
        src = REPO / part
        if src.is_dir():
            shutil.copytree(src, dest / part, ignore=ignore)
        else:
            shutil.copy2(src, dest / part)


def _toml_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{i}"' for i in items) + "]"


def _prepare(workdir: Path, target: Target, ref: str | None, also: list[str]) -> None:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    _copy_tree(workdir, ref)
    tests = [t for t in target.tests + also if (workdir / t).exists()]  # an older --ref may lack some
    with open(workdir / "pyproject.toml", "a") as fh:
        fh.write(f"""
[tool.mutmut]
source_paths = ["specops/"]
only_mutate = {_toml_list(target.mutate)}
also_copy = ["playbooks/"]
pytest_add_cli_args_test_selection = {_toml_list(tests)}
pytest_add_cli_args = ["-p", "no:cacheprovider", "-p", "no:randomly"]
use_git_change_detection = false
""")


def _generate(jobs: int) -> list[str]:
    """Every mutant's name (mutmut's own generation, run in this process: cwd is the workdir)."""
    from mutmut.__main__ import create_mutants, store_lines_covered_by_tests
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.mutation.trampoline import set_mutant_under_test
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths, walk_mutatable_files

    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    store_lines_covered_by_tests()
    create_mutants(jobs)
    set_mutant_under_test("")
    names: list[str] = []
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        names += list(data.exit_code_by_key)
    return sorted(names)


def _results() -> dict[str, str]:
    from mutmut.mutation.data import SourceFileMutationData
    from mutmut.stats import status_by_exit_code
    from mutmut.utils.file_utils import walk_mutatable_files

    out: dict[str, str] = {}
    for path in walk_mutatable_files():
        data = SourceFileMutationData(path=path)
        data.load()
        out.update({k: status_by_exit_code[v] for k, v in data.exit_code_by_key.items()})
    return out


def _diff(name: str) -> str:
    from mutmut.mutation.diff_apply import get_diff_for_mutant

    return get_diff_for_mutant(name)


def _changed_lines(diff: str) -> tuple[str, str]:
    body = [ln for ln in diff.splitlines() if not ln.startswith(("---", "+++", "@@"))]
    before = " ".join(ln[1:].strip() for ln in body if ln.startswith("-"))
    after = " ".join(ln[1:].strip() for ln in body if ln.startswith("+"))
    return before, after


def _function(name: str) -> str:
    return name.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]


def _equivalent(name: str, diff: str) -> Equivalent | None:
    before, after = _changed_lines(diff)
    for eq in EQUIVALENT:
        if eq.function == _function(name) and eq.before == before and eq.after == after:
            return eq
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("target", choices=sorted(TARGETS))
    ap.add_argument("--sample", type=int, default=None, help="mutants to run (0 = all; default per target)")
    ap.add_argument("--seed", type=int, default=16)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--ref", help="measure a git ref's code and tests instead of the worktree")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--also", action="append", default=[], metavar="TEST",
                    help="another test file to run each mutant against (e.g. tests/unit/test_patching.py)")
    args = ap.parse_args(argv)
    target = TARGETS[args.target]
    workdir = (args.workdir or REPO / ".mutation" / args.target).resolve()
    t0 = time.monotonic()
    _prepare(workdir, target, args.ref, args.also)
    os.chdir(workdir)
    names = _generate(args.jobs)
    if target.functions:
        import fnmatch

        names = [n for n in names if any(fnmatch.fnmatch(n, f) for f in target.functions)]
    size = target.sample if args.sample is None else args.sample
    chosen = sorted(random.Random(args.seed).sample(names, size)) if 0 < size < len(names) else names
    print(f"{len(names)} mutants of {', '.join(target.mutate)}; running {len(chosen)} (seed {args.seed})", flush=True)
    mutmut = [sys.executable, "-m", "mutmut"]
    with open(workdir / "mutmut-run.log", "w") as log:
        rc = subprocess.run([*mutmut, "run", "--max-children", str(args.jobs), *chosen], stdout=log,
                            stderr=subprocess.STDOUT).returncode
    statuses = _results()
    statuses = {n: statuses.get(n, "not checked") for n in chosen}
    if rc != 0 or all(s == "not checked" for s in statuses.values()):
        print(f"mutmut run failed (exit {rc}); see {workdir / 'mutmut-run.log'}")
        return 2
    detected = {"killed", "timeout", "segfault", "caught by type check"}
    killed = sum(1 for s in statuses.values() if s in detected)
    survivors = sorted(n for n, s in statuses.items() if s not in detected)
    equivalent: list[tuple[str, Equivalent]] = []
    print()
    for name in survivors:
        diff = _diff(name)
        eq = _equivalent(name, diff)
        if eq:
            equivalent.append((name, eq))
            continue
        print(f"== {name}: {statuses[name]}")
        print("\n".join(diff.splitlines()[2:]))
        print()
    for name, eq in equivalent:
        print(f"equivalent {name}: {eq.why}")
    total = len(chosen)
    print(f"\n{args.target}: {killed}/{total} killed, score {killed / total:.3f}; "
          f"{len(equivalent)} equivalent, adjusted score {killed / max(1, total - len(equivalent)):.3f}; "
          f"{len(survivors) - len(equivalent)} survivor(s) ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
