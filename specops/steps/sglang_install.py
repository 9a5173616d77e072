"""`sglang_install`: install the checked-out (and patched) SGLang tree, editable, into the
host's environment, and prove that this environment's `sglang` is that tree.

Without it the servers run whatever `sglang` the host's python finds (nothing, or an
unpatched release that rejects the patch's flag). Editable, so a later patch or revert
is live without reinstalling. Verified from a neutral directory with the environment's
own python: `sglang` resolves to a file under `<tree>/python`, and the installed version
is the tree's version. An install stamp in the environment (tree, commit, pyproject,
settings) makes a re-run a no-op while nothing that matters to pip has changed.

With a prepared runtime (`sglang_runtime: /path/to/python`: a conda env, a cluster module,
a cached venv that already holds torch and SGLang's dependencies) the environment is made
from that python, a `.pth` file adds the runtime's site-packages after the environment's
own, and only the tree is installed (no dependencies unless `sglang_install_deps: true`),
as a plain path entry (`editable_mode=compat`) that sorts before the runtime's folders: a
runtime with an `sglang` of its own still resolves `sglang` into the tree. The same check
then proves it, and the stamp names the runtime and its folders.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import time
from typing import Any

from specops.errors import SpecopsError, StepError
from specops.fsutil import atomic_write
from specops.hostfiles.paths import PATCH_STATE_DIR, neutral_cwd
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.patching import PatchError, load_patchset, run_verify
from specops.run import events
from specops.secrets import redact
from specops.servers import container
from specops.sglang import cuda, runtime_pins
from specops.sglang.treeversion import tree_version
from specops.sglang.venv import RUNTIME_PTH, InstallSettings, venv_python
from specops.steps.base import Outcome, StepContext, StepKind
from specops.transport.nvidia import parse_probe, probe_command

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
#: What a prepared runtime's python says of itself: its version and the site-packages
#: folders an environment made from it must see.
RUNTIME_PROBE = r"""
import json, os, site, sys
dirs = []
for d in site.getsitepackages():
    if os.path.isdir(d) and d not in dirs:
        dirs.append(d)
