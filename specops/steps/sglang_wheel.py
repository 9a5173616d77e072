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
from specops.sglang.source import _find_local_wheel, cache_root, ensure_tree
from specops.steps.base import Outcome, StepContext, StepKind

MARKER = ".specops-wheel.json"
UNPACK = r"""
import json, os, shutil, subprocess, sys, zipfile
wheel, dest, version, digest = sys.argv[1:5]
tmp = dest.rstrip("/") + ".specops-unpack"
shutil.rmtree(tmp, ignore_errors=True)
with zipfile.ZipFile(wheel) as zf:
    for name in zf.namelist():
        if name.startswith("sglang/") and not name.endswith("/"):
            target = os.path.join(tmp, "python", name)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            with zf.open(name) as src, open(target, "wb") as out:
                shutil.copyfileobj(src, out)
vf = os.path.join(tmp, "python", "sglang", "_version.py")
if not os.path.exists(vf):
    with open(vf, "w") as fh:
        fh.write("__version__ = version = %r\n" % version)
vp = os.path.join(tmp, "python", "sglang", "version.py")
if not os.path.exists(vp):
    with open(vp, "w") as fh:
        fh.write("__version__ = %r\n" % version)
git = ["git", "-C", tmp, "-c", "user.email=specops@localhost", "-c", "user.name=specops"]
subprocess.run(["git", "init", "-q", tmp], check=True)
subprocess.run(git + ["add", "-A"], check=True)
subprocess.run(git + ["commit", "-q", "-m", "sglang " + version + " from its wheel"], check=True)
with open(os.path.join(tmp, ".git", "info", "exclude"), "a") as fh:
    fh.write("/.specops/\n/__MARKER__\n")
with open(os.path.join(tmp, "__MARKER__"), "w") as fh:
    json.dump({"version": version, "wheel_sha256": digest}, fh)
if os.path.exists(dest):
    shutil.rmtree(dest)
os.rename(tmp, dest)
""".replace("__MARKER__", MARKER)


class SGLangWheel(StepKind):
    name = "sglang_wheel"
    keys = ("version", "dest")
    required = ("version", "dest")

    def _wheel(self, ctx: StepContext) -> Path:
        version = str(ctx.args["version"])
        ensure_tree(version)  # fetches and caches the wheel, or says clearly why it cannot
        wheel = _find_local_wheel(version)
        if wheel is None:
            raise StepError(f"no cached wheel for sglang {version} under {cache_root() / 'wheels'}")
        return wheel

    def describe(self, ctx: StepContext) -> list[str]:
        dest = ctx.path(str(ctx.args["dest"]))
        return [f"upload sglang-{ctx.args['version']} wheel, unpack sglang/* into {dest}/python/ as a git repo"]

    def is_done(self, ctx: StepContext) -> bool | None:
        dest = ctx.path(str(ctx.args["dest"]))
        if ctx.transport.stat_size(f"{dest}/{MARKER}") is None:
            return False
        try:
            marker = json.loads(ctx.transport.get(f"{dest}/{MARKER}"))
        except ValueError:
            return False
        return marker.get("version") == str(ctx.args["version"])

    def apply(self, ctx: StepContext) -> Outcome:
        version, dest = str(ctx.args["version"]), ctx.path(str(ctx.args["dest"]))
        wheel = self._wheel(ctx)
        data = wheel.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        remote_wheel = ctx.path(f"{ctx.vars['workdir']}/.specops/wheels/{wheel.name}")
        if ctx.transport.stat_size(remote_wheel) != len(data):
            ctx.transport.put(data, remote_wheel)
        # a patched tree is never overwritten: that would silently drop the patches
        if ctx.transport.stat_size(f"{dest}/{MARKER}") is not None:
            dirty = ctx.probe(["git", "-C", dest, "status", "--porcelain", "--untracked-files=no"])
            if dirty.stdout.strip():
                raise StepError(f"{dest} holds another SGLang version with local changes; revert its patches first")
        result = ctx.run([ctx.host.python, "-c", UNPACK, remote_wheel, dest, version, digest], timeout=600)
        if not result.ok:
            raise StepError(f"unpacking the wheel on the host failed: {result.tail(4)}")
        return Outcome(result=result, data={"version": version, "dest": dest, "wheel_sha256": digest},
                       message=f"sglang {version} at {dest}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        dest = outcome.data["dest"]
        if ctx.transport.stat_size(f"{dest}/python/sglang/srt/server_args.py") is None:
            return False, f"{dest}/python/sglang/srt/server_args.py is missing"
        return (True, "") if self.is_done(ctx) else (False, f"{dest}/{MARKER} does not name {outcome.data['version']}")
