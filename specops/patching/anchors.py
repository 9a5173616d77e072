"""Resolve an anchor to whole source lines using the syntax tree, never line numbers.

A match is a `Span`: the 1-based first/last line of the anchored statement (decorators
included for definitions; the enclosing statement for a call, so insertion goes after
the call's closing parenthesis) and the indentation of its first line.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from specops import pysource
from specops.patching.model import Anchor


@dataclass(frozen=True)
class Span:
    first: int  # 1-based, inclusive
    last: int  # 1-based, inclusive
    indent: str


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")


def split_lines(text: str) -> list[str]:
    """Lines with their ends, split where Python counts lines (\\r\\n, \\r, \\n) and nowhere
    else: str.splitlines() also splits at form feeds and other separators, which would put
    every line after one off from the syntax tree's line numbers."""
    return _LINE.findall(text)


def _indent_of(line: str) -> str:
    return line[: len(line) - len(line.lstrip(" \t"))]


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _first_line(node: ast.stmt) -> int:
    decos: list[ast.expr] = getattr(node, "decorator_list", None) or []  # only defs and classes have one
    return min([node.lineno] + [d.lineno for d in decos])


def _span(node: ast.stmt, lines: list[str]) -> Span:
    first = _first_line(node)
    return Span(first, node.end_lineno or node.lineno, _indent_of(lines[first - 1]))


def _parents(tree: ast.AST) -> dict[ast.AST, ast.AST]:
    out: dict[ast.AST, ast.AST] = {}
    for parent in ast.walk(tree):
        for child in ast.iter_child_nodes(parent):
            out[child] = parent
    return out


def _qualnames(tree: ast.Module) -> list[tuple[str, ast.AST]]:
    """(qualified name, def node) for every function and class, e.g. 'EAGLEWorker.draft'."""
    out: list[tuple[str, ast.AST]] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                out.append((qual, child))
                visit(child, qual + ".")
            elif isinstance(child, ast.stmt):
                visit(child, prefix)  # defs under if/try at the same level

    visit(tree, "")
    return out


def _is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _target_names(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.AnnAssign):
        return [stmt.target.id] if isinstance(stmt.target, ast.Name) else []
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    return []


def _statements_in(node: ast.AST) -> list[ast.stmt]:
    return [n for n in ast.walk(node) if isinstance(n, ast.stmt) and n is not node]


def _field_spans(anchor: Anchor, tree: ast.Module, lines: list[str]) -> list[Span]:
    out = []
    for qual, node in _qualnames(tree):
        if isinstance(node, ast.ClassDef) and (qual == anchor.cls or node.name == anchor.cls):
            out += [_span(s, lines) for s in node.body if anchor.field in _target_names(s)]
    return out


def _call_spans(anchor: Anchor, tree: ast.Module, lines: list[str]) -> list[Span]:
    """The whole statement holding each matching call (insertion goes after `end_lineno`)."""
    parents = _parents(tree)
    out: list[Span] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or _dotted(node.func) != anchor.call:
            continue
        if anchor.arg is not None:
            first = node.args[0] if node.args else None
            if not (isinstance(first, ast.Constant) and first.value == anchor.arg):
                continue
        stmt: ast.AST = node
        while not isinstance(stmt, ast.stmt):
            stmt = parents[stmt]
        span = _span(stmt, lines)
        if span not in out:
            out.append(span)
    return out


def _position_span(anchor: Anchor, fn: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> Span:
    body = [s for s in fn.body if not _is_docstring(s)] or fn.body
    stmt = body[0] if anchor.position == "body_start" else fn.body[-1]
    span = _span(stmt, lines)
    if anchor.position == "body_start":  # before the comments that lead the body
        lead = span.first
        while lead - 1 > fn.lineno and lines[lead - 2].strip().startswith("#"):
            lead -= 1
        span = Span(lead, span.last, span.indent)
    return span


def _function_spans(anchor: Anchor, tree: ast.Module, source: str, lines: list[str]) -> list[Span]:
    defs = [n for q, n in _qualnames(tree)
            if q == anchor.function and isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    out: list[Span] = []
    for fn in defs:
        if anchor.position:
            out.append(_position_span(anchor, fn, lines))
        elif anchor.statement:
            pattern = re.compile(anchor.statement)
            hits = [s for s in _statements_in(fn)
                    if pattern.search(ast.get_source_segment(source, s) or "")]
            # innermost only: a compound statement matches through its children
            inner = [s for s in hits if not any(o is not s and o in _statements_in(s) for o in hits)]
            out += [_span(s, lines) for s in inner]
        else:
            out.append(_span(fn, lines))
    return out


def resolve_python(anchor: Anchor, source: str, tree: ast.Module | None = None) -> list[Span]:
    """All spans the anchor matches in `source` (the caller decides what 0 or >1 means)."""
    tree = tree or pysource.parse(source)
    lines = [ln.rstrip("\r\n") for ln in split_lines(source)]
    if anchor.kind == "field":
        return _field_spans(anchor, tree, lines)
    if anchor.kind == "call":
        return _call_spans(anchor, tree, lines)
    if anchor.kind == "function":
        return _function_spans(anchor, tree, source, lines)
    if anchor.kind == "assign":
        return [_span(s, lines) for s in tree.body if anchor.assign in _target_names(s)]
    if anchor.kind == "text":
        return resolve_text(anchor, source)
    raise ValueError(f"anchor kind {anchor.kind} has no span")


def resolve_text(anchor: Anchor, source: str) -> list[Span]:
    """Lines equal to the anchor text (trailing whitespace ignored)."""
    want = (anchor.text or "").rstrip()
    return [Span(i, i, _indent_of(line)) for i, line in enumerate(split_lines(source), 1)
            if line.rstrip() == want]
