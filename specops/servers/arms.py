"""Arm profiles (baseline / eagle3 / adaptive / spec-off) from playbook vars, validated up front.

A typo in an arm ("num_step") must stop the run before a GPU is touched, with the arm
and key named, not launch a server with a silently default value. Fairness settings
(max running requests, CUDA-graph max batch size) are top-level only: every arm gets
the same, because SGLang caps speculative servers at 48 running requests otherwise.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping

from specops.config.inventory import DEFAULT_DEVICE, DEVICES
from specops.config.optionspec import INT, option
from specops.config.schema import check_keys, choice, type_name, where_of
from specops.errors import ConfigError
from specops.secrets import looks_secret, remember

KINDS = ("baseline", "eagle3", "adaptive", "spec-off")
BASE_PORT = 30000
DEFAULT_MAX_RUNNING_REQUESTS = 64
EAGLE_DEFAULTS = {"num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}

_COMMON_KEYS = ("kind", "model", "port", "gpus", "device", "tp_size", "mem_fraction_static", "hub_offline",
                "extra_args", "env")
_EAGLE_KEYS = ("draft_model", "num_steps", "eagle_topk", "num_draft_tokens")
ALLOWED_KEYS: dict[str, tuple[str, ...]] = {
    "baseline": _COMMON_KEYS,
    "eagle3": _COMMON_KEYS + _EAGLE_KEYS,
    "adaptive": _COMMON_KEYS + _EAGLE_KEYS + ("threshold", "tiers"),
    # the speculative server with drafting off at every batch size: what staying able to speculate costs
    "spec-off": _COMMON_KEYS + _EAGLE_KEYS,
}
_FAIRNESS_KEYS = ("max_running_requests", "cuda_graph_max_bs")


@dataclass(frozen=True)
class ArmOverrides:
    """What a command line sets on the host's arms for one run, typed from the option on
    (`specops bench --threshold N`): the run var `arm_overrides`, which run.engine.resolve_vars
    applies to the `arms` var over hosts.yaml and --var, so templates and `arms_from_vars` see it."""

    VAR: ClassVar[str] = "arm_overrides"
    #: the arm --threshold sets
    ADAPTIVE: ClassVar[str] = "adaptive"

    threshold: int | None = field(default=None, metadata=option(
        "--threshold", "the adaptive arm's threshold (same as --var arms.adaptive.threshold=N)", kind=INT, minimum=1))

    def applied(self, arms: Any) -> Any:
        """The `arms` var with the overrides set; mappings are copied, never changed in place
        (a list of names reads as arms with no settings; anything else is left for
        arms_from_vars to refuse)."""
        if self.threshold is None or arms is None:
            return arms
        if isinstance(arms, list):
            arms = {name: {} for name in arms}
        if not isinstance(arms, Mapping):
            return arms
        arm = arms.get(self.ADAPTIVE)
        return {**arms, self.ADAPTIVE: {**(arm if isinstance(arm, Mapping) else {}), "threshold": self.threshold}}


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
    #: tensor parallelism; None: the number of GPUs the arm runs on
    tp_size: int | None = None
    #: the share of GPU memory SGLang takes; required for arms that share a GPU
    mem_fraction_static: float | None = None
    #: start the server with HF_HUB_OFFLINE=1 (weights are settled before launch)
    hub_offline: bool = True
    draft_model: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    threshold: int | None = None
    tiers: dict[int, list[int]] | None = None  # native adaptive (0.5.14+): running batch -> draft steps
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    #: `gpu` or `cpu`: the arm's own `device`, else the host's (the `device` variable)
    device: str = DEFAULT_DEVICE

    @property
    def cpu(self) -> bool:
        return self.device == "cpu"

    @property
    def speculative(self) -> bool:
        return self.kind != "baseline"


def infer_kind(name: str) -> str | None:
    """Kind from the arm's name: "adaptive-t8" -> adaptive, "eagle3_b" -> eagle3, "spec_off" -> spec-off."""
    low = name.lower()
    if "specoff" in low.replace("_", "").replace("-", ""):
        return "spec-off"
    if "adaptive" in low:
        return "adaptive"
    if "eagle" in low:
        return "eagle3"
    if "baseline" in low or low in ("base", "nospec", "no-spec"):
        return "baseline"
    return None


