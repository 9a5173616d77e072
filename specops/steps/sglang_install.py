"""`sglang_install`: install the checked-out (and patched) SGLang tree, editable, into the
host's environment, and prove that this environment's `sglang` is that tree.

Without it the servers run whatever `sglang` the host's python finds (nothing, or an
unpatched release that rejects the patch's flag). Editable, so a later patch or revert
is live without reinstalling. Verified from a neutral directory with the environment's
own python: `sglang` resolves to a file under `<tree>/python`, and the installed version
is the tree's version. An install stamp in the environment (tree, commit, pyproject,
settings) makes a re-run a no-op while nothing that matters to pip has changed.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from typing import Any

from specops.errors import SpecopsError, StepError
from specops.patching import PatchError, load_patchset, run_verify
from specops.sglang.paths import PATCH_STATE_DIR
from specops.sglang.treefiles import TransportTreeFiles
from specops.sglang.treeversion import tree_version
from specops.sglang.venv import InstallSettings, neutral_cwd, venv_python
from specops.steps.base import Outcome, StepContext, StepKind

STAMP = ".specops-install.json"
PYPROJECT = "python/pyproject.toml"
#: creating the environment: `uv` where the host has it (fast, seeds pip), else the venv module
MAKE_VENV = r"""
venv="$1"; py="$2"
if command -v uv >/dev/null 2>&1; then
  exec uv venv --seed --python "$py" "$venv"
fi
exec "$py" -m venv "$venv"
"""
#: What the environment's python sees, run from a neutral directory: where `sglang` comes
#: from (without importing it: its __init__ needs the whole runtime) and its installed version.
PROBE = r"""
import importlib.metadata, importlib.util, json, os, sys
spec = importlib.util.find_spec("sglang")
out = {"python": sys.executable, "origin": None, "locations": [], "version": None, "editable": None}
if spec is not None:
    out["origin"] = spec.origin and os.path.realpath(spec.origin)
    out["locations"] = [os.path.realpath(p) for p in (spec.submodule_search_locations or [])]
try:
    dist = importlib.metadata.distribution("sglang")
    out["version"] = dist.version
    direct = dist.read_text("direct_url.json")
    out["editable"] = bool(direct and json.loads(direct).get("dir_info", {}).get("editable"))
except importlib.metadata.PackageNotFoundError:
    pass
