"""`acme_stamp`: the plugin's own step kind. It writes a small marker file on the host (through
the step context, so the write is journalled like any step's) and verifies it by reading it
back, as specops's own steps verify their results. `AcmeSim.deploy_steps` runs it in deploy."""

from __future__ import annotations

from specops.steps.base import Outcome, StepContext, StepKind


class AcmeStamp(StepKind):
    """Write `text` to `path` on the host; done when the file already holds it."""

    name = "acme_stamp"
    keys = ("path", "text")
    required = ("path", "text")
    arg_types = {"path": str, "text": str}

    def _read(self, ctx: StepContext) -> str | None:
        result = ctx.probe(["cat", "--", ctx.path(ctx.args["path"])])
        return result.stdout if result.ok else None

    def describe(self, ctx: StepContext) -> list[str]:
        return [f"write {len(ctx.args['text'].encode())} bytes to {ctx.path(ctx.args['path'])}"]

    def is_done(self, ctx: StepContext) -> bool | None:
        return self._read(ctx) == ctx.args["text"]

    def apply(self, ctx: StepContext) -> Outcome:
        path = ctx.path(ctx.args["path"])
        ctx.put(ctx.args["text"].encode(), path)
        return Outcome(data={"path": path}, message=f"stamped {path}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        seen = self._read(ctx)
        if seen is None:
            return False, f"{outcome.data['path']} cannot be read back"
        return seen == ctx.args["text"], f"{outcome.data['path']} holds {seen!r}"