print(json.dumps({"executable": sys.executable, "version": "%d.%d" % sys.version_info[:2], "site": dirs}))
"""
#: The environment's own site-packages (where the runtime's `.pth` goes) and version.
VENV_SITE = ('import json, sys, sysconfig; print(json.dumps({"purelib": sysconfig.get_path("purelib"), '
             '"version": "%d.%d" % sys.version_info[:2]}))')


class SGLangInstall(StepKind):
    name = "sglang_install"
    changes_sglang = True
    keys = ("tree", "venv", "extras", "pip_args", "install_deps", "runtime", "allow_runtime_mismatch")
    required = ("tree",)
    arg_types = {"tree": str, "venv": str, "extras": list, "pip_args": list, "install_deps": bool, "runtime": str,
                 "allow_runtime_mismatch": bool}

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
        # with a runtime: a plain path entry, which sorts before the runtime's folders on sys.path
        compat = ["--config-settings", "editable_mode=compat"] if s.runtime else []
        return [python, "-m", "pip", "install", "--disable-pip-version-check",
                *([] if s.install_deps else ["--no-deps"]), *s.pip_args, *compat, "-e", s.target(tree)]

    def _runtime(self, ctx: StepContext) -> dict[str, Any] | None:
        """The prepared runtime's python, version and site-packages (None: no runtime). A
        runtime that is missing or cannot run fails the step naming the host and the path."""
        runtime = self._settings(ctx).runtime
        if runtime is None:
            return None

        def probe() -> dict[str, Any]:
            path = ctx.path(runtime)
            r = ctx.probe(["bash", "-c", 'test -f "$1" && test -x "$1" || exit 3; exec env -u PYTHONPATH "$1" -c "$2"',
                           "_", path, RUNTIME_PROBE])
            where = f"sglang_runtime {path} on host {ctx.host.name}"
            hint = "point sglang_runtime at the python of an environment that holds torch (e.g. <env>/bin/python)"
            if r.rc == 3:
                raise StepError(f"{where}: no such python (missing, or not executable)", hint=hint)
            try:
                seen = json.loads(r.stdout.strip().splitlines()[-1]) if r.ok else None
            except (ValueError, IndexError):
                seen = None
            if not isinstance(seen, dict) or not isinstance(seen.get("site"), list):
                raise StepError(f"{where} cannot run: {r.tail(3) or f'exit code {r.rc}'}", hint=hint)
            return {"python": path, "version": str(seen.get("version")), "site": [str(d) for d in seen["site"]]}
        return ctx.once("install.runtime", probe)

    def _pth(self, ctx: StepContext, runtime: dict[str, Any]) -> bytes:
        """The `.pth` that adds the runtime's folders after the environment's own packages
        (`addsitedir`, so the runtime's own .pth files work as they do in the runtime)."""
        lines = [f"# specops: the prepared runtime {runtime['python']} (sglang_runtime), after this "
                 "environment's own packages"]
        lines += [f"import site; site.addsitedir({d!r})" for d in runtime["site"]]
        return ("\n".join(lines) + "\n").encode()

    def _venv_site(self, ctx: StepContext) -> dict[str, Any]:
        _, venv, python = self._paths(ctx)
        r = ctx.probe(["env", "-u", "PYTHONPATH", python, "-c", VENV_SITE])
        try:
            return dict(json.loads(r.stdout.strip().splitlines()[-1]))
        except (ValueError, IndexError, TypeError):
            raise StepError(f"{python} cannot run: {r.tail(3)}") from None

    def _runtime_linked(self, ctx: StepContext, runtime: dict[str, Any]) -> bool:
        """The environment's `.pth` lists exactly the runtime's folders."""
        site = self._venv_site(ctx)
        path = posixpath.join(str(site["purelib"]), RUNTIME_PTH)
        return ctx.transport.stat_size(path) is not None and ctx.transport.get(path) == self._pth(ctx, runtime)

    def _link_runtime(self, ctx: StepContext, runtime: dict[str, Any]) -> str:
        """Write the runtime's `.pth` into the environment; its path. An environment made
        from another python version cannot load the runtime's compiled packages: refused."""
        _, venv, _ = self._paths(ctx)
        site = self._venv_site(ctx)
        if site.get("version") != runtime["version"]:
            raise StepError(f"{venv} is a python {site.get('version')} environment; the runtime "
                            f"{runtime['python']} is python {runtime['version']}",
                            hint=f"remove {venv}, or point sglang_venv at a new folder: it is then made "
                                 "from the runtime's python")
        path = posixpath.join(str(site["purelib"]), RUNTIME_PTH)
        ctx.put(self._pth(ctx, runtime), path)
        return path

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
            stamp: dict[str, Any] = {"tree": tree, "commit": head.stdout.strip() if head.ok else None,
                                     "pyproject_sha256": hashlib.sha256(pyproject).hexdigest(),
                                     "extras": s.extras, "install_deps": s.install_deps, "pip_args": s.pip_args}
            runtime = self._runtime(ctx)
            if runtime is not None:  # another runtime, or one whose folders moved: install again
                stamp["runtime"] = {"python": runtime["python"], "site": runtime["site"]}
            return stamp
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
            seen: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])  # PROBE prints one object
        except (ValueError, IndexError):
            raise StepError(f"unexpected answer from {python}: {r.tail(3)}") from None
        return seen

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

    def _image(self, ctx: StepContext) -> container.ContainerSettings | None:
        """`sglang_image`: the image replaces the environment (servers.container)."""
        return container.ContainerSettings.from_vars(ctx.vars, where=f"{ctx.step.where}: {ctx.step.label}")

    def _check_image(self, ctx: StepContext, image: container.ContainerSettings) -> Outcome:
        """The image route's install: the image is on the host (pulled when missing), and with
        the tree mounted over its `sglang`, that package is the tree's (its files' hashes)."""
        tree = ctx.path(str(ctx.args["tree"]))
        facts = container.image_facts(ctx.transport, image, tree, pull=True, timeout=ctx.timeout)
        ctx.facts["container"] = facts.manifest()
        version, _ = tree_version(TransportTreeFiles(ctx.transport, tree))
        return Outcome(changed=False, data={**container.facts_dict(facts), "version": version},
                       message=f"image {facts.image} ({facts.image_id[:19]}) via {facts.runtime}: sglang "
                               f"{version} from {tree}/python mounted over {facts.sglang_dir}")

    # ----- the contract -------------------------------------------------------------------

    def describe(self, ctx: StepContext) -> list[str]:
        image = self._image(ctx)
        if image is not None:
            tree = ctx.path(str(ctx.args["tree"]))
            return [f"{image.runtime or 'podman (else docker)'}: image {image.image} on the host (pulled if missing); "
                    f"with {tree}/python/sglang mounted over the image's sglang, the container sees the tree's files"]
        tree, venv, python = self._paths(ctx)
        runtime = self._settings(ctx).runtime
        base = ctx.path(runtime) if runtime else ctx.host.python
        lines = [f"{base} -m venv {venv}  (uv venv --seed where the host has uv; kept if present)"]
        if runtime:
            lines.append(f"put <{venv} site-packages>/{RUNTIME_PTH}: the site-packages of {base} "
                         "(sglang_runtime), after the environment's own")
        return lines + [
            " ".join(self._pip_argv(ctx)) + f"  (from {self._neutral(ctx)}; output to the run directory)",
            f"check from {self._neutral(ctx)}: {python} finds sglang under {tree}/python at the tree's version"]

    def is_done(self, ctx: StepContext) -> bool | None:
        if self._image(ctx) is not None:
            return False  # the check is the step (one round trip)
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
            runtime = self._runtime(ctx)
            if runtime is not None and not self._runtime_linked(ctx, runtime):
                return False
            if self._judge(ctx, self._probe(ctx)) != "":
                return False
            tree, _, python = self._paths(ctx)
            check_runtime(ctx, tree, python, self._settings(ctx))  # a runtime changed since: apply refuses
            return True
        except StepError:
            return False  # apply says why (no tree yet, a broken environment)

    def apply(self, ctx: StepContext) -> Outcome:
        image = self._image(ctx)
        if image is not None:
            return self._check_image(ctx, image)
        s = self._settings(ctx)
        tree, venv, python = self._paths(ctx)
        check_cuda(ctx, tree, s)  # a release the driver cannot run is refused before anything is made
        runtime = self._runtime(ctx)  # a runtime that cannot run fails here, before anything is made
        stamp = self._wanted_stamp(ctx)
        cwd = self._neutral(ctx)
        started = time.monotonic()
        if ctx.probe(["test", "-x", python]).rc != 0:
            base = runtime["python"] if runtime else ctx.host.python
            made = ctx.run(["bash", "-c", MAKE_VENV, "_", venv, base], timeout=min(ctx.timeout, 600))
            if not made.ok:
                raise StepError(f"cannot create the environment {venv} from {base}: {made.tail(3)}",
                                hint="install python3-venv (apt-get install python3-venv) or uv on the host")
        linked = self._link_runtime(ctx, runtime) if runtime else None
        before = self._probe(ctx)
        ctx.run(["mkdir", "-p", cwd], timeout=30)
        pip = ctx.run(["env", "-u", "PYTHONPATH", *self._pip_argv(ctx)], cwd=cwd)
        log = self._save_log(ctx, pip.command, pip.stdout + pip.stderr)
        if not pip.ok:
            raise StepError(f"pip install -e {s.target(tree)} failed (exit {pip.rc}): {pip.tail(3)}",
                            hint=f"the whole pip output is in {log}")
        check_runtime(ctx, tree, python, s)  # before any import of the tree, and before any server
        checked = self._patch_round_trips(ctx) if s.install_deps or runtime else []
        ctx.transport.put((json.dumps(stamp, indent=1, sort_keys=True) + "\n").encode(), self._stamp_path(ctx))
        after = self._probe(ctx) or {}
        replaced, was = "", None
        if before and before.get("origin") and self._judge(ctx, before):
            was = {"origin": before.get("origin"), "version": before.get("version")}
            replaced = f"; replaced the sglang at {was['origin']} ({was['version']})"
        deps = "" if s.install_deps else ", no deps"
        if runtime:
            deps += f", runtime {runtime['python']}"
        if checked:
            deps += f"; {', '.join(checked)} round trip ok in the environment"
        message = (f"sglang {after.get('version')} editable from {tree}/python into {venv}{deps} "
                   f"in {time.monotonic() - started:.1f}s{replaced}; pip log {log}")
        return Outcome(result=None, data={"version": after.get("version"), "origin": after.get("origin"),
                                          "venv": venv, "python": python, "pip_log": str(log),
                                          "commit": stamp["commit"], "replaced": was,
                                          "runtime": runtime, "runtime_pth": linked}, message=message)

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        if self._image(ctx) is not None:
            return True, ""  # image_facts proved the mount
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
        """The install's command and output beside the journal: masked, as every file of the
        run directory is (an index URL may carry a token), and whole (written atomically)."""
        path = ctx.run_dir / "logs" / f"{ctx.host.name}.sglang-install.log"
        atomic_write(path, redact(f"$ {command}\n{text}"), fsync=False)
        return str(path)