print(json.dumps(out))
"""


class SGLangInstall(StepKind):
    name = "sglang_install"
    changes_sglang = True
    keys = ("tree", "venv", "extras", "pip_args", "install_deps")
    required = ("tree",)
    arg_types = {"tree": str, "venv": str, "extras": list, "pip_args": list, "install_deps": bool}

    # ----- what the step works with -------------------------------------------------------

    def _settings(self, ctx: StepContext) -> InstallSettings:
        return ctx.once("install.settings", lambda: InstallSettings.from_vars(
            ctx.vars, dict(ctx.args), where=f"{ctx.step.where}: {ctx.step.label}"))

    def _paths(self, ctx: StepContext) -> tuple[str, str, str]:
        """(tree, venv, venv python), absolute on the host."""
        tree = ctx.path(str(ctx.args["tree"]))
        venv = ctx.path(self._settings(ctx).venv)
        return tree, venv, venv_python(venv)

    def _neutral(self, ctx: StepContext) -> str:
        return neutral_cwd(ctx.path(str(ctx.vars["workdir"])))

    def _pip_argv(self, ctx: StepContext) -> list[str]:
        s = self._settings(ctx)
        tree, _, python = self._paths(ctx)
        return [python, "-m", "pip", "install", "--disable-pip-version-check",
                *([] if s.install_deps else ["--no-deps"]), *s.pip_args, "-e", s.target(tree)]

    def _wanted_stamp(self, ctx: StepContext) -> dict[str, Any]:
        """What the installed package depends on: the tree, its commit, its pyproject, the settings."""
        def compute() -> dict[str, Any]:
            tree, _, _ = self._paths(ctx)
            s = self._settings(ctx)
            head = ctx.probe(["git", "-C", tree, "rev-parse", "HEAD"])
            files = TransportTreeFiles(ctx.transport, tree)
            pyproject = files.read(PYPROJECT)
            if pyproject is None:
                raise StepError(f"{tree}/{PYPROJECT} is missing: not an SGLang checkout (run the git step first)")
            return {"tree": tree, "commit": head.stdout.strip() if head.ok else None,
                    "pyproject_sha256": hashlib.sha256(pyproject).hexdigest(),
                    "extras": s.extras, "install_deps": s.install_deps, "pip_args": s.pip_args}
        return ctx.once("install.stamp", compute)

    def _tree_version(self, ctx: StepContext) -> tuple[str | None, str]:
        tree, _, _ = self._paths(ctx)
        return tree_version(TransportTreeFiles(ctx.transport, tree))

    def _probe(self, ctx: StepContext) -> dict[str, Any] | None:
        """The environment's view of `sglang`, from the neutral directory; None without an environment."""
        _, _, python = self._paths(ctx)
        cwd = self._neutral(ctx)
        r = ctx.probe(["bash", "-c", 'mkdir -p "$1" && cd "$1" && test -x "$2" || exit 3; '
                       'exec env -u PYTHONPATH "$2" -c "$3"', "_", cwd, python, PROBE])
        if r.rc == 3:
            return None
        if not r.ok:
            raise StepError(f"{python} cannot run: {r.tail(3)}")
        try:
            return json.loads(r.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepError(f"unexpected answer from {python}: {r.tail(3)}") from None

    def _judge(self, ctx: StepContext, seen: dict[str, Any] | None) -> str:
        """'' when the environment's sglang is the tree at the tree's version, else what is wrong."""
        tree, venv, _ = self._paths(ctx)
        if seen is None:
            return f"no environment at {venv}"
        root = posixpath.join(tree, "python") + "/"
        places = [p for p in [seen.get("origin"), *seen.get("locations", [])] if p]
        if not places:
            return f"sglang is not importable from {venv}"
        if not all(str(p).startswith(root) for p in places):
            return f"sglang in {venv} resolves to {places[0]}, not into {root}"
        want, why = self._tree_version(ctx)
        if want is not None and seen.get("version") != want:
            return f"sglang in {venv} is version {seen.get('version')}, the tree is {want}"
        return ""

    def _stamp_path(self, ctx: StepContext) -> str:
        return posixpath.join(self._paths(ctx)[1], STAMP)

    # ----- the contract -------------------------------------------------------------------

    def describe(self, ctx: StepContext) -> list[str]:
        tree, venv, python = self._paths(ctx)
        host_python = ctx.host.python
        return [f"{host_python} -m venv {venv}  (uv venv --seed where the host has uv; kept if present)",
                " ".join(self._pip_argv(ctx)) + f"  (from {self._neutral(ctx)}; output to the run directory)",
                f"check from {self._neutral(ctx)}: {python} finds sglang under {tree}/python at the tree's version"]

    def is_done(self, ctx: StepContext) -> bool | None:
        stamp_path = self._stamp_path(ctx)
        if ctx.transport.stat_size(stamp_path) is None:
            return False
        try:
            stamp = json.loads(ctx.transport.get(stamp_path))
        except ValueError:
            return False
        try:
            if stamp != self._wanted_stamp(ctx):
                return False
            return self._judge(ctx, self._probe(ctx)) == ""
        except StepError:
            return False  # apply says why (no tree yet, a broken environment)

    def apply(self, ctx: StepContext) -> Outcome:
        s = self._settings(ctx)
        tree, venv, python = self._paths(ctx)
        stamp = self._wanted_stamp(ctx)
        cwd = self._neutral(ctx)
        started = time.monotonic()
        if ctx.probe(["test", "-x", python]).rc != 0:
            made = ctx.run(["bash", "-c", MAKE_VENV, "_", venv, ctx.host.python], timeout=min(ctx.timeout, 600))
            if not made.ok:
                raise StepError(f"cannot create the environment {venv}: {made.tail(3)}",
                                hint="install python3-venv (apt-get install python3-venv) or uv on the host")
        before = self._probe(ctx)
        ctx.run(["mkdir", "-p", cwd], timeout=30)
        pip = ctx.run(["env", "-u", "PYTHONPATH", *self._pip_argv(ctx)], cwd=cwd)
        log = self._save_log(ctx, pip.command, pip.stdout + pip.stderr)
        if not pip.ok:
            raise StepError(f"pip install -e {s.target(tree)} failed (exit {pip.rc}): {pip.tail(3)}",
                            hint=f"the whole pip output is in {log}")
        checked = self._patch_round_trips(ctx) if s.install_deps else []
        ctx.transport.put((json.dumps(stamp, indent=1, sort_keys=True) + "\n").encode(), self._stamp_path(ctx))
        after = self._probe(ctx) or {}
        replaced, was = "", None
        if before and before.get("origin") and self._judge(ctx, before):
            was = {"origin": before.get("origin"), "version": before.get("version")}
            replaced = f"; replaced the sglang at {was['origin']} ({was['version']})"
        deps = "" if s.install_deps else ", no deps"
        if checked:
            deps += f"; {', '.join(checked)} round trip ok in the environment"
        message = (f"sglang {after.get('version')} editable from {tree}/python into {venv}{deps} "
                   f"in {time.monotonic() - started:.1f}s{replaced}; pip log {log}")
        return Outcome(result=None, data={"version": after.get("version"), "origin": after.get("origin"),
                                          "venv": venv, "python": python, "pip_log": str(log),
                                          "commit": stamp["commit"], "replaced": was}, message=message)

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        problem = self._judge(ctx, self._probe(ctx))
        if problem:
            return False, problem + " (another sglang shadows the tree: remove it from that environment)"
        return True, ""

    def _patch_round_trips(self, ctx: StepContext) -> list[str]:
        """Run the verify commands (import, argparse round trip) of every patch set applied to
        the tree, in the environment now that it has the runtime: the patch step ran before
        the environment existed and could only defer them. An import failure fails here."""
        tree, _, python = self._paths(ctx)
        listed = ctx.probe(["bash", "-c", 'cd "$1" 2>/dev/null && ls -1 -- */manifest.json 2>/dev/null; true', "_",
                            posixpath.join(tree, PATCH_STATE_DIR)])
        names = [line.split("/", 1)[0] for line in listed.stdout.splitlines() if line.endswith("/manifest.json")]
        files = TransportTreeFiles(ctx.transport, tree)
        done = []
        for name in names:
            try:
                patchset = load_patchset(name, search_dir=ctx.playbook_dir / "patches")
            except SpecopsError:
                continue  # a set this playbook does not ship: nothing to run
            try:
                for result in run_verify(patchset, files, ctx.transport, python, tree, runtime="required"):
                    ctx.journal.command(ctx.host.name, ctx.step.name, result)
            except PatchError as exc:
                raise StepError(f"the tree is installed, but {exc.message}",
                                hint="the environment lacks SGLang's runtime dependencies, or the patch breaks "
                                     "the import; the patch stays applied (revert it with `specops patch revert`)") from None
            done.append(name)
        return done

    def _save_log(self, ctx: StepContext, command: str, text: str) -> str:
        path = ctx.run_dir / "logs" / f"{ctx.host.name}.sglang-install.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"$ {command}\n{text}")
        return str(path)