def _err(where: str, msg: str, hint: str | None = None) -> ConfigError:
    return ConfigError(msg, where=where, hint=hint)


class _Arm:
    """One arm's settings with the message location of each key: file:line when the arm
    came from a YAML file, else the caller's `vars.arms.<name>`."""

    def __init__(self, name: str, raw: Mapping[str, Any], where: str):
        self.name, self.raw, self.fallback = name, raw, where
        self.what = f"arm '{name}'"

    def at(self, key: str | None = None) -> str:
        return where_of(self.raw, key, self.fallback)

    def int(self, key: str, default: Any, minimum: int = 1, maximum: int | None = None) -> int:
        return _int(self.raw.get(key, default), self.at(key if key in self.raw else None), key, self.what,
                    minimum, maximum)


def _int(value: Any, where: str, key: str, what: str, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _err(where, f"'{key}' in {what} must be an integer, got {type_name(value)} {value!r}")
    if value < minimum or (maximum is not None and value > maximum):
        rng = f">= {minimum}" if maximum is None else f"in {minimum}..{maximum}"
        raise _err(where, f"'{key}' in {what} must be {rng}, got {value}")
    return value


def _str(value: Any, where: str, key: str, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _err(where, f"'{key}' in {what} must be a non-empty string, got {value!r}")
    return value


def _gpus(value: Any, where: str, what: str) -> list[int]:
    if isinstance(value, bool):
        raise _err(where, f"'gpus' in {what} must be a list of GPU indices, got {value!r}")
    if isinstance(value, int):
        value = [value]
    elif isinstance(value, str):
        try:
            value = [int(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise _err(where, f"'gpus' in {what} must be a list of GPU indices, got {value!r}") from None
    if not isinstance(value, list) or not value:
        raise _err(where, f"'gpus' in {what} must be a non-empty list of GPU indices, got {value!r}")
    return [_int(v, where, "gpus", what, minimum=0) for v in value]


def _fraction(value: Any, where: str, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < float(value) < 1:
        raise _err(where, f"'mem_fraction_static' in {what} must be a number between 0 and 1, got {value!r}")
    return float(value)


def _bool(value: Any, where: str, key: str, what: str) -> bool:
    if not isinstance(value, bool):
        raise _err(where, f"'{key}' in {what} must be true or false, got {value!r}")
    return value


def _extra_args(value: Any, where: str, what: str) -> list[str]:
    if isinstance(value, str):
        return shlex.split(value)
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                              for v in value):
        raise _err(where, f"'extra_args' in {what} must be a list of strings, got {value!r}")
    return [str(v) for v in value]


def _env(value: Any, where: str, what: str) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _err(where, f"'env' in {what} must be a mapping of NAME: value, got {value!r}")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not k.replace("_", "a").isalnum() or k[0].isdigit():
            raise _err(where, f"'env' key {k!r} in {what} is not a valid environment variable name")
        if isinstance(v, (Mapping, list)) or v is None:
            raise _err(where, f"'env' value for {k} in {what} must be a scalar, got {v!r}")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        if looks_secret(k):  # a token given as arm env is masked wherever specops writes it
            remember(out[k])
    if "CUDA_VISIBLE_DEVICES" in out:
        raise _err(where, f"set GPUs of {what} with 'gpus', not env CUDA_VISIBLE_DEVICES")
    return out


def _device(arm: _Arm, host_device: Any, where: str) -> str:
    """The arm's device: its own `device`, else the host's. A CPU arm has no GPUs to ask for."""
    if "device" in arm.raw:
        device = choice(arm.raw, "device", DEVICES, arm.what, where=arm.fallback)
        source = "its own device"
    else:
        if host_device not in DEVICES:
            raise _err(where, f"'device' must be one of {', '.join(DEVICES)}, got {host_device!r}")
        device, source = str(host_device), "the host's device"
    if device == "cpu" and arm.raw.get("gpus") is not None:
        raise _err(arm.at("gpus"), f"{arm.what} runs on the CPU ({source} is cpu) but sets gpus",
                   hint="drop 'gpus' from the arm, or give it device: gpu")
    return device


def _kind(arm: _Arm) -> str:
    kind = arm.raw.get("kind")
    if kind is None:
        kind = infer_kind(arm.name)
        if kind is None:
            raise _err(arm.at(), f"cannot tell the kind of arm '{arm.name}' from its name",
                       hint=f"add kind: one of {', '.join(KINDS)}")
        return kind
    return choice(arm.raw, "kind", KINDS, arm.what, where=arm.fallback)


def _check_arm_keys(arm: _Arm, kind: str) -> None:
    """Unknown keys as every YAML file reports them; two mistakes get a message of their own."""
    for key in arm.raw:
        if key in _FAIRNESS_KEYS:
            raise _err(arm.at(key), f"'{key}' cannot be set per arm ({arm.what}): every arm gets the same value",
                       hint=f"set {key} once at the top level of vars")
        other = [k for k, ks in ALLOWED_KEYS.items() if key in ks]
        if key not in ALLOWED_KEYS[kind] and other:
            raise _err(arm.at(key), f"unknown key '{key}' in {arm.what} (only valid for {'/'.join(other)} arms); "
                                    f"allowed: {', '.join(ALLOWED_KEYS[kind])}")
    check_keys(arm.raw, ALLOWED_KEYS[kind], arm.what, where=arm.fallback)


def _speculative(spec: ArmSpec, arm: _Arm, top_draft: Any) -> None:
    """Draft model and EAGLE shape of a speculative arm, with their defaults."""
    draft = arm.raw.get("draft_model", top_draft)
    if draft is None:
        raise _err(arm.at(), f"{spec.kind} arm needs a draft model", hint="set draft_model in vars or in the arm")
    spec.draft_model = _str(draft, arm.at("draft_model"), "draft_model", arm.what)
    spec.num_steps = arm.int("num_steps", EAGLE_DEFAULTS["num_steps"])
    spec.eagle_topk = arm.int("eagle_topk", EAGLE_DEFAULTS["eagle_topk"])
    default_ndt = spec.num_steps + 1 if spec.eagle_topk == 1 else EAGLE_DEFAULTS["num_draft_tokens"]
    spec.num_draft_tokens = arm.int("num_draft_tokens", default_ndt)
    if spec.eagle_topk == 1 and spec.num_draft_tokens != spec.num_steps + 1:
        raise _err(arm.at("num_draft_tokens"), f"with eagle_topk 1, num_draft_tokens must be num_steps + 1 "
                                               f"({spec.num_steps + 1}), got {spec.num_draft_tokens}")
    if spec.kind == "adaptive":
        if "threshold" not in arm.raw:
            raise _err(arm.at(), "adaptive arm needs 'threshold' (the running batch size above which "
                                 "it stops speculating)")
        spec.threshold = arm.int("threshold", None)
        if arm.raw.get("tiers") is not None:
            spec.tiers = _tiers(arm.raw["tiers"], arm.at("tiers"), arm.what)


def _tiers(value: Any, where: str, what: str) -> dict[int, list[int]]:
    """`tiers: {1: 3, 4: 1, 10: 0}`: from each running batch size up, the draft steps (0 = none);
    a list gives SGLang several candidates to choose from at run time."""
    if not isinstance(value, Mapping) or not value:
        raise _err(where, f"'tiers' in {what} must map a running batch size to draft steps, e.g. {{1: 3, 8: 0}}; "
                          f"got {value!r}")
    out: dict[int, list[int]] = {}
    for key, steps in value.items():
        try:
            batch = int(key)
        except (TypeError, ValueError):
            raise _err(where, f"'tiers' key {key!r} in {what} must be a batch size (an integer >= 1)") from None
        _int(batch, where, "tiers key", what)
        items = steps if isinstance(steps, list) else [steps]
        if not items:
            raise _err(where, f"'tiers' entry {key} in {what} has no steps")
        out[batch] = [_int(v, where, f"tiers.{key}", what, minimum=0) for v in items]
    if 1 not in out:
        raise _err(where, f"'tiers' in {what} must start at batch size 1", hint="add e.g. 1: 3")
    return dict(sorted(out.items()))


def arms_from_vars(vars: Mapping[str, Any], *, where: str = "vars") -> dict[str, ArmSpec]:
    """Validated arms from playbook/inventory vars (see module doc for the shape).

    Raises ConfigError naming the arm and the key (file:line when the arms came from a YAML
    file), with a did-you-mean for typos."""
    if not isinstance(vars, Mapping):
        raise _err(where, "vars must be a mapping")
    arms_raw = vars.get("arms")
    if arms_raw is None:
        raise _err(where, "no 'arms' defined", hint="add e.g. arms: {baseline: {port: 30000}, eagle3: {...}}")
    if isinstance(arms_raw, list):
        arms_raw = {name: {} for name in arms_raw}
    if not isinstance(arms_raw, Mapping) or not arms_raw:
        raise _err(where_of(arms_raw, None, f"{where}.arms"),
                   "'arms' must be a non-empty mapping of arm name to settings")

    model = vars.get("model")
    mrr = _int(vars.get("max_running_requests", DEFAULT_MAX_RUNNING_REQUESTS), where, "max_running_requests", "vars")
    cgbs = _int(vars.get("cuda_graph_max_bs", mrr), where, "cuda_graph_max_bs", "vars")

    out: dict[str, ArmSpec] = {}
    used_ports: dict[int, str] = {}
    for idx, (name, raw) in enumerate(arms_raw.items()):
        fallback = where_of(arms_raw, name, f"{where}.arms.{name}" if where == "vars" else f"{where}: vars.arms.{name}")
        if not isinstance(name, str) or not name.replace("-", "_").replace("_", "a").isalnum():
            raise _err(fallback, f"arm name {name!r} must be letters, digits, '-' or '_'")
        raw = {} if raw is None else raw
        if not isinstance(raw, Mapping):
            raise _err(fallback, f"arm '{name}' settings must be a mapping, got {type_name(raw)}")
        arm = _Arm(name, raw, fallback)
        kind = _kind(arm)
        _check_arm_keys(arm, kind)
        arm_model = raw.get("model", model)
        if arm_model is None:
            raise _err(arm.at(), f"no model for {arm.what}: set 'model' in vars or in the arm")
        port = arm.int("port", BASE_PORT + idx, 1, 65535)
        if port in used_ports:
            raise _err(arm.at("port"), f"port {port} of {arm.what} is already used by arm '{used_ports[port]}'")
        used_ports[port] = name
        spec = ArmSpec(
            name=name, kind=kind, model=_str(arm_model, arm.at("model"), "model", arm.what), port=port,
            max_running_requests=mrr, cuda_graph_max_bs=cgbs,
            gpus=_gpus(raw["gpus"], arm.at("gpus"), arm.what) if raw.get("gpus") is not None else None,
            tp_size=arm.int("tp_size", None, 1, 64) if raw.get("tp_size") is not None else None,
            mem_fraction_static=_fraction(raw.get("mem_fraction_static"), arm.at("mem_fraction_static"), arm.what),
            hub_offline=_bool(raw.get("hub_offline", True), arm.at("hub_offline"), "hub_offline", arm.what),
            extra_args=_extra_args(raw.get("extra_args", []), arm.at("extra_args"), arm.what),
            env=_env(raw.get("env", {}), arm.at("env"), arm.what),
            device=_device(arm, vars.get("device") or DEFAULT_DEVICE, where),
        )
        if kind != "baseline":
            _speculative(spec, arm, vars.get("draft_model"))
        out[name] = spec
    return out
