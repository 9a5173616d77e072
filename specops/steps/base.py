"""The step contract: describe (for --check), is_done (skip on re-run), apply, verify, rollback.

A kind implements what is specific to it; the engine owns ordering, retries, `verify:`,
journaling and failure handling, so every kind behaves the same way.

`describe()` returns the commands `apply()` will run, each as the journal records it (one
shape for both, see `shown`/`put_line`/`get_line`), in order; read-only commands it ran to
know them are listed first with `PROBE` in front, and lines that are neither start with `#`.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, TypeVar

from specops.config.inventory import Host
from specops.config.playbook import Step
from specops.config.schema import check_keys, expect
from specops.config.templating import render_tree
from specops.errors import ConfigError
from specops.run import events
from specops.run.journal import Journal
from specops.run.state import Run
from specops.secrets import clip, remember_env
from specops.transport.base import Command, CommandResult, Transport, command_line

T = TypeVar("T")

#: Timeout for small host-side reads and checks (file exists, HTTP probe, rev-parse).
PROBE_TIMEOUT_S = 30.0
#: What a describe() line that is a read-only probe starts with.
PROBE = "probe: "


def shown(cmd: Command, cwd: str | None = None) -> str:
    """A command as the journal and --check show it: its exact line, after `cd DIR &&` when
    it runs in DIR. (Environment values are not shown: they may be secrets.)"""
    line = command_line(cmd)
    return f"cd {shlex.quote(cwd)} && {line}" if cwd else line


def put_line(path: str, data: bytes, mode: int | None = None) -> str:
    """A file write (temp file beside `path`, then rename), as the journal and --check show it."""
    extra = f", mode {mode:o}" if mode is not None else ""
    return f"put {path} ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()[:12]}{extra})"


def get_line(host: str, path: str, local: Path | str) -> str:
    """A file read from the host into `local` (a path in the run directory, relative to it:
    --check and the run it previews have different run directories), as both show it."""
    return f"get {host}:{path} -> <run dir>/{local}"


@dataclass
class Outcome:
    """What apply did: the main command's result (for stdout_* checks) and facts to record."""

    result: CommandResult | None = None
    changed: bool = True
    data: dict[str, Any] = field(default_factory=dict)
    message: str = ""


@dataclass
class StepContext:
    """Everything a step needs on one host; `run` journals every command it runs."""

    host: Host
    transport: Transport
    step: Step
    args: Any
    vars: dict[str, Any]
    journal: Journal
    run_dir: Path
    playbook_dir: Path
    #: the run this step belongs to: what it launched, its progress callback
    run_state: Run
    check: bool = False
    emit: Callable[[str], None] = lambda _msg: None
    #: what is_done learned (e.g. the checked-out sha), registered when the step is skipped
    facts: dict[str, Any] = field(default_factory=dict)
    #: per-step memo for what is_done, apply and verify would otherwise each read again
    memo: dict[str, Any] = field(default_factory=dict)
    #: every command this context ran, as journaled (in --check, the probes describe ran)
    ran: list[str] = field(default_factory=list)

    def once(self, key: str, compute: Callable[[], T]) -> T:
        """`compute()` the first time `key` is asked for in this step, the stored value after
        (each key is computed by one `compute`, so its stored value has that one's type)."""
        if key not in self.memo:
            self.memo[key] = compute()
        value: T = self.memo[key]
        return value

    @property
    def timeout(self) -> float:
        return self.step.timeout

    def run(self, cmd: Command, *, timeout: float | None = None, cwd: str | None = None,
            env: dict[str, str] | None = None, stdin: bytes | None = None, probe: bool = False) -> CommandResult:
        """Run and journal `cmd` (as `shown` writes it; `probe` marks a read-only one). A
        secret-looking name's value in `env` is masked from now on, in this output too."""
        remember_env(env)
        result = self.transport.run(cmd, timeout=timeout or self.step.timeout, cwd=cwd, env=env, stdin=stdin)
        if cwd:
            result = replace(result, command=shown(cmd, cwd))
        self.journal.command(self.host.name, self.step.name, result, probe=probe)
        self.ran.append(result.command)
        return result

    def probe(self, cmd: Command, *, timeout: float | None = None) -> CommandResult:
        """A read-only check, with the short probe timeout unless told."""
        return self.run(cmd, timeout=timeout or min(PROBE_TIMEOUT_S, self.step.timeout), probe=True)

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        """Write a file on the host atomically, and journal it as `put_line` shows it."""
        self.transport.put(data, path, mode=mode)
        self.journal.emit(events.Put(host=self.host.name, step=self.step.name, path=path, bytes=len(data),
                                     command=put_line(path, data, mode)))

    def notice(self, line: str) -> None:
        """A line the user sees now, wherever they look: the live view, the journal, and on a
        pipe a plain line (whom `--wait` waits for)."""
        self.emit(line)
        self.journal.emit(events.Lease(host=self.host.name, step=self.step.name, message=line))

    def guard_sglang(self) -> None:
        """Before changing the host's SGLang (tree or venv): refuse, or wait, while another
        run's servers use it (servers.lease; `--take-over` goes ahead)."""
        workdir = self.transport.expand(str(self.vars.get("workdir") or self.host.workdir))
        self.run_state.leases.guard_tree(self.transport, self.host.name, workdir,
                                         f"step '{self.step.name}' ({self.step.kind})", on_wait=self.notice)

    def path(self, value: str) -> str:
        """A host path from a step argument, with `~` and relative paths resolved on the host."""
        return self.transport.expand(value)


