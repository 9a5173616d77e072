"""Plan, apply and revert a patch set on a tree, all-or-nothing.

Every file's new content is built and compiled in memory first; only when every edit
resolves and every file compiles is anything written (temp file + rename, backup of the
original under `<tree>/.specops/patches/<set>/`). If a write or the set's verify fails,
every file of the set is put back. A manifest of what was inserted lets `revert` work
by removing exactly that text when the backups are gone.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import shlex
import subprocess
import tempfile
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal

from specops import pysource
from specops.hostfiles.paths import PATCH_STATE_DIR, TREE_STATE_DIR
from specops.hostfiles.treefiles import TreeFiles
from specops.patching.anchors import Span, resolve_python, resolve_text, split_lines
from specops.patching.checks import CHECKS
from specops.patching.manifest import EditRecord, FileEntry, PatchManifest, manifest_path
from specops.patching.manifest import parse as parse_manifest
from specops.patching.manifest import read as read_manifest
from specops.patching.manifest import state_dir as set_state_dir
from specops.patching.manifest import write as write_manifest
from specops.patching.model import Edit, PatchError, PatchSet, diff_files
from specops.secrets import clip
from specops.sglang.layout import SGLangLayout, detect_layout
from specops.sglang.version import in_range, try_parse
from specops.transport.base import CommandResult, Transport

#: What planning, applying or reverting found for one edit.
EditStatus = Literal["new", "already applied", "blocked", "skipped", "reverted", "not applied"]
NEW: EditStatus = "new"
APPLIED: EditStatus = "already applied"
BLOCKED: EditStatus = "blocked"
SKIPPED: EditStatus = "skipped"
REVERTED: EditStatus = "reverted"
NOT_APPLIED: EditStatus = "not applied"
STATE_DIR = PATCH_STATE_DIR


@dataclass
class EditResult:
    edit: str
    file: str
    status: EditStatus
    reason: str = ""
    line: int = 0  # where the edit lands (1-based), 0 when unknown


@dataclass
class PatchPlan:
    """What applying a set would do; nothing is written while planning."""

    patchset: PatchSet
    results: list[EditResult]
    originals: dict[str, bytes | None]
    new_contents: dict[str, bytes]  # only files whose bytes change
    records: list[EditRecord] = field(default_factory=list)  # manifest entries for new edits
    layout: SGLangLayout | None = None
    #: planned from the pristine backups: the tree carries another version of this set
    #: (an older specops's), which the new one replaces whole
    replaces_earlier: bool = False

    @property
    def blocked(self) -> list[EditResult]:
        return [r for r in self.results if r.status == BLOCKED]

    @property
    def diff(self) -> str:
        out: list[str] = []
        for rel, new in self.new_contents.items():
            old = (self.originals.get(rel) or b"").decode("utf-8", errors="replace")
            out += difflib.unified_diff(old.splitlines(True), new.decode("utf-8").splitlines(True),
                                        f"a/{rel}", f"b/{rel}")
        return "".join(line if line.endswith("\n") else line + "\n" for line in out)


@dataclass
class PatchReport:
    patchset: str
    action: str  # "apply" | "revert"
    results: list[EditResult]
    changed_files: list[str]
    verify: list[CommandResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.changed_files)

    def summary(self) -> str:
        lines = [f"{self.action} {self.patchset}: {len(self.changed_files)} file(s) changed"]
        lines += [f"  {r.edit:<28} {r.status}{': ' + r.reason if r.reason else ''}" for r in self.results]
        lines += [f"  verify ok: {clip(c.command, 100, keep='start')}" for c in self.verify]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


# --------------------------------------------------------------------------- applicability


def check_applicable(patchset: PatchSet, layout: SGLangLayout) -> str | None:
    """Why the set does not fit this tree, or None when it does."""
    ap = patchset.applies_to
    feats = layout.features()
    if ap.args_layout and layout.args_layout not in ap.args_layout:
        return f"server-args layout is {layout.args_layout!r}, the set needs {' or '.join(ap.args_layout)}"
    for need in ap.requires:
        if not feats.get(need):
            return f"the tree has no {need.replace('_', ' ')}"
    for refuse in ap.refuse_if:
        if feats.get(refuse):
            return f"the tree has {refuse.replace('_', ' ')}"
    if try_parse(layout.version) is not None:  # an unreadable version leaves the features to decide
        assert layout.version is not None
        if ap.min_version and not in_range(layout.version, ap.min_version, None):
            return f"version {layout.version} is older than {ap.min_version}"
        if ap.max_version and not in_range(layout.version, None, ap.max_version):
            return f"version {layout.version} is newer than {ap.max_version}"
    return None


def _refuse(patchset: PatchSet, layout: SGLangLayout, reason: str) -> PatchError:
    return PatchError(f"patch set {patchset.name} does not apply to this tree "
                      f"(sglang {layout.version or 'unknown version'}): {reason}",
                      where=patchset.source or patchset.name, hint=patchset.applies_to.hint)


# --------------------------------------------------------------------------- text helpers


def _newline(text: str) -> str:
    return "\r\n" if "\r\n" in text else "\n"


def _block(edit_text: str, indent: str, nl: str) -> list[str]:
    body = textwrap.dedent(edit_text).rstrip("\n")
    return [(indent + ln if ln.strip() else "") + nl for ln in body.split("\n")]


def _find_block(lines: list[str], block: list[str]) -> list[int]:
    """0-based start indexes where `block` occurs as whole lines (trailing whitespace ignored)."""
    want = [b.rstrip() for b in block]
    n = len(want)
    return [i for i in range(len(lines) - n + 1)
            if lines[i].rstrip() == want[0] and [ln.rstrip() for ln in lines[i:i + n]] == want]


def _same(lines: list[str], start: int, block: list[str]) -> bool:
    if start < 0 or start + len(block) > len(lines):
        return False
    return [ln.rstrip() for ln in lines[start:start + len(block)]] == [b.rstrip() for b in block]


def _compile_error(text: str, rel: str) -> str | None:
    err = pysource.compile_error(text, rel)
    return f"result does not compile: {err}" if err is not None else None


def _sha(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


# --------------------------------------------------------------------------- unified diffs


def _git_apply(diff: str, contents: dict[str, bytes | None], *args: str) -> tuple[bool, dict[str, bytes | None], str]:
    """Run `git apply ARGS` on a scratch copy of the files; returns (ok, new contents, error)."""
    with tempfile.TemporaryDirectory(prefix="specops-diff-") as tmp:
        for rel, data in contents.items():
            if data is not None:
                p = Path(tmp, rel)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_bytes(data)
        patch = Path(tmp, ".specops.patch")
        patch.write_text(diff if diff.endswith("\n") else diff + "\n")
        proc = subprocess.run(["git", "apply", *args, str(patch)], cwd=tmp, capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0:
            return False, {}, (proc.stderr or proc.stdout).strip().splitlines()[0:1][0] if (proc.stderr or proc.stdout).strip() else "git apply failed"
        out = {}
        for rel in contents:
            p = Path(tmp, rel)
            out[rel] = p.read_bytes() if p.exists() else None
        return True, out, ""


# --------------------------------------------------------------------------- planning


def _resolve(edit: Edit, text: str, rel: str) -> list[Span]:
    if edit.anchor.kind == "text":
        return resolve_text(edit.anchor, text)
    return resolve_python(edit.anchor, text)


def _insertion(edit: Edit, span: Span) -> int:
    """0-based line index where an insert edit's block goes."""
    return span.last if edit.op == "insert_after" else span.first - 1


