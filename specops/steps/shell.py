"""`shell`: a script (run with bash -c, every substituted value one quoted word) or an argv list."""

from __future__ import annotations

from typing import Any

from specops.config.playbook import Step
from specops.config.schema import where_of
from specops.config.templating import render, render_tree
from specops.errors import ConfigError
from specops.secrets import clip
from specops.steps.base import Outcome, StepContext, StepKind, quote_cmd, shown


class Shell(StepKind):
    name = "shell"
    keys = ("cmd", "chdir", "env", "creates")
    arg_types = {"cmd": (str, list), "chdir": str, "env": dict, "creates": str}

    def validate(self, step: Step) -> None:
        args = step.args
        if isinstance(args, str):
            return
        if isinstance(args, list):
            if not args or not all(isinstance(a, (str, int, float)) for a in args):
                raise ConfigError(f"{step.label}: an argv list must hold strings", where=step.where)
            return
        super().validate(step)
        if "cmd" not in args:
            raise ConfigError(f"{step.label}: shell needs 'cmd' (a script or an argv list)", where=step.where)

    def scripts(self, step: Step) -> list[tuple[str, str]]:
        """The script string, if the step has one (an argv list is not one), and its file:line."""
        if isinstance(step.args, str):
            return [(step.args, step.where)]
        if isinstance(step.args, dict) and isinstance(step.args.get("cmd"), str):
            return [(step.args["cmd"], where_of(step.args, "cmd", step.where))]
        return []

    def render(self, step: Step, variables: dict[str, Any]) -> dict[str, Any]:
        where = f"{step.where}: {step.label}"
        args = step.args if isinstance(step.args, dict) else {"cmd": step.args}
        cmd = args["cmd"]
        rendered = dict(render_tree({k: v for k, v in args.items() if k != "cmd"}, variables, where=where))
        if isinstance(cmd, str):
            rendered["cmd"] = render(cmd, variables, shell=True, where=where)
        else:  # argv: each element is one argument, never re-parsed by a shell
            rendered["cmd"] = [str(render(str(a), variables, where=where)) for a in cmd]
        self.check_types(step, rendered)
        return rendered

    def _cwd(self, ctx: StepContext) -> str | None:
        return ctx.path(ctx.args["chdir"]) if ctx.args.get("chdir") else None

    def _env(self, ctx: StepContext) -> dict[str, str]:
        return {str(k): str(v) for k, v in (ctx.args.get("env") or {}).items()}

    def describe(self, ctx: StepContext) -> list[str]:
        lines = [shown(ctx.args["cmd"], self._cwd(ctx))]
        if self._env(ctx):
            lines.append(f"# with {', '.join(sorted(self._env(ctx)))} set in its environment")
        if ctx.args.get("creates"):
            lines.append(f"# not run when {ctx.path(ctx.args['creates'])} exists")
        return lines

    def is_done(self, ctx: StepContext) -> bool | None:
        creates = ctx.args.get("creates")
        if creates:
            return ctx.probe(["test", "-e", ctx.path(creates)]).rc == 0
        return None

    def apply(self, ctx: StepContext) -> Outcome:
        result = ctx.run(ctx.args["cmd"], cwd=self._cwd(ctx), env=self._env(ctx) or None)
        return Outcome(result=result, message=clip(quote_cmd(ctx.args["cmd"]), 80, keep="start"))
