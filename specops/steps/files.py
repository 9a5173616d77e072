"""`copy` (a local file, template or inline content to the host, atomically) and `fetch`
(a host file into the run directory)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from specops.config.playbook import Step
from specops.config.templating import render
from specops.errors import ConfigError, StepError
from specops.fsutil import atomic_write
from specops.steps.base import Outcome, StepContext, StepKind, get_line, put_line


class Copy(StepKind):
    name = "copy"
    keys = ("src", "content", "dest", "mode", "template")
    required = ("dest",)

    def validate(self, step: Step) -> None:
        super().validate(step)
        if ("src" in step.args) == ("content" in step.args):
            raise ConfigError(f"{step.label}: copy needs exactly one of 'src' or 'content'", where=step.where)

    def _data(self, ctx: StepContext) -> bytes:
        if "content" in ctx.args:
            return str(ctx.args["content"]).encode()
        src = Path(os.path.expanduser(str(ctx.args["src"])))
        if not src.is_absolute():
            src = ctx.playbook_dir / src
        try:
            data = src.read_bytes()
        except OSError as exc:
            raise StepError(f"cannot read local file {src}: {exc.strerror}") from None
        if ctx.args.get("template"):
            data = str(render(data.decode(), ctx.vars, where=str(src))).encode()
        return data

    def _mode(self, ctx: StepContext) -> int | None:
        mode = ctx.args.get("mode")
        return int(str(mode), 8) if mode is not None else None

    def describe(self, ctx: StepContext) -> list[str]:
        return [put_line(ctx.path(ctx.args["dest"]), self._data(ctx), self._mode(ctx))]

    def is_done(self, ctx: StepContext) -> bool | None:
        dest = ctx.path(ctx.args["dest"])
        if ctx.transport.stat_size(dest) is None:
            return False
        return ctx.transport.get(dest) == self._data(ctx)

    def apply(self, ctx: StepContext) -> Outcome:
        data, dest = self._data(ctx), ctx.path(ctx.args["dest"])
        ctx.put(data, dest, mode=self._mode(ctx))
        return Outcome(data={"dest": dest, "sha256": hashlib.sha256(data).hexdigest()}, message=dest)

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        got = hashlib.sha256(ctx.transport.get(outcome.data["dest"])).hexdigest()
        if got != outcome.data["sha256"]:
            return False, f"{outcome.data['dest']} has sha256 {got[:12]}, expected {outcome.data['sha256'][:12]}"
        return True, ""


class Fetch(StepKind):
    name = "fetch"
    keys = ("src", "dest")
    required = ("src",)

    def _local(self, ctx: StepContext) -> Path:
        dest = ctx.args.get("dest") or Path(str(ctx.args["src"])).name
        path = ctx.run_dir / "fetched" / ctx.host.name / str(dest)
        if ".." in Path(str(dest)).parts:
            raise StepError(f"fetch dest must stay inside the run directory: {dest}")
        return path

    def describe(self, ctx: StepContext) -> list[str]:
        return [get_line(ctx.host.name, ctx.path(ctx.args["src"]), self._local(ctx).relative_to(ctx.run_dir))]

    def apply(self, ctx: StepContext) -> Outcome:
        src = ctx.path(ctx.args["src"])
        local = self._local(ctx)
        data = ctx.transport.get(src)
        ctx.journal.event("get", host=ctx.host.name, step=ctx.step.name, path=src, bytes=len(data),
                          command=get_line(ctx.host.name, src, local.relative_to(ctx.run_dir)))
        atomic_write(local, data)
        return Outcome(data={"path": str(local), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
                       message=str(local))

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        local = Path(outcome.data["path"])
        if not local.exists() or hashlib.sha256(local.read_bytes()).hexdigest() != outcome.data["sha256"]:
            return False, f"{local} is missing or differs from the host's file"
        return True, ""
