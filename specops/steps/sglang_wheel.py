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
from specops.hostfiles import paths
from specops.hostfiles.paths import PATCH_STATE_DIR, TREE_STATE_DIR
from specops.hostfiles.treefiles import TransportTreeFiles
from specops.run import events
from specops.sglang.flags import tree_version
from specops.sglang.paths import SERVER_ARGS, WHEEL_MARKER, WHEEL_PACKAGE_PREFIX
from specops.sglang.source import find_wheel
from specops.sglang.wheel import script
from specops.steps.base import Outcome, StepContext, StepKind

#: Which modified files of a wheel tree are NOT specops patch-set edits (their content is
#: what a set's manifest recorded after patching): those would be lost by a re-unpack.
FOREIGN_CHANGES = r"""
import glob, hashlib, json, os, subprocess, sys
dest, state = sys.argv[1], sys.argv[2]
out = subprocess.run(["git", "-C", dest, "status", "--porcelain", "--untracked-files=no"],
                     capture_output=True, text=True, check=True).stdout
changed = [line[3:] for line in out.splitlines() if line[3:]]
ours, sets = {}, []
for manifest in glob.glob(os.path.join(dest, state, "*", "manifest.json")):
    try:
        data = json.load(open(manifest))
    except ValueError:
        continue
    sets.append(data.get("set") or os.path.basename(os.path.dirname(manifest)))
    for rel, entry in (data.get("files") or {}).items():
        ours[rel] = entry.get("patched_sha256")
def sha(rel):
    with open(os.path.join(dest, rel), "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()
foreign = [rel for rel in changed if rel not in ours or not os.path.exists(os.path.join(dest, rel)) or sha(rel) != ours[rel]]
print(json.dumps({"changed": changed, "foreign": foreign, "sets": sorted(sets)}))
"""


class SGLangWheel(StepKind):
    name = "sglang_wheel"
    changes_sglang = True
    keys = ("version", "dest")
    required = ("version", "dest")
    arg_types = {"version": (str, int, float), "dest": str}

    def _wheel(self, ctx: StepContext) -> Path:
        """The wheel on this machine: cached, or fetched once (else a SpecopsError saying why)."""
        return find_wheel(str(ctx.args["version"]))

    def describe(self, ctx: StepContext) -> list[str]:
        dest = ctx.path(str(ctx.args["dest"]))
        return [f"upload sglang-{ctx.args['version']} wheel, unpack sglang/* into {dest}/python/ as a git repo"]

    def _found(self, ctx: StepContext, dest: str) -> tuple[str | None, str | None]:
        """(the version the marker names, the version the tree's own files declare)."""
        marker_version = None
        if ctx.transport.stat_size(f"{dest}/{WHEEL_MARKER}") is not None:
            try:
                marker_version = json.loads(ctx.transport.get(f"{dest}/{WHEEL_MARKER}")).get("version")
            except ValueError:
                marker_version = None
        return marker_version, tree_version(TransportTreeFiles(ctx.transport, dest))

    def is_done(self, ctx: StepContext) -> bool | None:
        """Done only when both the marker and the tree's own version file name the version
        asked for: a tree of another version is never "already verified"."""
        want = str(ctx.args["version"])
        return self._found(ctx, ctx.path(str(ctx.args["dest"]))) == (want, want)

    def _own_patches_only(self, ctx: StepContext, dest: str) -> str:
        """'' when the tree has no local changes; a note naming the specops patch sets that
        will be dropped when they are its only changes; else StepError (hand edits are kept)."""
        res = ctx.probe([ctx.host.python, "-c", FOREIGN_CHANGES, dest, PATCH_STATE_DIR])
        try:
            found = json.loads(res.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            raise StepError(f"cannot tell what changed in {dest}: {res.tail(3)}") from None
        if found["foreign"]:
            shown = ", ".join(found["foreign"][:5])
            raise StepError(f"{dest} holds another SGLang version with local changes ({shown}); "
                            f"revert or save them first")
        if not found["changed"]:
            return ""
        return (f"dropped patch set(s) {', '.join(found['sets'])} of the previous tree "
                f"(a later patch step re-applies what this version needs)")

    def apply(self, ctx: StepContext) -> Outcome:
        version, dest = str(ctx.args["version"]), ctx.path(str(ctx.args["dest"]))
        wheel = self._wheel(ctx)
        data = wheel.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        remote_wheel = ctx.path(f"{paths.wheels_dir(ctx.vars['workdir'])}/{wheel.name}")
        if ctx.transport.stat_size(remote_wheel) != len(data):
            ctx.transport.put(data, remote_wheel)
        # Hand edits are never overwritten; specops's own patch sets are (the wheel is the
        # source of truth, and the patch step re-applies what the new version needs).
        note = ""
        if ctx.transport.stat_size(f"{dest}/{WHEEL_MARKER}") is not None:
            note = self._own_patches_only(ctx, dest)
            if note:
                ctx.journal.emit(events.Note(host=ctx.host.name, step=ctx.step.name, message=note))
        args = {"wheel": remote_wheel, "dest": dest, "version": version, "prefix": WHEEL_PACKAGE_PREFIX,
                "git": True, "exclude": [TREE_STATE_DIR], "marker": WHEEL_MARKER,
                "marker_data": {"version": version, "wheel_sha256": digest}}
        result = ctx.run([ctx.host.python, "-c", script(), json.dumps(args)], timeout=600)
        if not result.ok:
            raise StepError(f"unpacking the wheel on the host failed: {result.tail(4)}")
        return Outcome(result=result, data={"version": version, "dest": dest, "wheel_sha256": digest},
                       message=f"sglang {version} at {dest}" + (f"; {note}" if note else ""))

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        dest, want = outcome.data["dest"], outcome.data["version"]
        if ctx.transport.stat_size(f"{dest}/{SERVER_ARGS}") is None:
            return False, f"{dest}/{SERVER_ARGS} is missing"
        marker, declared = self._found(ctx, dest)
        if marker != want:
            return False, f"{dest}/{WHEEL_MARKER} names {marker}, not {want}"
        if declared != want:
            return False, f"the tree at {dest} declares version {declared}, not {want}"
        return True, ""
