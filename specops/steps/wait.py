"""`wait`: until a port is open, a URL answers a status, or a file has a line matching a regex."""

from __future__ import annotations

import time

from specops.config.playbook import Step
from specops.errors import ConfigError
from specops.secrets import clip
from specops.steps.base import Outcome, StepContext, StepKind, http_probe_script
from specops.transport.base import CommandResult, command_line


class Wait(StepKind):
    name = "wait"
    keys = ("port", "host", "http", "status", "file", "regex", "timeout", "interval")
    arg_types = {"port": int, "host": str, "http": str, "status": int, "file": str, "regex": str,
                 "timeout": (int, float), "interval": (int, float)}

    def validate(self, step: Step) -> None:
        super().validate(step)
        targets = [k for k in ("port", "http", "file") if k in step.args]
        if len(targets) != 1:
            raise ConfigError(f"{step.label}: wait needs exactly one of port, http or file", where=step.where)
        if "file" in step.args and "regex" not in step.args:
            raise ConfigError(f"{step.label}: wait on a file needs 'regex'", where=step.where)

    def _probe(self, ctx: StepContext) -> list[str]:
        a = ctx.args
        if "port" in a:
            return ["bash", "-c", 'exec 3<>"/dev/tcp/$1/$2"', "probe", str(a.get("host", "127.0.0.1")), str(int(a["port"]))]
        if "http" in a:
            return http_probe_script(str(a["http"]), timeout=min(5.0, float(a.get("interval", 1.0)) + 4))
        return ["grep", "-E", "-q", "-e", str(a["regex"]), "--", ctx.path(str(a["file"]))]

    def _satisfied(self, ctx: StepContext, result: CommandResult) -> bool:
        if "http" in ctx.args:
            return result.stdout.strip() == str(int(ctx.args.get("status", 200)))
        return result.rc == 0

    def describe(self, ctx: StepContext) -> list[str]:

        return [f"every {ctx.args.get('interval', 1)} s until ok (timeout {self._timeout(ctx)} s): {command_line(self._probe(ctx))}"]

    def _timeout(self, ctx: StepContext) -> float:
        return float(ctx.args.get("timeout", ctx.timeout))

    def apply(self, ctx: StepContext) -> Outcome:
        deadline = time.monotonic() + self._timeout(ctx)
        interval = float(ctx.args.get("interval", 1.0))
        probe, polls = self._probe(ctx), 0
        while True:
            polls += 1
            result = ctx.transport.run(probe, timeout=max(5.0, interval + 4))
            if self._satisfied(ctx, result):
                ctx.journal.command(ctx.host.name, ctx.step.name, result)
                return Outcome(result=None, changed=False, data={"polls": polls}, message=f"after {polls} polls")
            if time.monotonic() + interval > deadline:
                ctx.journal.command(ctx.host.name, ctx.step.name, result)
                target = {k: ctx.args[k] for k in ("port", "http", "file") if k in ctx.args}
                return Outcome(result=None, changed=False,
                               data={"polls": polls, "timed_out": True, "last": clip(result.stdout.strip(), 200)},
                               message=f"still waiting for {target} after {self._timeout(ctx):g} s")
            time.sleep(interval)

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        if outcome.data.get("timed_out"):
            return False, outcome.message
        return True, ""
