"""Arm profiles (baseline / eagle3 / adaptive) from playbook vars, validated up front.

A typo in an arm ("num_step") must stop the run before a GPU is touched, with the arm
and key named, not launch a server with a silently default value. Fairness settings
(max running requests, CUDA-graph max batch size) are top-level only: every arm gets
the same, because SGLang caps speculative servers at 48 running requests otherwise.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass, field
from typing import Any, Mapping

from specops.errors import ConfigError

KINDS = ("baseline", "eagle3", "adaptive")
BASE_PORT = 30000
DEFAULT_MAX_RUNNING_REQUESTS = 64
EAGLE_DEFAULTS = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}

_COMMON_KEYS = ("kind", "model", "port", "gpus", "extra_args", "env")
_EAGLE_KEYS = ("draft_model", "num_steps", "eagle_topk", "num_draft_tokens")
ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "baseline": _COMMON_KEYS,
    "eagle3": _COMMON_KEYS + _EAGLE_KEYS,
    "adaptive": _COMMON_KEYS + _EAGLE_KEYS + ("threshold",),
}
_FAIRNESS_KEYS = ("max_running_requests", "cuda_graph_max_bs")


@dataclass
class ArmSpec:
    """One server to launch: what the launch command and the state file are built from."""

    name: str
    kind: str
    model: str
    port: int
    max_running_requests: int
    cuda_graph_max_bs: int
    gpus: list[int] | None = None
    draft_model: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    threshold: int | None = None
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    @property
    def speculative(self) -> bool:
        return self.kind != "baseline"


def infer_kind(name: str) -> str | None:
    """Kind from the arm's name: "adaptive-t8" -> adaptive, "eagle3_b" -> eagle3."""
    low = name.lower()
    if "adaptive" in low:
        return "adaptive"
    if "eagle" in low:
        return "eagle3"
    if "baseline" in low or low in ("base", "nospec", "no-spec"):
        return "baseline"
    return None


def _err(where: str, msg: str, hint: str | None = None) -> ConfigError:
    return ConfigError(msg, where=where, hint=hint)