def _applied_at(edit: Edit, lines: list[str], span: Span, block: list[str]) -> int | None:
    """Start index of the block when it already sits at its anchor (on either side of the
    anchor line, since a body_start/body_end anchor becomes the inserted block itself)."""
    if edit.op == "insert_after":
        candidates = [span.last, span.last - len(block)]
    else:
        candidates = [span.first - 1 - len(block), span.first - 1]
    for c in candidates:
        if _same(lines, c, block):
            return c
    return None


def _plan_file(ps: PatchSet, rel: str, edits: list[Edit], original: bytes | None,
               manifest: PatchManifest | None) -> tuple[list[EditResult], bytes | None, list[EditRecord]]:
    results: list[EditResult] = []
    records: list[EditRecord] = []
    if original is None:
        for e in edits:
            if e.optional:
                results.append(EditResult(e.name, rel, SKIPPED, "file not in this tree"))
            else:
                results.append(EditResult(e.name, rel, BLOCKED, f"{rel} does not exist in the tree"))
        return results, None, records
    try:
        text = original.decode("utf-8")
    except UnicodeDecodeError:
        return [EditResult(e.name, rel, BLOCKED, f"{rel} is not UTF-8 text") for e in edits], None, records
    is_py = rel.endswith(".py")
    if is_py and _compile_error(text, rel):
        return [EditResult(e.name, rel, BLOCKED, f"{rel} does not compile before patching")
                for e in edits], None, records
    nl = _newline(text)
    added_break = False  # the file had no final line break and an edit gave it one
    done_before = {r.edit for r in manifest.edits} if manifest is not None else set()
    for edit in edits:
        where = f"{edit.anchor.describe()} in {rel}"
        if edit.op == "diff":
            step = _plan_diff_edit(edit, rel, text)
        elif edit.anchor.kind != "text" and not is_py:
            step = _Planned(EditResult(edit.name, rel, BLOCKED, "syntax-tree anchors need a .py file; use a text anchor"))
        else:
            step = _plan_text_edit(edit, rel, text, nl, where, edit.name in done_before)
        results.append(step.result)
        if step.new_text is None:
            continue
        added_break = added_break or step.added_break
        if is_py:
            compile_err = _compile_error(step.new_text, rel)
            if compile_err:
                results[-1] = EditResult(edit.name, rel, BLOCKED, f"{compile_err} (edit at {where})",
                                         results[-1].line)
                continue
        if step.record is not None:
            records.append(step.record)
        text = step.new_text
        _shift_lines(results[:-1], *step.shift)
    # the file had no final line break: neither has the result
    text = _drop_final_break(text, nl) if added_break else text
    new_bytes = text.encode("utf-8")
    return results, (new_bytes if new_bytes != original else None), records


