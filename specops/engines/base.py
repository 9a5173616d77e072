"""The `ServingEngine` base class: everything specops knows about the server an arm runs, as one
object chosen once per host (`specops.engines.engine_for`), so the layers above ask the engine
instead of naming SGLang.

Named `ServingEngine`, not `Engine`: `run.engine.Engine` is the step engine (one playbook run:
journal, hosts in parallel, steps in order), and `flows/` and `steps/` hold both in the same
scope; one name for two things would be read wrong there.

The seams, each delegating to the code that knows the engine (for SGLang: `specops.sglang`,
the simulator `specops.sim`); docs/engines.md says what each is for:

- the declaration: `spec` (name, face, features; `config.engine_registry.EngineSpec`), read
  as `name`, `face`, `features`, `simulated`; `require` (the one feature check), `missing`;
- the flag reader: `layout` (what a tree contains, its flags among it), `tree_marker`, `tree_name`;
- launch: `server_python`, `launch_options`, `eagle_flags`, `model_flags`, `parser_flags`,
  `launch_module`, `launch_argv`, `cpu_env`, `launch_env`, `launched` (recognise an argv this
  engine started) and `cpu_memory_fixed` (whether CPU arms may start together);
- readiness and crash lines: `ready_line`, `crash_messages`, `log_prefix`;
- running-batch and acceptance metrics: `metrics` (`BatchMetrics`), `serves_metrics`, `client_api`;
- the launch hook: `arm_flags` (an arm -> its flags, mechanism and adaptive config, in the
  engine's words); its name in words: `title`;
- the adaptive mechanism: `adaptive_config` (a native tier config from a threshold),
  `tier_config` (from explicit tiers), `adaptive_flags` (Feature.NATIVE_TIERS),
  `patch_threshold_flag` (Feature.PATCH_ROUTE), `off_extend_switch` (what skips the draft
  extend of a drafting-off step);
- the benchmark runner: `runner_name` (what `--runner auto` is), `benchmark_module`;
- schedules: `schedule_forms` (a tuned `engines.schedule.Schedule` as each route takes it);
- its own steps: `step_kinds` (kinds of its own, e.g. an install) and `deploy_steps` (what the
  deploy playbook's `engine_steps` placeholder runs on its hosts; `specops.steps.load`).

A new engine is a subclass with a `spec`: a built-in's declaration goes in
`config.engine_registry.BUILTIN` and its instance in `specops.engines.BUILTIN`; a plugin's is
registered under the entry-point group `specops.engines` (docs/engines.md).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Protocol, Sequence

from specops.config.engine_registry import FEATURE_WORDS, EngineSpec, Feature
from specops.errors import ConfigError

if TYPE_CHECKING:  # annotations only: bench.running (below decide/) takes BatchMetrics and reaches no transport
    from specops.engines.schedule import Schedule, ScheduleForm
    from specops.hostfiles.treefiles import TreeFiles
    from specops.servers.arms import ArmSpec
    from specops.sglang.adaptive import AdaptivePlan, TierPlan
    from specops.steps.base import StepKind

#: one crash message an engine's processes log: (text with `{}` where a value goes, the process
#: that logs it, its source file, the releases whose source has it)
CrashMessage = tuple[str, str, str, tuple[str, ...]]


@dataclass(frozen=True)
class BatchMetrics:
    """How a server shows its running batch and acceptance while a point runs: two `/metrics`
    gauges, and the log line each decode step writes (bench.running reads either)."""

    #: the gauge of requests in the running batch
    running: str
    #: the gauge of the mean accept length
    accept: str
    #: fixed text every decode step's log line holds (grep on the host)
    decode_line: str
    #: a decode step's line: group 1 the running requests, group 2 the accept length (optional)
    decode_re: re.Pattern[str]
    #: a decode line whose step finished every running request (its accept length is cut short)
    all_finished_re: re.Pattern[str]
    #: counters (drafts, accepted tokens) the accept length is read from over a point instead of
    #: an `accept` gauge: mean accept length = 1 + accepted / drafts (vLLM's); None: the gauge
    accept_counters: tuple[str, str] | None = None
    #: fixed text of every log line that gives an accept length (grep on the host: `logs`)
    accept_line: str = ""
    #: a line of its own giving the accept length (group 1), where the decode line gives none
    #: (vLLM's SpecDecoding line follows its stats line); None: the decode line's group 2
    accept_re: re.Pattern[str] | None = None


class EngineLayout(Protocol):
    """What every engine's tree reader says of a tree (SGLang's `SGLangLayout`, vLLM's `VLLMLayout`)."""

    version: str | None
    ready_path: str
    notes: list[str]


@dataclass
class ArmFlags:
    """One arm in its engine's words (`ServingEngine.arm_flags`): its launch flags, the mechanism
    they run, and the adaptive config file they name, if any."""

    flags: list[str]
    #: `none`, `eagle3`, or the adaptive mechanism (servers.launch.MECHANISMS)
    mechanism: str
    effective_threshold: int | None = None
    notes: list[str] = field(default_factory=list)
    #: where the arm's adaptive config file goes on the host, and its text (None: no file)
    config_path: str | None = None
    config_json: str | None = None


