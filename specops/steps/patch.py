"""`patch`: apply a patch set to a tree on the host.

Files are read over the connection, edited and compiled here, uploaded atomically; the
set's verify runs on the host; on any failure every file of the set is restored there.
"""

from __future__ import annotations

from specops.patching import PatchError, apply, load_patchset, plan
from specops.sglang.layout import detect_layout
from specops.sglang.treefiles import TransportTreeFiles
from specops.steps.base import Outcome, StepContext, StepKind


class Patch(StepKind):
    name = "patch"
    keys = ("set", "tree", "if_needed")
    required = ("set", "tree")

    def _setup(self, ctx: StepContext):
        def load():
            patchset = load_patchset(str(ctx.args["set"]), search_dir=ctx.playbook_dir / "patches")
            tree = ctx.path(str(ctx.args["tree"]))
            return patchset, tree, TransportTreeFiles(ctx.transport, tree)

        return ctx.once("patch.setup", load)

    def _not_needed(self, ctx: StepContext, files) -> str:
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

    def describe(self, ctx: StepContext) -> list[str]:
        patchset, tree, files = self._setup(ctx)
        reason = self._not_needed(ctx, files)
        if reason:
            return [reason]
        p = plan(patchset, files)
        lines = [f"patch set {patchset.name} on {tree}:"]
        lines += [f"  {r.edit}: {r.status}{' (' + r.reason + ')' if r.reason else ''}" for r in p.results]
        lines += [p.diff or "(no changes)"]
        return lines

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
        report = apply(patchset, files, transport=ctx.transport, python=ctx.host.python, tree=tree)
        for result in report.verify:
            ctx.journal.command(ctx.host.name, ctx.step.name, result)
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