@dataclass
class _Planned:
    """One edit planned against the file's current text: its result, and the new text
    (None: nothing changes), the manifest record, and where lines moved."""

    result: EditResult
    new_text: str | None = None
    record: EditRecord | None = None
    shift: tuple[int, int] = (0, 0)  # (after line, lines added)
    added_break: bool = False


def _plan_diff_edit(edit: Edit, rel: str, text: str) -> _Planned:
    assert edit.diff is not None
    ok, out, err = _git_apply(edit.diff, {rel: text.encode()}, "--check")
    if ok:
        ok, out, err = _git_apply(edit.diff, {rel: text.encode()})
        return _Planned(EditResult(edit.name, rel, NEW), (out[rel] or b"").decode(),
                        EditRecord(edit=edit.name, file=rel, op="diff", diff=edit.diff))
    if _git_apply(edit.diff, {rel: text.encode()}, "--reverse", "--check")[0]:
        return _Planned(EditResult(edit.name, rel, APPLIED))
    return _Planned(EditResult(edit.name, rel, BLOCKED, f"git apply --check: {err}"))


def _plan_text_edit(edit: Edit, rel: str, text: str, nl: str, where: str, done_before: bool) -> _Planned:
    lines = split_lines(text)
    breaks = bool(lines) and not lines[-1].endswith(("\n", "\r"))
    if breaks:
        lines[-1] += nl
    spans = _resolve(edit, text, rel)
    block = _block(edit.text, "", nl) if edit.op != "delete" else []
    if edit.op == "replace":
        # the replacement, once present with any indentation, means applied
        hits = [i for i in range(len(lines)) if _same_dedented(lines, i, block)]
        if len(hits) == 1 and (not spans or _span_inside(spans, hits[0], len(block))):
            return _Planned(EditResult(edit.name, rel, APPLIED, line=hits[0] + 1))
    if edit.op == "delete" and not spans and done_before:
        return _Planned(EditResult(edit.name, rel, APPLIED))
    if len(spans) != 1:
        what = "matches nothing" if not spans else \
            f"matches {len(spans)} places (lines {', '.join(str(n) for n in sorted(s.first for s in spans))})"
        return _Planned(EditResult(edit.name, rel, BLOCKED, f"anchor {where} {what}"))
    span = spans[0]
    block = _block(edit.text, span.indent, nl) if edit.op != "delete" else []
    if edit.op in ("insert_after", "insert_before"):
        at = _applied_at(edit, lines, span, block)
        if at is not None:
            return _Planned(EditResult(edit.name, rel, APPLIED, line=at + 1))
        elsewhere = _find_block(lines, block)
        if elsewhere:
            return _Planned(EditResult(edit.name, rel, BLOCKED, f"its text is already in {rel} at line "
                                                                f"{elsewhere[0] + 1}, not at its anchor ({where})"))
        idx = _insertion(edit, span)
        lines[idx:idx] = block
        record = EditRecord(edit=edit.name, file=rel, op=edit.op, at=idx + 1, added="".join(block), removed="")
        return _Planned(EditResult(edit.name, rel, NEW, line=idx + 1), "".join(lines), record,
                        (idx, len(block)), breaks)
    removed = lines[span.first - 1: span.last]  # replace / delete
    lines[span.first - 1: span.last] = block
    record = EditRecord(edit=edit.name, file=rel, op=edit.op, at=span.first, added="".join(block),
                        removed="".join(removed))
    return _Planned(EditResult(edit.name, rel, NEW, line=span.first), "".join(lines), record,
                    (span.last, len(block) - len(removed)), breaks)


