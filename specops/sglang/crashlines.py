"""The lines SGLang's own processes log when one of them dies or startup fails, read from
a release's source with `ast`, and the script that writes them into `crashdata.py`.

SGLang is four kinds of process (the launcher, the scheduler per rank, the tokenizer
manager, the detokenizer; a data-parallel controller with `--dp`); each catches what
kills it and logs one line before it signals the launcher and the whole tree goes down.
Those lines are string literals in the release's source, worded differently over the
releases ("Rank 0 scheduler is dead" up to 0.5.9, "Rank 0 scheduler died during
initialization (exit code: -9)" from 0.5.10), so they are read from each tree rather
than typed in by hand:

* a `logger.error/critical/exception(...)` message whose block also ends the process or
  the request for it (a `raise`, `kill_process_tree`, `send_signal`, `sys.exit`, `os._exit`,
  `os.kill`): the scheduler's "Scheduler hit an exception: ...", the sigquit handlers, the
  warmup's "Initialization failed. warmup error: ...";
* a `RuntimeError(...)` the launcher builds while it waits for its scheduler processes
  ("Initialization failed. Please see the error messages above.", the dead-rank error).

Why committed data (`crashdata.py`, written by `python -m specops.sglang.crashlines
--write`) and not read at run time: a log is judged where no tree is at hand (`logs
--errors` on a host whose tree was removed, a Slurm job's log, the readiness watch over
SSH, which would have to pull five 100-300 KB source files per launch), and a log must be
recognised whatever release wrote it, so the union over every supported release is what
matters. tests/unit/test_crash_corpus.py extracts again from each cached tree and fails
when the committed data differs.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from specops import pysource
from specops.hostfiles.treefiles import LocalTreeFiles, TreeFiles
from specops.sglang.source import ensure_tree

#: Where each process's death is written, relative to `python/sglang/srt/`.
PROCESS_FILES: tuple[tuple[str, str], ...] = (
    ("launcher", "entrypoints/engine.py"),
    ("launcher", "entrypoints/http_server.py"),
    ("scheduler", "managers/scheduler.py"),
    ("tokenizer", "managers/tokenizer_manager.py"),
    ("detokenizer", "managers/detokenizer_manager.py"),
    ("dp-controller", "managers/data_parallel_controller.py"),
    ("watchdog", "utils/watchdog.py"),
)
SRT = "python/sglang/srt/"
#: The releases the committed data is read from: one per layout change, as the suite reads
#: them (tests/support/sglang_trees.py), plus the last release of each CUDA major.
RELEASES = ("0.4.10.post2", "0.5.4", "0.5.9", "0.5.10.post1", "0.5.14", "0.5.19", "0.5.23")
DATA_MODULE = Path(__file__).with_name("crashdata.py")

_LOG_METHODS = {"error", "critical", "exception", "fatal"}
#: Calls after which the process is gone: these on any receiver, and `os.`/`sys.` exits.
_ENDERS = {"kill_process_tree", "send_signal"}
_OS_ENDERS = {"exit", "_exit", "kill", "killpg", "abort"}
_HOLE = "\0"
#: A message shorter than this (literal characters) would match ordinary lines.
MIN_LITERAL = 10


@dataclass(frozen=True)
class Message:
    """One line a dying SGLang process logs: its literal text with `{}` where values go."""

    text: str
    process: str
    file: str


# --------------------------------------------------------------------------- templates


def _template(node: ast.expr) -> str | None:
    """The message a string expression builds, `_HOLE` where a value is substituted;
    None when it is not built from string literals."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfgixX]|\{[^{}]*\}", _HOLE, node.value)
    if isinstance(node, ast.JoinedStr):
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                out.append(part.value)
            else:
                out.append(_HOLE)
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None and right is None else (left or _HOLE) + (right or _HOLE)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _template(node.func.value)
    return None


def _shown(template: str) -> str | None:
    """The template's first line as written (`{}` for a value), without a value at its end;
    None when too little of it is literal to tell it from other lines, or when it opens with
    a value glued to punctuation (the words are then the caller's, not this line's)."""
    first = template.split("\n", 1)[0]
    if not re.match(r"[A-Za-z]|\0 [a-z]", first):
        return None  # `f"{error_msg}, {req.rid=}"`
    parts = first.split(_HOLE)
    while parts and not parts[-1].strip():
        parts.pop()
    if not parts or sum(len(p.strip()) for p in parts) < MIN_LITERAL:
        return None
    parts[0], parts[-1] = parts[0].lstrip(), parts[-1].rstrip()
    return "{}".join(parts)


# --------------------------------------------------------------------------- the rules