def _did_you_mean(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _int(value: Any, where: str, key: str, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(where, f"'{key}' must be an integer, got {type(value).__name__} {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        rng = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise _err(where, f"'{key}' must be {rng}, got {value}")
    return value


def _str(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(where, f"'{key}' must be a non-empty string, got {value!r}")
    return value


def _gpus(value: Any, where: str) -> list[int]:
    if isinstance(value, bool):
        raise _err(where, f"'gpus' must be a list of GPU indices, got {value!r}")
    if isinstance(value, int):
        value = [value]
    elif isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise _err(where, f"'gpus' must be a list of GPU indices, got {value!r}") from None
    if not isinstance(value, list) or not value:
        raise _err(where, f"'gpus' must be a non-empty list of GPU indices, got {value!r}")
    return [_int(v, where, "gpus", minimum=0) for v in value]


def _extra_args(value: Any, where: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise _err(where, f"'extra_args' must be a list of strings, got {value!r}")
    return [str(v) for v in value]


def _env(value: Any, where: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _err(where, f"'env' must be a mapping of NAME: value, got {value!r}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.replace("_", "a").isalnum() or k[0].isdigit():
            raise _err(where, f"'env' key {k!r} is not a valid environment variable name")
        if isinstance(v, (Mapping, list)) or v is None:
            raise _err(where, f"'env' value for {k} must be a scalar, got {v!r}")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
    if "CUDA_VISIBLE_DEVICES" in out:
        raise _err(where, "set GPUs with 'gpus', not env CUDA_VISIBLE_DEVICES")
    return out


def arms_from_vars(vars: Mapping[str, Any], *, where: str = "vars") -> dict[str, ArmSpec]:
    """Validated arms from playbook/inventory vars (see module doc for the shape).

    Raises ConfigError naming the arm and the key, with a did-you-mean for typos."""
    if not isinstance(vars, Mapping):
        raise _err(where, "vars must be a mapping")
    arms_raw = vars.get("arms")
    if arms_raw is None:
        raise _err(where, "no 'arms' defined", hint="add e.g. arms: {baseline: {port: 30000}, eagle3: {...}}")
    if isinstance(arms_raw, list):
        arms_raw = {name: {} for name in arms_raw}
    if not isinstance(arms_raw, Mapping) or not arms_raw:
        raise _err(f"{where}.arms", "'arms' must be a non-empty mapping of arm name to settings")

    model = vars.get("model")
    mrr = _int(vars.get("max_running_requests", DEFAULT_MAX_RUNNING_REQUESTS), where, "max_running_requests")
    cgbs = _int(vars.get("cuda_graph_max_bs", mrr), where, "cuda_graph_max_bs")
    top_draft = vars.get("draft_model")

    out: dict[str, ArmSpec] = {}
    used_ports: dict[int, str] = {}
    for idx, (name, raw) in enumerate(arms_raw.items()):
        aw = f"{where}.arms.{name}"
        if not isinstance(name, str) or not name.replace("-", "_").replace("_", "a").isalnum():
            raise _err(f"{where}.arms", f"arm name {name!r} must be letters, digits, '-' or '_'")
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise _err(aw, f"arm settings must be a mapping, got {raw!r}")
        kind = raw.get("kind")
        if kind is None:
            kind = infer_kind(name)
            if kind is None:
                raise _err(aw, f"cannot tell the kind of arm '{name}' from its name",
                           hint=f"add kind: one of {', '.join(KINDS)}")
        elif kind not in KINDS:
            raise _err(aw, f"'kind' must be one of {', '.join(KINDS)}, got {kind!r}"
                       + _did_you_mean(str(kind), KINDS))
        allowed = ALLOWED_KEYS[kind]
        for key in raw:
            if key in _FAIRNESS_KEYS:
                raise _err(aw, f"'{key}' cannot be set per arm: every arm gets the same value",
                           hint=f"set {key} once at the top level of vars")
            if key not in allowed:
                other = [k for k, ks in ALLOWED_KEYS.items() if key in ks]
                extra = f" (only valid for {'/'.join(other)} arms)" if other else _did_you_mean(str(key), allowed)
                raise _err(aw, f"unknown key '{key}'{extra}")

        arm_model = _str(raw.get("model", model), aw, "model") if raw.get("model", model) is not None else None
        if arm_model is None:
            raise _err(aw, "no model: set 'model' in vars or in the arm")
        port = _int(raw.get("port", BASE_PORT + idx), aw, "port", 1, 65535)
        if port in used_ports:
            raise _err(aw, f"port {port} is already used by arm '{used_ports[port]}'")
        used_ports[port] = name
        spec = ArmSpec(
            name=name, kind=kind, model=arm_model, port=port,
            max_running_requests=mrr, cuda_graph_max_bs=cgbs,
            gpus=_gpus(raw["gpus"], aw) if raw.get("gpus") is not None else None,
            extra_args=_extra_args(raw.get("extra_args", []), aw),
            env=_env(raw.get("env", {}), aw),
        )
        if kind != "baseline":
            draft = raw.get("draft_model", top_draft)
            if draft is None:
                raise _err(aw, f"{kind} arm needs a draft model", hint="set draft_model in vars or in the arm")
            spec.draft_model = _str(draft, aw, "draft_model")
            spec.num_steps = _int(raw.get("num_steps", EAGLE_DEFAULTS["num_steps"]), aw, "num_steps")
            spec.eagle_topk = _int(raw.get("eagle_topk", EAGLE_DEFAULTS["eagle_topk"]), aw, "eagle_topk")
            default_ndt = spec.num_steps + 1 if spec.eagle_topk == 1 else EAGLE_DEFAULTS["num_draft_tokens"]
            spec.num_draft_tokens = _int(raw.get("num_draft_tokens", default_ndt), aw, "num_draft_tokens")
            if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
                raise _err(aw, f"with eagle_topk 1, num_draft_tokens must be num_steps + 1 "
                               f"({spec.num_steps + 1}), got {spec.num_draft_tokens}")
        if kind == "adaptive":
            if "threshold" not in raw:
                raise _err(aw, "adaptive arm needs 'threshold' (the running batch size above which "
                               "it stops speculating)")
            spec.threshold = _int(raw["threshold"], aw, "threshold")
        out[name] = spec
    return out
