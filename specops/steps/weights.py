"""`weights`: every arm's target and draft model present on the host before any launch.

Local paths must hold a `config.json`. Hub ids are planned with the Hub's own library in
the host's environment (what is missing, how many bytes), refused when the cache's disk
cannot hold them, downloaded with the Hub's CLI under the step's timeout, and verified by
planning again. A gated model, a missing one and an unreachable Hub each get their own
one-line message; an already-complete snapshot is skipped. Servers then start with
`HF_HUB_OFFLINE=1`, so a file that is still missing fails fast instead of downloading
inside the readiness wait.
"""

from __future__ import annotations

from typing import Any

from specops.config.playbook import Step
from specops.errors import ConfigError, StepError
from specops.hostfiles import paths
from specops.secrets import loader_argv
from specops.servers.arms import arms_from_vars
from specops.servers.weights import (
    HubPlan,
    config_probe_argv,
    disk_problem,
    download_argv,
    explain,
    is_local_path,
    parse_plan,
    plan_argv,
)
from specops.sglang.venv import venv_dir, venv_python
from specops.steps.base import Outcome, StepContext, StepKind

#: Planning talks to the Hub once per model; it must answer within this or say why not.
PLAN_TIMEOUT_S = 120.0


def models_of(variables: dict[str, Any], where: str) -> list[str]:
    """The target and draft models of every arm, each once, in arm order."""
    out: list[str] = []
    for arm in arms_from_vars(variables, where=where).values():
        for model in (arm.model, arm.draft_model):
            if model and model not in out:
                out.append(model)
    return out


