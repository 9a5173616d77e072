"""Where a host's SGLang runs from: the environment the checkout is installed into (the neutral
directory its processes start in is hostfiles/paths.py's `neutral_cwd`).

One home for these names, because the install step, the servers and the `sglang`
benchmark runner must all agree on them: a server started with another python, or from
a directory holding `sglang/` (which turns `sglang` into a namespace package whose
`__init__` never runs), runs some other SGLang than the patched tree.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from specops.errors import ConfigError

#: the environment's folder under the workdir when `sglang_venv` is not set
DEFAULT_VENV = "venv"


def venv_dir(variables: dict[str, Any]) -> str:
    """`sglang_venv`, else `<workdir>/venv` (still to be expanded on the host)."""
    return str(variables.get("sglang_venv") or posixpath.join(str(variables["workdir"]), DEFAULT_VENV))


def venv_python(venv: str) -> str:
    return posixpath.join(venv, "bin", "python")


#: the file in the environment's site-packages that adds a prepared runtime's packages after
#: the environment's own (its name sorts after the editable install's, so the tree comes first)
RUNTIME_PTH = "zz-specops-runtime.pth"


def _flag(value: Any, name: str, where: str) -> bool:
    """A boolean variable, as YAML or `--var` (the string true/false) gives it."""
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be true or false, got {value!r}", where=where)
    return value


@dataclass
class InstallSettings:
    """What the install step does, from the variables (`sglang_extras`, `sglang_pip_args`,
    `sglang_install_deps`, `sglang_runtime`), so hosts.yaml, --var and the step's own args all
    reach it.

    `runtime`: a python whose environment already holds torch and SGLang's dependencies (a
    conda env, a cluster module, a cached venv). The environment is then made from that
    python and sees its packages; only the tree is installed into it, without dependencies
    unless `sglang_install_deps: true` says otherwise."""

    venv: str
    extras: list[str] = field(default_factory=list)
    pip_args: list[str] = field(default_factory=list)
    install_deps: bool = True
    runtime: str | None = None
    #: `--allow-runtime-mismatch` / `sglang_allow_runtime_mismatch`: launch over a runtime that
    #: does not meet the release's pins (said as a warning, never silently)
    allow_mismatch: bool = False

    @classmethod
    def from_vars(cls, variables: dict[str, Any], args: dict[str, Any], where: str) -> "InstallSettings":
        def pick(key: str, var: str, default: Any) -> Any:
            if key in args and args[key] is not None:
                return args[key]
            return variables.get(var, default)

        extras = pick("extras", "sglang_extras", [])
        pip_args = pick("pip_args", "sglang_pip_args", [])
        runtime = pick("runtime", "sglang_runtime", None)
        if runtime is not None and (not isinstance(runtime, str) or not runtime.strip()):
            raise ConfigError(f"sglang_runtime must be the path of a python on the host, got {runtime!r}",
                              where=where, hint="e.g. /opt/conda/envs/sglang/bin/python; leave it out for a new "
                                                "environment with SGLang's dependencies installed")
        deps = pick("install_deps", "sglang_install_deps", runtime is None)  # a runtime brings them
        allow = _flag(pick("allow_runtime_mismatch", "sglang_allow_runtime_mismatch", False),
                      "sglang_allow_runtime_mismatch", where)
        for name, value in (("sglang_extras", extras), ("sglang_pip_args", pip_args)):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"{name} must be a list of strings, got {value!r}", where=where)
        if isinstance(deps, str) and deps.lower() in ("true", "false"):
            deps = deps.lower() == "true"  # from --var
        if not isinstance(deps, bool):
            raise ConfigError(f"sglang_install_deps must be true or false, got {deps!r}", where=where)
        bad = [e for e in extras if not e.replace("-", "").replace("_", "").isalnum()]
        if bad:
            raise ConfigError(f"sglang_extras: {', '.join(bad)} is not an extra's name", where=where)
        venv = str(args.get("venv") or venv_dir(variables))
        return cls(venv=venv, extras=list(extras), pip_args=list(pip_args), install_deps=deps,
                   runtime=runtime.strip() if runtime else None, allow_mismatch=allow)

    def target(self, tree: str) -> str:
        """`<tree>/python[extra,...]`, what pip installs editable."""
        base = posixpath.join(tree, "python")
        return f"{base}[{','.join(self.extras)}]" if self.extras else base