def _shift_lines(earlier: list[EditResult], after: int, delta: int) -> None:
    """An edit added `delta` lines after line `after`: earlier edits' lines become lines of
    the final file, the one the user opens."""
    for r in earlier:
        if r.line > after:
            r.line += delta


def _drop_final_break(text: str, nl: str) -> str:
    return text[: -len(nl)] if text.endswith(nl) else text


def _like_final_break_of(old: str, new: str) -> str:
    """`new`, without a final line break when `old` (the patched file) has none."""
    return _drop_final_break(new, _newline(old)) if old and not old.endswith(("\n", "\r")) else new


def _same_dedented(lines: list[str], start: int, block: list[str]) -> bool:
    if start + len(block) > len(lines) or not block:
        return False
    got = textwrap.dedent("".join(lines[start:start + len(block)])).splitlines()
    return [g.rstrip() for g in got] == [b.rstrip() for b in textwrap.dedent("".join(block)).splitlines()]


def _span_inside(spans: list[Span], start: int, n: int) -> bool:
    return all(start < s.first <= start + n for s in spans)


def state_dir(patchset: PatchSet | str) -> str:
    return set_state_dir(patchset if isinstance(patchset, str) else patchset.name)


def plan(patchset: PatchSet, files: TreeFiles, layout: SGLangLayout | None = None,
         check_layout: bool = True) -> PatchPlan:
    """Resolve every edit and build every new file in memory. Raises PatchError only when
    the set does not apply to this tree's layout; anchor problems are `blocked` results."""
    manifest = read_manifest(files, patchset.name)
    if check_layout:
        layout = layout or detect_layout(files)
        reason = check_applicable(patchset, layout)
        # a tree exactly as this set's apply left it was judged before the apply: its edits may
        # have changed the version read since (setuptools-scm names a patched checkout of tag
        # v0.5.14 0.5.15.dev0+g<commit>.d<date> in the _version.py an editable install writes)
        if reason and not (manifest and _pristine_backups(patchset, files, manifest) is not None):
            raise _refuse(patchset, layout, reason)
    current = _plan_on(patchset, files, {}, manifest, layout)
    if manifest and _earlier_version(current, manifest):
        pristine = _pristine_backups(patchset, files, manifest)
        if pristine is not None:
            fresh = _plan_on(patchset, files, pristine, None, layout)
            if not fresh.blocked:
                return fresh
    return current