def check_cuda(ctx: StepContext, tree: str, s: InstallSettings) -> None:
    """Refuse, before the environment is made, a tree whose pins need a newer CUDA than the
    host's driver supports (specops.sglang.cuda); warn where that cannot be told. Nothing to
    judge on a `device: cpu` host, or where nvidia-smi finds no GPU (the GPU preflight says
    why), or with a prepared runtime, whose own torch decides."""
    if getattr(ctx.host, "device", "gpu") == "cpu":
        return
    inventory = parse_probe(ctx.probe(probe_command()).stdout)
    pyproject = TransportTreeFiles(ctx.transport, tree).read(cuda.PYPROJECT)
    need = cuda.needed(pyproject.decode("utf-8", "replace") if pyproject is not None else None, s.extras, s.pip_args)
    if getattr(s, "runtime", None):
        need = cuda.CudaNeed(None, need.pins, f"the prepared runtime {s.runtime}'s own torch decides")
    version, _ = tree_version(TransportTreeFiles(ctx.transport, tree))
    verdict = cuda.verdict(version, need, inventory)
    if verdict.refuse:
        raise StepError(verdict.refuse, hint="set sglang_ref to that release, or update the host's NVIDIA driver")
    if verdict.warn:
        ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name, message=verdict.warn))


def check_runtime(ctx: StepContext, tree: str, python: str, s: InstallSettings) -> None:
    """Refuse an environment that does not hold the release's own pins (sglang.runtime_pins):
    a prepared runtime or a venv made by hand (`sglang_install_deps: false`), whose packages
    pip did not choose. On a `device: cpu` host the tree's CPU pins (`pyproject_cpu.toml`,
    SGLang's CPU install) where it has them. `allow_mismatch` says what it lets through."""
    if s.install_deps and not s.runtime:
        return  # pip installed the release's own dependencies
    files = TransportTreeFiles(ctx.transport, tree)
    on_cpu = getattr(ctx.host, "device", "gpu") == "cpu"
    name = next((n for n in ((runtime_pins.PYPROJECT_CPU,) if on_cpu else ()) + (cuda.PYPROJECT,)
                 if files.read(n) is not None), None)
    if name is None:
        ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name,
                                     message=f"runtime not checked: {tree} has no {cuda.PYPROJECT}"))
        return
    text = (files.read(name) or b"").decode("utf-8", "replace")
    result = ctx.probe(runtime_pins.command(python, cuda.requirements(text, s.extras)), timeout=120)
    if not result.ok:
        raise StepError(f"cannot check the environment {python} against {tree}/{name}: {result.tail(3)}")
    pins = runtime_pins.parse(result.stdout)
    bad = sorted(runtime_pins.unmet(pins), key=lambda p: p.installed is None)  # wrong versions first
    for pin in runtime_pins.unjudged(pins):
        ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name,
                                     message=f"runtime pin {pin.req!r} not checked: {pin.why}"))
    if not bad:
        return
    what = f"{len(bad)} of the pins in {tree}/{name} are not met by {python}: " + "; ".join(p.problem() for p in bad)
    if s.allow_mismatch:
        ctx.journal.emit(events.Warn(host=ctx.host.name, step=ctx.step.name,
                                     message=f"runtime check skipped (--allow-runtime-mismatch): {what}"))
        return
    raise StepError(f"{what} (install them into it, or launch anyway with --allow-runtime-mismatch)",
                    hint=f"{runtime_pins.RULE}; sglang_allow_runtime_mismatch: true is the same opt-out as a variable")