class Weights(StepKind):
    name = "weights"
    keys = ("models", "python", "env", "revision")
    arg_types = {"models": (str, list), "python": str, "env": dict, "revision": str}

    def validate(self, step: Step) -> None:
        if step.args is None:
            step.args = {}
        super().validate(step)
        models = step.args.get("models")
        if models is not None and not isinstance(models, (list, str)):
            raise ConfigError(f"{step.label}: models must be a list of model ids or paths", where=step.where)

    def _python(self, ctx: StepContext) -> str:
        """The environment's python (`python:`, else the SGLang venv's): its huggingface_hub
        is the one SGLang will load the weights with."""
        return ctx.path(str(ctx.args.get("python") or venv_python(venv_dir(ctx.vars))))

    def _models(self, ctx: StepContext) -> list[str]:
        models = ctx.args.get("models")
        if models is None:
            return models_of(ctx.vars, ctx.step.where)
        return [m.strip() for m in models.split(",")] if isinstance(models, str) else [str(m) for m in models]

    def _env(self, ctx: StepContext, **extra: str) -> dict[str, str]:
        env = {str(k): str(v) for k, v in (ctx.args.get("env") or {}).items()}
        env.setdefault("HF_HUB_ETAG_TIMEOUT", "20")
        env.update(extra)
        return env

    def _with_secrets(self, ctx: StepContext, argv: list[str]) -> list[str]:
        """HF_TOKEN and the like reach the Hub's tools from the host's 0600 secrets file,
        loaded by the process that runs them: never through argv."""
        if not ctx.host.secrets:
            return argv
        return loader_argv(paths.secrets_env(ctx.vars["workdir"])) + argv

    def _plan(self, ctx: StepContext, repo: str, *, offline: bool = False) -> HubPlan:
        python = self._python(ctx)
        env = self._env(ctx, **({"HF_HUB_OFFLINE": "1"} if offline else {}))
        res = ctx.run(self._with_secrets(ctx, plan_argv(python, repo, ctx.args.get("revision"), offline=offline)),
                      timeout=min(PLAN_TIMEOUT_S, ctx.timeout), env=env)
        if res.timed_out:
            return HubPlan(repo, error="unreachable", detail=f"no answer within {PLAN_TIMEOUT_S:g} s")
        if res.rc == 127 or (res.rc != 0 and "No such file" in res.stderr):
            return HubPlan(repo, error="no-hub", detail=f"{python} cannot run: {res.tail(2)}")
        return parse_plan(repo, res.stdout, res.stderr)

    def _settled(self, ctx: StepContext, repo: str) -> tuple[bool, str]:
        """(complete, note): planned against the Hub, or from the cache alone when the Hub
        cannot be reached (an offline cluster with a warm cache is fine)."""
        plan = self._plan(ctx, repo)
        if plan.error == "unreachable":
            cached = self._plan(ctx, repo, offline=True)
            if not cached.error:
                return True, f"{repo}: Hub unreachable, complete snapshot in the cache used"
            return False, explain(plan, ctx.host.name)
        if plan.error:
            return False, explain(plan, ctx.host.name)
        if plan.missing:
            return False, f"{repo}: {len(plan.missing)} of {len(plan.files)} files missing"
        return True, f"{repo}: complete"

    def _check_local(self, ctx: StepContext, path: str) -> str:
        """'' when the path holds a model; else why not."""
        where = ctx.path(path)
        state = ctx.probe(config_probe_argv(where)).stdout.strip()
        if state == "config":
            return ""
        if state == "dir":
            return f"model path {where} on {ctx.host.name} has no config.json (not a model directory)"
        return f"model path {where} does not exist on {ctx.host.name}"

    def describe(self, ctx: StepContext) -> list[str]:
        python = self._python(ctx)
        lines = []
        for model in self._models(ctx):
            if is_local_path(model):
                lines.append("probe: " + " ".join(config_probe_argv(ctx.path(model))[:2]) + f" ... {ctx.path(model)}")
            else:
                lines.append(f"probe: {python} -c <plan {model} with huggingface_hub>")
                lines.append(" ".join(download_argv(python, model, ctx.args.get("revision"))[3:]))
        return lines

    def is_done(self, ctx: StepContext) -> bool | None:
        notes = []
        for model in self._models(ctx):
            if is_local_path(model):
                if self._check_local(ctx, model):
                    return False
                notes.append(f"{model}: config.json present")
                continue
            ok, note = self._settled(ctx, model)
            if not ok:
                return False
            notes.append(note)
        ctx.facts["models"] = notes
        return True

    def apply(self, ctx: StepContext) -> Outcome:
        python = self._python(ctx)
        fetched: list[str] = []
        for model in self._models(ctx):
            if is_local_path(model):
                problem = self._check_local(ctx, model)
                if problem:
                    raise StepError(problem, hint="copy the model there, or use its Hub id")
                continue
            plan = self._plan(ctx, model)
            if plan.error == "unreachable" and not self._plan(ctx, model, offline=True).error:
                continue  # offline, but the cache holds it whole
            if plan.error:
                raise StepError(explain(plan, ctx.host.name))
            if not plan.missing:
                continue
            too_big = disk_problem(plan, ctx.host.name)
            if too_big:
                raise StepError(too_big, hint="free space there, or point HF_HOME at a larger disk (step env)")
            size = plan.missing_bytes
            ctx.emit(f"downloading {model}: {len(plan.missing)} files"
                     + (f", {size / 1024 ** 3:.1f} GiB" if size is not None else ""))
            res = ctx.run(self._with_secrets(ctx, download_argv(python, model, ctx.args.get("revision"))),
                          env=self._env(ctx))
            if not res.ok:
                raise StepError(f"downloading {model} failed"
                                + (" (timed out)" if res.timed_out else f" (exit {res.rc})") + f": {res.tail(3)}")
            fetched.append(model)
        return Outcome(changed=bool(fetched), data={"downloaded": fetched},
                       message=f"downloaded {', '.join(fetched)}" if fetched else "all models present")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        for model in self._models(ctx):
            if is_local_path(model):
                problem = self._check_local(ctx, model)
                if problem:
                    return False, problem
                continue
            ok, note = self._settled(ctx, model)
            if not ok:
                return False, note
        return True, ""
