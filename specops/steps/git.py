"""`git`: clone or fetch, check out a ref, verify HEAD is the ref's commit, record the sha.

A checkout with local changes (a patched SGLang tree) is never reset silently: moving it
to another ref needs `force: true`.
"""

from __future__ import annotations

from specops.errors import StepError
from specops.steps.base import Outcome, StepContext, StepKind

GIT_TIMEOUT_S = 900.0


class Git(StepKind):
    name = "git"
    keys = ("repo", "ref", "dest", "depth", "force", "remote")
    required = ("repo", "ref", "dest")

    def _git(self, ctx: StepContext, *args: str, timeout: float | None = None):
        return ctx.run(["git", "-C", ctx.path(ctx.args["dest"]), *args], timeout=timeout or min(ctx.timeout, GIT_TIMEOUT_S))

    def _resolve(self, ctx: StepContext) -> str | None:
        """The commit the ref names in the local clone (tags and shas directly, branches via origin)."""
        ref = str(ctx.args["ref"])
        for candidate in (f"refs/remotes/origin/{ref}", f"refs/tags/{ref}", ref):
            r = self._git(ctx, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}", timeout=30)
            if r.rc == 0 and r.stdout.strip():
                return r.stdout.strip()
        return None

    def _head(self, ctx: StepContext) -> str | None:
        r = self._git(ctx, "rev-parse", "HEAD", timeout=30)
        return r.stdout.strip() if r.rc == 0 else None

    def describe(self, ctx: StepContext) -> list[str]:
        dest, repo, ref = ctx.path(ctx.args["dest"]), str(ctx.args["repo"]), str(ctx.args["ref"])
        return [f"git clone --no-checkout {repo} {dest}  (if absent)",
                f"git -C {dest} fetch --tags origin", f"git -C {dest} checkout --detach <commit of {ref}>"]

    def is_done(self, ctx: StepContext) -> bool | None:
        dest = ctx.path(ctx.args["dest"])
        if ctx.probe(["test", "-e", f"{dest}/.git"]).rc != 0:
            return False
        ref = str(ctx.args["ref"])
        # A branch can move upstream: only tags and shas are judged without fetching.
        if self._git(ctx, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{ref}", timeout=30).rc == 0:
            return False
        head, want = self._head(ctx), self._resolve(ctx)
        if head is not None and head == want:
            ctx.facts.update(sha=head, ref=ref)
            return True
        return False

    def apply(self, ctx: StepContext) -> Outcome:
        dest, repo, ref = ctx.path(ctx.args["dest"]), str(ctx.args["repo"]), str(ctx.args["ref"])
        fresh = ctx.probe(["test", "-e", f"{dest}/.git"]).rc != 0
        if fresh:
            if ctx.probe(["bash", "-c", 'test -e "$1" && test -n "$(ls -A "$1")"', "_", dest]).rc == 0:
                raise StepError(f"{dest} exists and is not a git checkout; refusing to clone over it")
            clone = ["git", "clone", "--no-checkout"]
            if ctx.args.get("depth"):
                clone += ["--depth", str(int(ctx.args["depth"])), "--no-single-branch"]
            r = ctx.run(clone + ["--", repo, dest], timeout=min(ctx.timeout, GIT_TIMEOUT_S))
            if r.rc != 0:
                raise StepError(f"git clone {repo} failed: {r.tail(3)}")
        else:
            r = self._git(ctx, "remote", "get-url", "origin", timeout=30)
            if r.rc == 0 and r.stdout.strip() != repo:
                raise StepError(f"{dest} is a clone of {r.stdout.strip()}, not {repo}")
            r = self._git(ctx, "fetch", "--tags", "--force", "origin")
            if r.rc != 0:
                raise StepError(f"git fetch in {dest} failed: {r.tail(3)}")
        want = self._resolve(ctx)
        if want is None:  # a commit not on any fetched branch or tag
            self._git(ctx, "fetch", "origin", ref)
            want = self._resolve(ctx)
        if want is None:
            raise StepError(f"ref '{ref}' not found in {repo} (not a branch, tag or commit)")
        head = None if fresh else self._head(ctx)
        if head != want and head is not None and not ctx.args.get("force"):
            dirty = self._git(ctx, "status", "--porcelain", "--untracked-files=no", timeout=60)
            if dirty.stdout.strip():
                raise StepError(f"{dest} has local changes (a patched tree?) and is at {head[:12]}, not {ref} "
                                f"({want[:12]}); revert the patches or set force: true")
        r = self._git(ctx, "checkout", "--quiet", "--detach", *(["--force"] if ctx.args.get("force") or head is None else []), want)
        if r.rc != 0:
            raise StepError(f"git checkout {ref} in {dest} failed: {r.tail(3)}")
        return Outcome(result=None, changed=head != want, data={"sha": want, "ref": ref},
                       message=f"{ref} = {want[:12]}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        head, want = self._head(ctx), outcome.data.get("sha")
        if head != want:
            return False, f"HEAD is {head}, expected {want}"
        return True, ""