def _call_name(node: ast.AST) -> str:
    if isinstance(node, ast.Call):
        f = node.func
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
    return ""


def _ends(stmt: ast.stmt, nested: bool = False) -> bool:
    """A statement after which this process is gone (or its caller is handed an exception).
    Inside an `if` only a kill or exit counts (`if not self.soft: ...send_signal(SIGQUIT)`):
    a guard's `raise` is about some other condition than the line logged beside it."""
    if isinstance(stmt, ast.Raise):
        return not nested
    if isinstance(stmt, ast.If):
        return not nested and any(_ends(s, nested=True) for s in stmt.body + stmt.orelse)
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)):
        return False
    name, f = _call_name(stmt.value), stmt.value.func
    if name in _ENDERS:
        return True
    return name in _OS_ENDERS and isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
        and f.value.id in ("os", "sys")


def _log_message(stmt: ast.stmt) -> ast.expr | None:
    if not (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and stmt.value.args):
        return None
    f = stmt.value.func
    if isinstance(f, ast.Attribute) and f.attr in _LOG_METHODS and isinstance(f.value, ast.Name) \
            and "log" in f.value.id.lower():
        return stmt.value.args[0]
    return None


def _blocks(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    """Every statement list in the module (bodies, handlers, else and finally blocks)."""
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody", "handlers"):
            block = getattr(node, name, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                yield block


def _logged_deaths(tree: ast.AST) -> Iterator[str]:
    for block in _blocks(tree):
        if not any(_ends(s) for s in block):
            continue
        for stmt in block:
            msg = _log_message(stmt)
            t = _template(msg) if msg is not None else None
            if t is not None:
                yield t


def _launcher_errors(tree: ast.AST) -> Iterator[str]:
    """RuntimeError messages the launcher builds in the functions that wait for its schedulers."""
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if "scheduler" not in fn.name and fn.name != "_launch_subprocesses":
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and _call_name(node) == "RuntimeError" and node.args:
                t = _template(node.args[0])
                if t is not None:
                    yield t


def extract(files: TreeFiles) -> list[Message]:
    """The death messages of one tree, in file order, none repeated."""
    out: list[Message] = []
    seen: set[str] = set()
    for process, rel in PROCESS_FILES:
        data = files.read(SRT + rel)
        if data is None:
            continue
        try:
            tree = pysource.parse(data.decode("utf-8", "replace"))
        except SyntaxError:
            continue
        found = list(_logged_deaths(tree))
        if process == "launcher":
            found += list(_launcher_errors(tree))
        for template in found:
            text = _shown(template)
            if text is not None and text not in seen:
                seen.add(text)
                out.append(Message(text, process, rel))
    return out


def union(per_release: Iterable[tuple[str, Sequence[Message]]]) -> list[tuple[Message, list[str]]]:
    """Messages over several releases, each with the releases that log it (first-seen order)."""
    merged: dict[str, tuple[Message, list[str]]] = {}
    for version, messages in per_release:
        for m in messages:
            merged.setdefault(m.text, (m, []))[1].append(version)
    return list(merged.values())


# --------------------------------------------------------------------------- the data file


def render_module(rows: Sequence[tuple[Message, list[str]]], releases: Sequence[str]) -> str:
    lines = [
        '"""Generated by `python -m specops.sglang.crashlines --write` from the SGLang trees of',
        f"releases {', '.join(releases)}: do not edit (see specops/sglang/crashlines.py).",
        "",
        "Each row: (message as logged, `{}` where a value goes; the process that logs it; its",
        'file under python/sglang/srt/; the releases whose source has it)."""',
        "",
        "MESSAGES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (",
    ]
    for m, versions in rows:
        lines.append(f"    ({m.text!r}, {m.process!r}, {m.file!r},")
        lines.append(f"     {tuple(versions)!r}),")
    lines.append(")")
    return "\n".join(lines) + "\n"


def generate(releases: Sequence[str] = RELEASES) -> str:
    per = [(v, extract(LocalTreeFiles(ensure_tree(v)))) for v in releases]
    return render_module(union(per), releases)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specops.sglang.crashlines",
                                     description="Read SGLang's death messages from its release trees.")
    parser.add_argument("--write", action="store_true", help=f"rewrite {DATA_MODULE.name}")
    parser.add_argument("--check", action="store_true", help=f"exit 1 when {DATA_MODULE.name} is stale")
    args = parser.parse_args(argv)
    text = generate()
    if args.write:
        DATA_MODULE.write_text(text)
        return 0
    if args.check:
        return 0 if DATA_MODULE.exists() and DATA_MODULE.read_text() == text else 1
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