def _earlier_version(current: PatchPlan, manifest: PatchManifest) -> bool:
    """Whether the tree carries another version of the set than this one: the plain plan is
    blocked, or an edit the manifest says was applied is gone from the set or would now be
    applied again (its text or anchor changed). A set that only grew is not another version:
    its new edits go on top."""
    status = {r.edit: r.status for r in current.results}
    return bool(current.blocked) or any(status.get(rec.edit or "", NEW) not in (APPLIED, SKIPPED)
                                        for rec in manifest.edits)


def _pristine_backups(patchset: PatchSet, files: TreeFiles, manifest: PatchManifest) -> dict[str, bytes] | None:
    """The originals of every file the manifest records, when each file is still exactly as
    that apply left it and its backup is intact: then the set (in whatever version it now
    is) can be planned from them. None when any file was changed since, or a backup is gone."""
    out: dict[str, bytes] = {}
    for rel, entry in manifest.files.items():
        backup = files.read(manifest.backup_of(rel, patchset.name))
        current = files.read(rel)
        if backup is None or current is None or _sha(backup) != entry.original_sha256 \
                or _sha(current) != entry.patched_sha256:
            return None
        out[rel] = backup
    return out or None


def _plan_on(patchset: PatchSet, files: TreeFiles, pristine: dict[str, bytes], manifest: PatchManifest | None,
             layout: SGLangLayout | None) -> PatchPlan:
    """The plan against the tree's files, or, for the files in `pristine`, against those
    originals (a file an earlier version patched and this one does not is restored)."""
    results: list[EditResult] = []
    originals: dict[str, bytes | None] = {}
    new_contents: dict[str, bytes] = {}
    records: list[EditRecord] = []
    by_file: dict[str, list[Edit]] = {}
    for e in patchset.edits:
        by_file.setdefault(e.file, []).append(e)
    order = {e.name: i for i, e in enumerate(patchset.edits)}
    for rel, edits in by_file.items():
        originals[rel] = files.read(rel)
        base = pristine.get(rel, originals[rel])
        res, new, recs = _plan_file(patchset, rel, edits, base, manifest)
        results += res
        records += recs
        if new is None and base != originals[rel] and base is not None:
            new = base  # no edit of the set applies here any more: the original comes back
        if new is not None and new != originals[rel]:
            new_contents[rel] = new
    for rel, data in pristine.items():
        if rel not in by_file:
            originals[rel] = files.read(rel)
            if data != originals[rel]:
                new_contents[rel] = data
    results.sort(key=lambda r: order[r.edit])
    return PatchPlan(patchset, results, originals, new_contents, records, layout, replaces_earlier=bool(pristine))


# --------------------------------------------------------------------------- apply / revert


def _render(cmd: list[str] | str, values: dict[str, str], file_list: list[str]) -> list[str] | str:
    """Fill {tree}, {python}, {files}; other braces (Python code in scripts) are left alone."""
    pattern = re.compile(r"\{(tree|python|files)\}")
    if isinstance(cmd, str):
        quoted = dict(values, files=" ".join(shlex.quote(f) for f in file_list))
        return pattern.sub(lambda m: quoted[m.group(1)] if m.group(1) == "files"
                           else shlex.quote(quoted[m.group(1)]), cmd)
    out: list[str] = []
    for arg in cmd:
        if arg == "{files}":
            out += file_list
        else:
            out.append(pattern.sub(lambda m: " ".join(file_list) if m.group(1) == "files"
                                   else values[m.group(1)], arg))
    return out


def verify_commands(patchset: PatchSet, files: TreeFiles, python: str, tree: str) -> list[list[str] | str]:
    """The set's verify commands as they will run (in `tree`), in order; a built-in check
    (specops reads the tree's files itself) is shown as a bash comment naming it."""
    touched = [f"{tree.rstrip('/')}/{rel}" for rel in patchset.files
               if rel.endswith(".py") and files.exists(rel)]
    return [_render(v.run, {"tree": tree, "python": python}, touched) if v.run is not None
            else check_line(v.check or "") for v in patchset.verify]


CHECK_PREFIX = "# specops check "


def check_line(check: str) -> str:
    """How a built-in check stands among the verify commands (describe, journal, report)."""
    return f"{CHECK_PREFIX}{check} (reads the tree's files; runs nothing on the host)"


