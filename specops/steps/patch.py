"""`patch`: apply a patch set to a tree on the host.

Files are read over the connection, edited and compiled here, uploaded atomically; the
set's verify runs on the host; on any failure every file of the set is restored there.
"""

from __future__ import annotations

import shlex
from dataclasses import replace
from pathlib import Path
from typing import Any

from specops.config.playbook import Step
from specops.engines import Feature, engine_for
from specops.errors import ConfigError, StepError
from specops.hostfiles.paths import PATCH_STATE_DIR
from specops.hostfiles.treefiles import TransportTreeFiles, TreeFiles
from specops.patching import PatchError, PatchSet, apply, load_patchset, plan
from specops.patching.applier import is_check_line, verify_commands
from specops.patching.model import resolve_patchset_path
from specops.run import events
from specops.sglang.layout import detect_layout
from specops.sglang.venv import InstallSettings, venv_dir, venv_python
from specops.steps.base import Outcome, StepContext, StepKind, put_line, shown


class _JournaledFiles:
    """The tree's files, journaling each write of a file the set patches (as `put_line`
    shows it), so the journal lists the same writes --check does. The set's own state
    under .specops/ (backups, manifest) is bookkeeping and not listed."""

    def __init__(self, ctx: StepContext, files: TransportTreeFiles, patchset: PatchSet):
        self._ctx, self._files, self._targets = ctx, files, set(patchset.files)
        self.root = files.root

    def read(self, relpath: str) -> bytes | None:
        return self._files.read(relpath)

    def write(self, relpath: str, data: bytes) -> None:
        self._files.write(relpath, data)
        if relpath in self._targets:
            path = f"{self.root.rstrip('/')}/{relpath}"
            self._ctx.journal.emit(events.Put(host=self._ctx.host.name, step=self._ctx.step.name, path=path,
                                              bytes=len(data), command=put_line(path, data)))

    def remove(self, relpath: str) -> None:
        self._files.remove(relpath)

    def exists(self, relpath: str) -> bool:
        return self._files.exists(relpath)

    def prune(self, reldir: str) -> None:
        self._files.prune(reldir)

    def git_describe(self) -> str | None:
        return self._files.git_describe()


#: A cache, module-level on purpose: parsed patch sets keyed by (resolved file, mtime in ns, size),
#: so a run over 2000 hosts parses each set once and a changed file is parsed again. It holds
#: no run's state (a PatchSet is immutable input, the same for every run in the process).
_LOADED: dict[tuple[str, int, int], PatchSet] = {}


def _load(name: str, search_dir: Path) -> PatchSet:
    """The patch set, parsed once per version of its file: prevalidation checks it for
    every host before anything runs, and 2000 hosts must not parse it 2000 times."""
    path = resolve_patchset_path(name, search_dir)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    if key not in _LOADED:
        _LOADED[key] = load_patchset(path)
    return _LOADED[key]