def model_on_host(path: str, workdir: str) -> str:
    """A model given as `./x` or `../x` means under the workdir (servers start elsewhere)."""
    return posixpath.normpath(posixpath.join(workdir, path)) if path.startswith(("./", "../")) else path


def switch_set(env: Mapping[str, Any], switch: str) -> bool:
    """An on/off environment variable set true, read as SGLang's EnvBool reads it (true, 1,
    yes, y; any case)."""
    return str(env.get(switch, "")).lower() in ("true", "1", "yes", "y")


class ServingEngine:
    """What runs an arm's server, and everything about it the other layers need.

    A concrete base: a default lives here once, and an engine overrides what differs. A
    member an engine must give raises NotImplementedError naming the engine and the member
    (`missing_members` lists the attributes before it is used). What an engine can do is its
    `spec`'s feature set, checked in one place (`require`), with the engine's own reason."""

    #: the declaration: name, face and features (a built-in's is config.engine_registry.BUILTIN's)
    spec: ClassVar[EngineSpec]
    #: why this engine lacks a feature, in its own words (else FEATURE_WORDS')
    missing: ClassVar[Mapping[Feature, str]] = {}

    #: the line the server logs once it serves
    ready_line: str
    #: the messages its processes log when one dies (servers.logwatch's signatures)
    crash_messages: tuple[CrashMessage, ...]
    #: its running-batch and acceptance figures
    metrics: BatchMetrics
    #: what the engine writes before a line of its processes' output (a logger's part in the group
    #: `logger`: a record's start); the crash reader sets it aside. None: lines are bare
    log_prefix: re.Pattern[str] | None = None
    #: the environment variable that makes a drafting-off step skip the draft model's extend (tune's
    #: off-path message offers it); None: the engine has none
    off_extend_switch: str | None = None
    #: a file every tree of this engine holds (a tree without it is not this engine's), and the tree in words
    tree_marker: str
    tree_name: str
    #: the engine's name in words: the label of its version in reports and verify
    title: str
    #: the endpoint specops's own client sends requests to: `generate` (SGLang's /generate) or
    #: `completions` (/v1/completions, which every OpenAI-compatible server has)
    client_api: str
    #: the launch flags whose value is a model (checked on the host before launch, mounted into a container)
    model_flags: tuple[str, ...]
    #: the module `python -m` starts the server with (`launch_argv`, `launched`)
    launch_module: str
    #: what the server's environment needs to serve on a CPU (the arm's own env wins)
    cpu_env: Mapping[str, str] = {}
    #: the launch flag of the dynamic-spec-disable patch's threshold (Feature.PATCH_ROUTE)
    patch_threshold_flag: str = ""

    #: the attributes an engine must set (`missing_members`)
    REQUIRED = ("ready_line", "crash_messages", "metrics", "tree_marker", "tree_name", "title", "client_api",
                "model_flags", "launch_module")

    # --- the declaration ------------------------------------------------------------------
    @property
    def name(self) -> str:
        """hosts.yaml's `engine:` value."""
        return self.spec.name

    @property
    def face(self) -> str:
        """The server it shows (log lines, metrics, HTTP API): engines that share one share the
        readiness and crash lines the watch looks for."""
        return self.spec.face

    @property
    def features(self) -> frozenset[Feature]:
        return self.spec.features

    @property
    def simulated(self) -> bool:
        """A simulator: no model, no weights, no GPUs; the builtin client measures it."""
        return self.spec.simulated

    def has(self, feature: Feature) -> bool:
        return feature in self.spec.features

    def require(self, feature: Feature, where: str | None = None) -> None:
        """The one check of a feature: a ConfigError saying why this engine lacks it."""
        if feature not in self.spec.features:
            reason = self.missing.get(feature) or f"engine {self.name} has {FEATURE_WORDS[feature]}"
            raise ConfigError(reason, where=where)

    def missing_members(self) -> list[str]:
        """The required attributes this engine does not set (a plugin is checked when it loads)."""
        return [m for m in self.REQUIRED if not hasattr(self, m)]

    def _required(self, member: str) -> NotImplementedError:
        return NotImplementedError(f"engine {self.name} does not implement ServingEngine.{member}")

    # --- the flag reader ----------------------------------------------------------------
    def layout(self, files: TreeFiles) -> EngineLayout:
        """What the tree contains: its version, the flags its parser accepts, the adaptive
        mechanism it has, its readiness endpoint."""
        raise self._required("layout")

    # --- launch -------------------------------------------------------------------------
    def arm_flags(self, arm: ArmSpec, layout: EngineLayout, *, workdir: str,
                  bucket_sources: Mapping[str, str] | None, where: str) -> ArmFlags:
        """The launch hook: the arm's whole flag list in this engine's words, its mechanism and
        adaptive config, checked against the tree's parser (a ConfigError for an arm the tree
        cannot run). `workdir` is the host's absolute work directory (`model_on_host`);
        `bucket_sources` ({tree path: text}) the files that may build a CUDA-graph capture list."""
        raise self._required("arm_flags")

    def server_python(self, host_python: str, variables: Mapping[str, Any], expand: Callable[[str], str]) -> str:
        """The python that starts the server (the tree's environment; the host's for a simulator)."""
        raise self._required("server_python")

    def launch_options(self, variables: Mapping[str, Any]) -> list[str]:
        """Options of this engine's own from the host's vars, appended to every arm's argv."""
        return []

    def parser_flags(self, flags: Sequence[str], where: str) -> list[str]:
        """The part of an arm's flags the tree's own parser checks (ConfigError for a bad one of ours)."""
        return list(flags)

    def launch_argv(self, python: str, flags: Sequence[str], *, tree: str | None, options: Sequence[str],
                    where: str) -> list[str]:
        """The command that starts one arm's server with these flags."""
        return [python, "-m", self.launch_module, *flags]

    def eagle_flags(self, draft_model: str, num_steps: int, topk: int, draft_tokens: int) -> list[str]:
        """The flags of EAGLE3 speculation with this draft model and shape."""
        raise self._required("eagle_flags")

    def launch_env(self, env: Mapping[str, str], *, cpu: bool, hub_offline: bool) -> dict[str, str]:
        """The server's environment: the arm's `env` with what the engine needs added (the arm's own wins)."""
        out = {**self.cpu_env, **env} if cpu else dict(env)
        if hub_offline:
            out.setdefault("HF_HUB_OFFLINE", "1")  # weights were settled before launch: a gap fails fast
        return out

    def launched(self, argv: Sequence[str]) -> bool:
        """Whether this engine started a server with `argv` (a state file's)."""
        return self.launch_module in argv

    def serves_metrics(self, argv: Sequence[str]) -> bool:
        """Whether a server started with `argv` answers `/metrics`."""
        return True

    def skips_off_extend(self, env: Mapping[str, Any]) -> bool:
        """Whether an arm launched with `env` skips its drafting-off steps' draft extend (so
        drafting resumes cold): the engine's `off_extend_switch` set true (`switch_set`)."""
        return self.off_extend_switch is not None and switch_set(env, self.off_extend_switch)

    def cpu_memory_fixed(self, argv: Sequence[str], env: Mapping[str, str]) -> bool:
        """Whether a CPU server started with `argv` and `env` takes a KV cache of a size its
        arguments fix, not a share of the memory free when it starts: such arms may start
        together (one's start cannot change what another takes). By default no: one at a time."""
        return False

    # --- the adaptive mechanism (Feature.NATIVE_TIERS) -----------------------------------
    def adaptive_config(self, threshold: int, num_steps: int, max_bs: int,
                        bucket_sources: Mapping[str, str] | None = None, *, graphs: bool = True) -> AdaptivePlan:
        """The native adaptive config that speculates up to `threshold`, and the threshold it really
        gives (`graphs`: whether the server runs decode CUDA graphs, which may pad the batch it routes by)."""
        self.require(Feature.NATIVE_TIERS)
        raise self._required("adaptive_config")

    def tier_config(self, tiers: dict[int, list[int]], max_bs: int,
                    bucket_sources: Mapping[str, str] | None = None, *,
                    launch_steps: int | None = None, max_batch: int | None = None, graphs: bool = True) -> TierPlan:
        """The native adaptive config of explicit tiers (`launch_steps` listed whatever they
        say, in a tier above `max_batch` where none lists it: SGLang starts on it)."""
        self.require(Feature.NATIVE_TIERS)
        raise self._required("tier_config")

    def adaptive_flags(self, config_path: str) -> list[str]:
        """The flags that turn native adaptive speculation on with the config at `config_path`."""
        self.require(Feature.NATIVE_TIERS)
        raise self._required("adaptive_flags")

    # --- the benchmark runner -----------------------------------------------------------
    def runner_name(self, choice: str) -> str:
        """The runner `--runner choice` means on this engine's hosts (`auto`: specops's builtin
        client, which speaks every engine's `client_api`)."""
        return choice if choice != "auto" else "builtin"

    def benchmark_module(self, files: TreeFiles) -> str | None:
        """The engine's own serving benchmark in the tree (None: it has none)."""
        return None

    # --- schedules ----------------------------------------------------------------------
    def schedule_forms(self, schedule: Schedule, *, draft_model: str, max_batch: int) -> list[ScheduleForm]:
        """`schedule` in each of this engine's routes' own form (tune --emit)."""
        raise self._required("schedule_forms")

    # --- its own steps ------------------------------------------------------------------
    def step_kinds(self) -> Mapping[str, type[StepKind] | StepKind]:
        """Step kinds of this engine's own (e.g. its install or fetch), by the name a playbook
        step gives: each a `specops.steps.base.StepKind`, imported by the engine's package
        itself (a plugin lives outside specops's layers). A built-in kind's name is refused."""
        return {}

    def deploy_steps(self) -> list[dict[str, Any]]:
        """Playbook step mappings, in deploy.yaml's schema, that the deploy playbook's
        `engine_steps` placeholder runs on this engine's hosts (validated as the playbook's)."""
        return []