def is_check_line(cmd: list[str] | str) -> bool:
    return isinstance(cmd, str) and cmd.startswith(CHECK_PREFIX)


def _run_check(patchset: PatchSet, name: str, check: str, files: TreeFiles, host: str) -> CommandResult:
    started = time.monotonic()
    ok, lines = CHECKS[check](files)
    result = CommandResult(check_line(check), 0 if ok else 1, "\n".join(lines), "", time.monotonic() - started)
    if not ok:
        raise PatchError(f"patch set {patchset.name}: verify '{name}' failed: " + "; ".join(lines[:3]),
                         where=f"host {host}", hint="every file of the set was restored")
    return result


#: How a verify command treats an SGLang runtime it cannot import (env SPECOPS_SGLANG_RUNTIME):
#: "required" fails (engine sglang, run in the environment the tree is installed in),
#: "deferred" says the install step is still to come, "optional" skips (engine sim, a bare tree).
RUNTIME_MODES = ("required", "deferred", "optional")


def run_verify(patchset: PatchSet, files: TreeFiles, transport: Transport, python: str,
               tree: str, runtime: str = "optional") -> list[CommandResult]:
    """Run the set's verify commands on the host; raise PatchError at the first failure."""
    if runtime not in RUNTIME_MODES:
        raise ValueError(f"runtime must be one of {RUNTIME_MODES}, not {runtime!r}")
    done: list[CommandResult] = []
    for v, cmd in zip(patchset.verify, verify_commands(patchset, files, python, tree), strict=True):
        if v.check is not None:
            done.append(_run_check(patchset, v.name, v.check, files, transport.name))
            continue
        res = transport.run(cmd, timeout=v.timeout, cwd=tree, env={"SPECOPS_SGLANG_RUNTIME": runtime})
        if not res.ok:
            why = "timed out" if res.timed_out else f"exit {res.rc}"
            raise PatchError(f"patch set {patchset.name}: verify '{v.name}' failed ({why}): "
                             f"{res.tail(5) or res.command}", where=f"host {transport.name}",
                             hint="every file of the set was restored")
        done.append(res)
    return done


def _restore(files: TreeFiles, originals: dict[str, bytes | None], written: list[str]) -> None:
    for rel in written:
        data = originals.get(rel)
        if data is None:
            files.remove(rel)
        else:
            files.write(rel, data)


def apply(patchset: PatchSet, files: TreeFiles, transport: Transport, *,
          python: str = "python3", tree: str | None = None, run_verify_cmds: bool = True,
          runtime: str = "optional", before_write: Callable[[], None] | None = None) -> PatchReport:
    """Apply the whole set or nothing. Verify commands run through `transport` (the caller's:
    the host the tree is on, this machine for a local tree) in `tree` (default: files.root).
    On any failure every file is restored and a PatchError names the set, file and anchor.
    `before_write` runs once the plan says a file will change, before any is written (it may
    refuse by raising)."""
    p = plan(patchset, files)
    if p.blocked:
        first = p.blocked[0]
        others = f" (and {len(p.blocked) - 1} more blocked edit(s))" if len(p.blocked) > 1 else ""
        raise PatchError(f"patch set {patchset.name}, file {first.file}, edit {first.edit}: "
                         f"{first.reason}{others}; nothing was changed",
                         where=patchset.source or patchset.name)
    report = PatchReport(patchset.name, "apply", p.results, list(p.new_contents))
    if p.replaces_earlier:
        report.notes.append("the tree carried another version of this set: planned from the originals "
                            "its apply kept, so the new version replaces it whole")
    if not p.new_contents:
        report.notes.append("already applied; nothing to do")
        return report
    if before_write is not None:
        before_write()
    sdir = state_dir(patchset)
    old_manifest_bytes, manifest = _manifest_to_update(patchset, files)
    created: list[str] = []
    written: list[str] = []
    retired: list[str] = []  # backups of files restored whole, removed once all went well
    try:
        for rel, new in p.new_contents.items():
            entry = manifest.files.get(rel)
            backup = f"{sdir}/backups/{rel}"
            if entry is None or not files.exists(backup):
                files.write(backup, p.originals[rel] or b"")
                created.append(backup)
                entry = FileEntry(original_sha256=_sha(p.originals[rel]), backup=backup)
            entry.patched_sha256 = _sha(new)
            manifest.files[rel] = entry
        if p.replaces_earlier:  # the earlier version's records and the files it alone patched go
            manifest.edits = []
            for rel in [r for r in manifest.files if not any(e.file == r for e in patchset.edits)]:
                retired.append(manifest.backup_of(rel, patchset.name))
                manifest.files.pop(rel)
        manifest.edits = [r for r in manifest.edits if r.edit not in {x.edit for x in p.records}]
        manifest.edits += p.records
        created.append(write_manifest(files, manifest, patchset.name))
        for rel, new in p.new_contents.items():
            written.append(rel)
            files.write(rel, new)
        if run_verify_cmds and patchset.verify:
            report.verify = run_verify(patchset, files, transport, python,
                                       tree or files.root, runtime)
    except BaseException:
        _restore(files, p.originals, written)
        for path in created:
            if path.endswith("manifest.json") and old_manifest_bytes is not None:
                files.write(path, old_manifest_bytes)
            else:
                files.remove(path)
        raise
    for path in retired:
        files.remove(path)
    return report