class Patch(StepKind):
    name = "patch"
    keys = ("set", "tree", "if_needed")
    required = ("set", "tree")
    arg_types = {"set": str, "tree": str, "if_needed": bool}

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        """The arguments, and the patch set they name loaded and checked: a bad set (a path
        that leaves the tree, an anchor that does not fit its edit) stops the run before
        any step runs, naming the set's file and line, the edit and this step."""
        args = super().render(step, variables)
        if isinstance(args, dict) and isinstance(args.get("set"), str) and variables.get("playbook_dir"):
            try:
                _load(args["set"], Path(variables["playbook_dir"]) / "patches")
            except ConfigError as exc:
                raise ConfigError(f"{exc.message} (the patch set of {step.label}, {step.where})",
                                  where=exc.where, hint=exc.hint) from None
        return args

    def _setup(self, ctx: StepContext) -> tuple[PatchSet, str, TransportTreeFiles]:
        engine = engine_for(ctx.host)
        if not engine.has(Feature.PATCH_ROUTE):  # vLLM: its schedule is native, nothing to patch
            raise StepError(f"engine {engine.name} has no patch route: patch sets change SGLang trees",
                            where=f"host {ctx.host.name}, step {ctx.step.name!r}",
                            hint="drop the patch step for this host (the shipped playbooks skip it where "
                                 "the engine's features lack patch-route)")

        def load() -> tuple[PatchSet, str, TransportTreeFiles]:
            patchset = _load(str(ctx.args["set"]), ctx.playbook_dir / "patches")
            tree = ctx.path(str(ctx.args["tree"]))
            return patchset, tree, TransportTreeFiles(ctx.transport, tree)

        return ctx.once("patch.setup", load)

    def _not_needed(self, ctx: StepContext, files: TreeFiles) -> str:
        """With `if_needed: true`, a tree whose SGLang has the feature natively is left alone.
        (The patch set never changes that, so the tree is read for it once per step.)"""
        if not ctx.args.get("if_needed"):
            return ""

        def judge() -> str:
            layout = detect_layout(files)
            if layout.adaptive_zero_steps:
                return f"not needed: SGLang {layout.version} has native zero-step adaptive tiers"
            return ""

        return ctx.once("patch.not_needed", judge)

    def _runtime(self, ctx: StepContext) -> tuple[str, str]:
        """(python, runtime mode) for the set's verify: on engine sglang the environment the
        tree is installed in, where an import failure fails; before that environment exists
        (first deploy: the install step follows) the round trip is deferred to it."""
        if engine_for(ctx.host).simulated:
            return ctx.host.python, "optional"
        python = venv_python(ctx.path(venv_dir(ctx.vars)))
        if ctx.probe(["test", "-x", python]).rc != 0:
            return ctx.host.python, "deferred"
        # with sglang_install_deps false the runtime comes from elsewhere, maybe not yet
        deps = InstallSettings.from_vars(ctx.vars, {}, where=ctx.step.where).install_deps
        return python, "required" if deps else "deferred"

    def describe(self, ctx: StepContext) -> list[str]:
        """The patched files' writes and the set's verify commands, exactly as apply runs them;
        the edits' status and the diff as notes."""
        patchset, tree, files = self._setup(ctx)
        reason = self._not_needed(ctx, files)
        if reason:
            return [f"# {reason}"]
        p = plan(patchset, files)
        lines = [f"# patch set {patchset.name} on {tree}:"]
        lines += [f"#   {r.edit}: {r.status}{' (' + r.reason + ')' if r.reason else ''}" for r in p.results]
        if p.blocked or not p.new_contents:
            return lines + ["# nothing to write" if not p.blocked else "# blocked: apply will stop, changing nothing"]
        lines += [put_line(f"{tree.rstrip('/')}/{rel}", new) for rel, new in p.new_contents.items()]
        lines += [cmd if isinstance(cmd, str) and is_check_line(cmd) else shown(cmd, tree)
                  for cmd in verify_commands(patchset, files, self._runtime(ctx)[0], tree)]
        lines.append(f"# (backups and the manifest go under {tree}/{PATCH_STATE_DIR}/{patchset.name})")
        return lines + ["# diff:\n" + p.diff]

    def is_done(self, ctx: StepContext) -> bool | None:
        patchset, tree, files = self._setup(ctx)
        if self._not_needed(ctx, files):
            return True
        try:
            p = plan(patchset, files)
        except PatchError:
            return False  # apply will report why
        return not p.blocked and not p.new_contents

    def apply(self, ctx: StepContext) -> Outcome:
        patchset, tree, files = self._setup(ctx)
        reason = self._not_needed(ctx, files)
        if reason:
            return Outcome(changed=False, message=reason)
        python, runtime = self._runtime(ctx)
        report = apply(patchset, _JournaledFiles(ctx, files, patchset), transport=ctx.transport,
                       python=python, tree=tree, runtime=runtime, before_write=ctx.guard_sglang)
        for result in report.verify:  # they ran in the tree: journal them as describe shows them
            if is_check_line(result.command):  # specops's own reading of the tree: not a host command
                ctx.journal.emit(events.BuiltinCheck(host=ctx.host.name, step=ctx.step.name, check=result.command,
                                                     ok=result.ok, lines=result.stdout.splitlines()))
                continue
            ctx.journal.command(ctx.host.name, ctx.step.name,
                                replace(result, command=f"cd {shlex.quote(tree)} && {result.command}"))
        return Outcome(changed=report.changed, message=report.summary().splitlines()[0],
                       data={"patchset": patchset.name, "changed_files": report.changed_files,
                             "edits": {r.edit: r.status for r in report.results}})

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        patchset, tree, files = self._setup(ctx)
        if self._not_needed(ctx, files):
            return True, ""
        p = plan(patchset, files)
        pending = [r.edit for r in p.results if r.status != "already applied" and r.status != "skipped"]
        if pending:
            return False, f"after apply, edits not present exactly once: {', '.join(pending)}"
        return True, ""
