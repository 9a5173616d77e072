"""`copy` (a local file, template or inline content to the host, atomically) and `fetch`
(a host file into the run directory)."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

from specops.config.playbook import Step
from specops.config.templating import render
from specops.config.yamlfile import read_text
from specops.errors import ConfigError, StepError
from specops.fsutil import atomic_write
from specops.run import events
from specops.steps.base import Outcome, StepContext, StepKind, get_line, put_line

_MODE = re.compile(r"0?[0-7]{3}")


def _check_mode(step: Step, mode: Any) -> None:
    """A file mode is a quoted octal string: unquoted, YAML reads 0640 as the number 416."""
    if mode is None or (isinstance(mode, str) and "{{" in mode):
        return
    if not isinstance(mode, str) or not _MODE.fullmatch(mode):
        raise ConfigError(f"{step.label}: mode must be an octal string such as '0640', got {mode!r}",
                          where=step.where, hint="quote it: YAML reads an unquoted 0640 as the number 416")


def _local_src(src: Any, playbook_dir: Path) -> Path:
    """`src` of a copy: a file on this machine, relative to the playbook's folder."""
    path = Path(os.path.expanduser(str(src)))
    return path if path.is_absolute() else playbook_dir / path


def _check_fetch_dest(step: Step, dest: Any) -> None:
    """Where a fetched file lands: relative, inside the run directory's fetched/<host>/."""
    if not isinstance(dest, str) or "{{" in dest:
        return
    if not dest.strip() or Path(dest).is_absolute() or dest.startswith("~") or ".." in Path(dest).parts:
        raise ConfigError(f"{step.label}: fetch dest {dest!r} must be a relative path inside the run "
                          "directory (it lands in <run dir>/fetched/<host>/)", where=step.where)


class Copy(StepKind):
    name = "copy"
    keys = ("src", "content", "dest", "mode", "template")
    required = ("dest",)
    arg_types = {"src": str, "content": (str, int, float), "dest": str, "template": bool}

    def validate(self, step: Step) -> None:
        super().validate(step)
        if ("src" in step.args) == ("content" in step.args):
            raise ConfigError(f"{step.label}: copy needs exactly one of 'src' or 'content'", where=step.where)
        _check_mode(step, step.args.get("mode"))

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        """The arguments, checked as they will be used: the mode, and the local file (there,
        and UTF-8 when it is a template), before anything runs."""
        args = super().render(step, variables)
        _check_mode(step, args.get("mode"))
        if "src" in args and variables.get("playbook_dir"):
            src = _local_src(args["src"], Path(variables["playbook_dir"]))
            where = f"{step.label} (copy src)"
            if args.get("template"):
                read_text(src, f"{where} template")
            elif not src.is_file():
                raise ConfigError(f"{where}: {src} is not a file on this machine", where=step.where)
        return args

    def _data(self, ctx: StepContext) -> bytes:
        if "content" in ctx.args:
            return str(ctx.args["content"]).encode()
        src = _local_src(ctx.args["src"], ctx.playbook_dir)
        try:
            data = src.read_bytes()
        except OSError as exc:
            raise StepError(f"cannot read local file {src}: {exc.strerror}") from None
        if ctx.args.get("template"):
            data = str(render(read_text(src, "copy template"), ctx.vars, where=str(src))).encode()
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
    arg_types = {"src": str, "dest": str}

    def validate(self, step: Step) -> None:
        super().validate(step)
        _check_fetch_dest(step, step.args.get("dest"))

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        args = super().render(step, variables)
        _check_fetch_dest(step, args.get("dest"))
        return args

    def _local(self, ctx: StepContext) -> Path:
        dest = ctx.args.get("dest") or Path(str(ctx.args["src"])).name
        _check_fetch_dest(ctx.step, str(dest))
        return ctx.run_dir / "fetched" / ctx.host.name / str(dest)

    def describe(self, ctx: StepContext) -> list[str]:
        return [get_line(ctx.host.name, ctx.path(ctx.args["src"]), self._local(ctx).relative_to(ctx.run_dir))]

    def apply(self, ctx: StepContext) -> Outcome:
        src = ctx.path(ctx.args["src"])
        local = self._local(ctx)
        data = ctx.transport.get(src)
        ctx.journal.emit(events.Get(host=ctx.host.name, step=ctx.step.name, path=src, bytes=len(data),
                                    command=get_line(ctx.host.name, src, local.relative_to(ctx.run_dir))))
        atomic_write(local, data)
        return Outcome(data={"path": str(local), "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()},
                       message=str(local))

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        local = Path(outcome.data["path"])
        if not local.exists() or hashlib.sha256(local.read_bytes()).hexdigest() != outcome.data["sha256"]:
            return False, f"{local} is missing or differs from the host's file"
        return True, ""
