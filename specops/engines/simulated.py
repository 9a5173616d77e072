"""What every simulated face shares: `python -m specops.sim --<face>-tree TREE` with the host's
python, its own `--sim-*` knobs set aside before the tree's parser checks an argv, no weights
(so no offline switch), and the builtin client measuring it (no engine is installed beside it).

A simulated engine is this mixin before the real engine it speaks for (`Simulator(Simulated,
SGLang)`): the real engine's face, flags and forms, started the simulator's way.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from specops.errors import ConfigError
from specops.sim.knobs import UsageError, sim_options, split_knobs


class Simulated:
    """The simulator's launch seams; `tree_flag` names the tree its face reads flags from."""

    name: str
    #: the simulator's option naming the engine tree its face reads (`--sglang-tree`, `--vllm-tree`)
    tree_flag: str
    #: the engine's name in words (the real engine's)
    title: str
    #: the simulator's drafting-off step is the baseline's: it runs no draft extend to skip
    off_extend_switch: str | None = None

    def server_python(self, host_python: str, variables: Mapping[str, Any], expand: Callable[[str], str]) -> str:
        return host_python

    def launch_options(self, variables: Mapping[str, Any]) -> list[str]:
        return sim_options(variables)

    def parser_flags(self, flags: Sequence[str], where: str) -> list[str]:
        try:
            return split_knobs(list(flags))[1]  # the simulator's own knobs aside
        except UsageError as exc:
            raise ConfigError(f"simulator option: {exc}", where=where) from None

    def launch_argv(self, python: str, flags: Sequence[str], *, tree: str | None, options: Sequence[str],
                    where: str) -> list[str]:
        if not tree:
            raise ConfigError(f"engine {self.name} needs the {self.title} tree path", where=where)
        return [python, "-m", "specops.sim", self.tree_flag, tree, *flags, *options]

    def launch_env(self, env: Mapping[str, str], *, cpu: bool, hub_offline: bool) -> dict[str, str]:
        real: Any = super()   # the real engine's, next in the MRO
        return dict(real.launch_env(env, cpu=cpu, hub_offline=False))  # it loads no weights

    def launched(self, argv: Sequence[str]) -> bool:
        return "specops.sim" in argv and self.tree_flag in argv

    def runner_name(self, choice: str) -> str:
        return choice if choice != "auto" else "builtin"  # no engine installed beside it (SGLang's auto differs)