def _manifest_to_update(patchset: PatchSet, files: TreeFiles) -> tuple[bytes | None, PatchManifest]:
    """The manifest's bytes as they are (put back if the apply fails) and the manifest the
    apply adds to: the tree's, else a new one. One that cannot be read stops the apply."""
    path = manifest_path(patchset.name)
    old = files.read(path)
    try:
        return old, parse_manifest(old) if old else PatchManifest(set=patchset.name)
    except ValueError as exc:
        raise PatchError(f"patch set {patchset.name}: {path} cannot be read ({exc}); nothing was changed",
                         where=patchset.source or patchset.name) from None


def _undo_text(lines: list[str], rec: EditRecord) -> bool:
    """Swap a manifest record's added text back to what it removed; True when done."""
    added = (rec.added or "").splitlines(True)
    removed = (rec.removed or "").splitlines(True)
    if not added:  # a delete: put the removed text back at its recorded line
        at = (rec.at or 0) - 1
        if at == len(lines) and lines and not lines[-1].endswith(("\n", "\r")):
            lines[-1] += _newline("".join(lines))  # it was the last line of a file without a final break
        if 0 <= at <= len(lines):
            lines[at:at] = removed
            return True
        return False
    at = (rec.at or 0) - 1
    starts = [at] if _same(lines, at, added) else _find_block(lines, added)
    if len(starts) != 1:
        return False
    lines[starts[0]:starts[0] + len(added)] = removed
    return True