class StepKind:
    """Base class; subclasses set `name` and override what applies to them."""

    name: str = ""
    #: whenever it is not done, the step changes the host's SGLang (tree or venv): the engine
    #: calls `ctx.guard_sglang()` first (a kind that may change nothing calls it itself)
    changes_sglang: bool = False
    #: top-level keys the kind accepts when its args are a mapping
    keys: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    #: the type each argument must have: checked at load time (a value still holding a
    #: template is checked once rendered, still before anything runs)
    arg_types: dict[str, type | tuple[type, ...]] = {}

    def validate(self, step: Step) -> None:
        """Static checks at load time, before templating."""
        if self.keys:
            check_keys(step.args, self.keys, f"{step.label} ({self.name})", required=self.required)
        self.check_types(step, step.args)

    def check_types(self, step: Step, args: Any) -> None:
        """Each argument of `arg_types` that is given has its type (templates left for later)."""
        if not isinstance(args, dict):
            return
        for key, types in self.arg_types.items():
            value = args.get(key)
            if value is None or (isinstance(value, str) and "{{" in value):
                continue
            expect(args, key, types, f"{step.label} ({self.name})", where=step.where)

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        args = render_tree(step.args, variables, where=f"{step.where}: {step.label}")
        self.check_types(step, args)
        return args

    def scripts(self, step: Step) -> list[tuple[str, str]]:
        """The shell scripts among the step's arguments, each with its file:line: checked at
        load (`templating.check_script`) and rendered in shell mode. None by default."""
        return []

    def describe(self, ctx: StepContext) -> list[str]:
        """The exact commands apply would run (for --check). May run read-only probes."""
        return []

    def is_done(self, ctx: StepContext) -> bool | None:
        """True when the host already has this step's result; None when it cannot tell."""
        return None

    def apply(self, ctx: StepContext) -> Outcome:
        raise NotImplementedError

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        """The kind's built-in verification; (ok, what was seen)."""
        if outcome.result is not None and not outcome.result.ok:
            r = outcome.result
            seen = "timed out" if r.timed_out else f"exit code {r.rc}"
            return False, f"{seen}: {r.tail(5) or '(no output)'}"
        return True, ""

    def rollback(self, ctx: StepContext, outcome: Outcome | None) -> str:
        """Undo what apply left; return a note of what was done (or '')."""
        return ""


# ----- the `verify:` block shared by every kind ---------------------------------------

STATE_KEYS = ("file_exists", "file_contains", "http_status")


def http_probe_script(url: str, timeout: float = 5.0) -> list[str]:
    """Print the HTTP status of `url` using whatever the host has (curl, else python3)."""
    py = ("import sys,urllib.request,urllib.error\n"
          "try:\n print(urllib.request.urlopen(sys.argv[1],timeout=float(sys.argv[2])).status)\n"
          "except urllib.error.HTTPError as e:\n print(e.code)\n"
          "except Exception:\n print(0)\n")
    script = ('if command -v curl >/dev/null 2>&1; then curl -s -o /dev/null -m "$2" -w "%{http_code}" "$1"; '
              'echo; else python3 -c "$3" "$1" "$2"; fi')
    return ["bash", "-c", script, "probe", url, str(timeout), py]


def check_user_verify(ctx: StepContext, spec: dict[str, Any], result: CommandResult | None,
                      only_state: bool = False) -> tuple[bool, str]:
    """Evaluate a rendered `verify:` mapping; (ok, what was seen)."""
    if not only_state and result is not None:
        want_rc = spec.get("rc", 0)
        if result.rc != want_rc:
            return False, f"exit code {result.rc}, expected {want_rc}: {result.tail(5) or '(no output)'}"
        if "stdout_contains" in spec and spec["stdout_contains"] not in result.stdout:
            return False, f"stdout does not contain {spec['stdout_contains']!r}: {clip(result.stdout.strip(), 300)!r}"
        if "stdout_matches" in spec and not re.search(spec["stdout_matches"], result.stdout, re.M):
            return False, f"stdout does not match /{spec['stdout_matches']}/: {clip(result.stdout.strip(), 300)!r}"
    if "file_exists" in spec:
        path = ctx.path(spec["file_exists"])
        if ctx.probe(["test", "-e", path]).rc != 0:
            return False, f"file {path} does not exist"
    if "file_contains" in spec:
        fc = spec["file_contains"]
        path = ctx.path(fc["path"])
        probe = ctx.probe(["grep", "-E", "-q", "-e", fc["regex"], "--", path])
        if probe.rc != 0:
            why = "does not exist or cannot be read" if probe.rc == 2 else f"has no line matching /{fc['regex']}/"
            return False, f"file {path} {why}"
    if "http_status" in spec:
        hs = spec["http_status"]
        url, want = (hs, 200) if isinstance(hs, str) else (hs["url"], int(hs.get("status", 200)))
        probe = ctx.probe(http_probe_script(url))
        got = probe.stdout.strip() or "0"
        if got != str(want):
            return False, f"GET {url} answered {got if got != '000' and got != '0' else 'nothing'}, expected {want}"
    return True, ""


def has_state_checks(spec: dict[str, Any]) -> bool:
    return any(k in spec for k in STATE_KEYS)


def quote_cmd(cmd: Command) -> str:
    return cmd if isinstance(cmd, str) else shlex.join(str(a) for a in cmd)


def pretty_json(data: Any) -> str:
    return json.dumps(data, indent=2, sort_keys=True, default=str)


def require_type(step: Step, value: Any, types: type | tuple[type, ...], what: str) -> None:
    if not isinstance(value, types):
        raise ConfigError(f"{step.label}: {what}", where=step.where)
