"""`sglang_wheel`: lay out an SGLang source tree on the host from the published wheel.

For hosts that cannot or need not clone the repository (the simulated `local` host, air-
gapped boxes): the wheel is fetched once on this machine (cached), uploaded, and unpacked
on the host in the repository's shape (`<dest>/python/sglang/...`), as a git repo so that
patches can be reverted and diffs shown.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from specops.errors import StepError
from specops.sglang import paths
from specops.sglang.paths import SERVER_ARGS, TREE_STATE_DIR, WHEEL_MARKER, WHEEL_PACKAGE_PREFIX
from specops.sglang.source import find_wheel
from specops.sglang.wheel import script
from specops.steps.base import Outcome, StepContext, StepKind


class SGLangWheel(StepKind):
    name = "sglang_wheel"
    keys = ("version", "dest")
    required = ("version", "dest")

    def _wheel(self, ctx: StepContext) -> Path:
        """The wheel on this machine: cached, or fetched once (else a SpecopsError saying why)."""
        return find_wheel(str(ctx.args["version"]))

    def describe(self, ctx: StepContext) -> list[str]:
        dest = ctx.path(str(ctx.args["dest"]))
        return [f"upload sglang-{ctx.args['version']} wheel, unpack sglang/* into {dest}/python/ as a git repo"]

    def is_done(self, ctx: StepContext) -> bool | None:
        dest = ctx.path(str(ctx.args["dest"]))
        if ctx.transport.stat_size(f"{dest}/{WHEEL_MARKER}") is None:
            return False
        try:
            marker = json.loads(ctx.transport.get(f"{dest}/{WHEEL_MARKER}"))
        except ValueError:
            return False
        return marker.get("version") == str(ctx.args["version"])

    def apply(self, ctx: StepContext) -> Outcome:
        version, dest = str(ctx.args["version"]), ctx.path(str(ctx.args["dest"]))
        wheel = self._wheel(ctx)
        data = wheel.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        remote_wheel = ctx.path(f"{paths.wheels_dir(ctx.vars['workdir'])}/{wheel.name}")
        if ctx.transport.stat_size(remote_wheel) != len(data):
            ctx.transport.put(data, remote_wheel)
        # a patched tree is never overwritten: that would silently drop the patches
        if ctx.transport.stat_size(f"{dest}/{WHEEL_MARKER}") is not None:
            dirty = ctx.probe(["git", "-C", dest, "status", "--porcelain", "--untracked-files=no"])
            if dirty.stdout.strip():
                raise StepError(f"{dest} holds another SGLang version with local changes; revert its patches first")
        args = {"wheel": remote_wheel, "dest": dest, "version": version, "prefix": WHEEL_PACKAGE_PREFIX,
                "git": True, "exclude": [TREE_STATE_DIR], "marker": WHEEL_MARKER,
                "marker_data": {"version": version, "wheel_sha256": digest}}
        result = ctx.run([ctx.host.python, "-c", script(), json.dumps(args)], timeout=600)
        if not result.ok:
            raise StepError(f"unpacking the wheel on the host failed: {result.tail(4)}")
        return Outcome(result=result, data={"version": version, "dest": dest, "wheel_sha256": digest},
                       message=f"sglang {version} at {dest}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        dest = outcome.data["dest"]
        if ctx.transport.stat_size(f"{dest}/{SERVER_ARGS}") is None:
            return False, f"{dest}/{SERVER_ARGS} is missing"
        return (True, "") if self.is_done(ctx) else (False, f"{dest}/{WHEEL_MARKER} does not name {outcome.data['version']}")