def revert(patchset: PatchSet, files: TreeFiles) -> PatchReport:
    """Restore every file of the set byte for byte: from the backups, or, when they are
    gone, by removing exactly the inserted text (manifest records or the set's anchors)."""
    sdir = state_dir(patchset)
    manifest = read_manifest(files, patchset.name) or PatchManifest()
    results: list[EditResult] = []
    restored: dict[str, bytes] = {}
    originals: dict[str, bytes | None] = {}
    notes: list[str] = []
    for rel in patchset.files:
        current = files.read(rel)
        originals[rel] = current
        entry = manifest.files.get(rel) or FileEntry()
        backup = files.read(manifest.backup_of(rel, patchset.name))
        file_edits = [e for e in patchset.edits if rel == e.file or (e.op == "diff" and rel in _diff_rel(e))]
        if current is None:
            results += [EditResult(e.name, rel, SKIPPED, "file not in this tree") for e in file_edits]
            continue
        if backup is not None and (entry.original_sha256 in (None, _sha(backup))):
            if current != backup:
                if entry.patched_sha256 and _sha(current) != entry.patched_sha256:
                    notes.append(f"{rel} changed after the patch; restored the backup anyway")
                restored[rel] = backup
            results += [EditResult(e.name, rel, REVERTED if current != backup else NOT_APPLIED,
                                   "from backup") for e in file_edits]
            continue
        new = _revert_without_backup(patchset, rel, current, file_edits, manifest, results)
        if entry.original_sha256 and _sha(new) != entry.original_sha256 and new != current:
            notes.append(f"{rel}: text removed, but the result differs from the recorded original")
        if new != current:
            restored[rel] = new
    order = {e.name: i for i, e in enumerate(patchset.edits)}
    results.sort(key=lambda r: order.get(r.edit, 0))  # edits were undone last first
    blocked = [r for r in results if r.status == BLOCKED]
    if blocked:
        raise PatchError(f"revert of {patchset.name}, file {blocked[0].file}, edit {blocked[0].edit}: "
                         f"{blocked[0].reason}; nothing was changed", where=patchset.source or patchset.name)
    written: list[str] = []
    try:
        for rel, data in restored.items():
            written.append(rel)
            files.write(rel, data)
    except BaseException:
        _restore(files, originals, written)
        raise
    for rel in manifest.files:
        files.remove(manifest.backup_of(rel, patchset.name))
    for rel in patchset.files:
        files.remove(f"{sdir}/backups/{rel}")
    files.remove(f"{sdir}/manifest.json")
    files.prune(TREE_STATE_DIR)  # leave no empty .specops/patches/<set>/backups/... behind
    return PatchReport(patchset.name, "revert", results, list(restored), notes=notes)


def _revert_without_backup(patchset: PatchSet, rel: str, current: bytes, file_edits: list[Edit],
                           manifest: PatchManifest, results: list[EditResult]) -> bytes:
    """The file with exactly the set's inserted text removed (manifest records, else the
    set's anchors), last edit first; a result that would not compile changes nothing."""
    text = current.decode("utf-8")
    lines = split_lines(text)
    recs = {r.edit: r for r in manifest.edits if r.file == rel and r.edit is not None}
    for edit in reversed(file_edits):
        status, reason = _revert_edit(edit, rel, lines, recs.get(edit.name))
        results.append(EditResult(edit.name, rel, status, reason))
    new = _like_final_break_of(text, "".join(lines)).encode("utf-8")
    if rel.endswith(".py"):
        err = _compile_error(new.decode(), rel)
        if err:
            raise PatchError(f"revert of {patchset.name}: {rel} would not compile after removing "
                             f"the inserted text ({err}); nothing was changed", where=patchset.source or patchset.name)
    return new


def _diff_rel(edit: Edit) -> list[str]:
    return diff_files(edit.diff)


def _revert_edit(edit: Edit, rel: str, lines: list[str], rec: EditRecord | None) -> tuple[EditStatus, str]:
    """Undo one edit in `lines` (in place) without a backup."""
    text = "".join(lines)
    if edit.op == "diff":
        ok, out, _ = _git_apply(edit.diff, {rel: text.encode()}, "--reverse")
        if not ok:
            return NOT_APPLIED, ""
        lines[:] = split_lines((out[rel] or b"").decode())
        return REVERTED, "git apply --reverse"
    if edit.op in ("insert_after", "insert_before"):
        try:
            spans = _resolve(edit, text, rel)
        except SyntaxError:
            spans = []
        if len(spans) == 1:
            block = _block(edit.text, spans[0].indent, _newline(text))
            at = _applied_at(edit, lines, spans[0], block)
            if at is not None:
                del lines[at:at + len(block)]
                return REVERTED, "inserted text removed"
    if rec is not None and _undo_text(lines, rec):
        return REVERTED, "manifest text swapped back"
    if edit.op in ("replace", "delete") and rec is None:
        # the replacement present at any indentation, or the deleted statement gone: applied,
        # and only the backup or the manifest knows what was there before
        if edit.op == "replace":
            block = _block(edit.text, "", "\n")
            applied = any(_same_dedented(lines, i, block) for i in range(len(lines)))
        else:
            try:
                applied = len(_resolve(edit, text, rel)) != 1
            except SyntaxError:
                applied = True
        if not applied:
            return NOT_APPLIED, ""
        return BLOCKED, "needs the backup or the manifest to undo a replace/delete"
    return NOT_APPLIED, ""
