"""`git`: clone or fetch, check out a ref, verify HEAD is the ref's commit, record the sha.

A checkout with local changes (a patched SGLang tree) is never reset silently: moving it
to another ref needs `force: true`.
"""

from __future__ import annotations

import re
from typing import Any

from specops.config.playbook import Step
from specops.errors import ConfigError, StepError
from specops.steps.base import Outcome, StepContext, StepKind, shown

_FULL_SHA = re.compile(r"^[0-9a-f]{40}$")
_SHA_LIKE = re.compile(r"^[0-9a-fA-F]{7,40}$")
#: history fetched by default: the ref's commit only (`depth: 0` clones everything)
DEFAULT_DEPTH = 1
#: a ref by name into a clone that tracks only the ref it was made for: as a tag, else a
#: branch, else whatever the server resolves it to (a sha); "$3" is `--depth=N` or empty; `--`
#: ends the options, so a ref is never read as one (the ref is also refused at load, below)
FETCH_BY_NAME = ('git -C "$1" fetch $3 --force -- origin "+refs/tags/$2:refs/tags/$2" 2>/dev/null'
                  ' || git -C "$1" fetch $3 --force -- origin "+refs/heads/$2:refs/remotes/origin/$2" 2>/dev/null'
                  ' || git -C "$1" fetch $3 --force -- origin "$2"')


class Git(StepKind):
    """Probes (read-only) decide the commands; `describe` lists them as `apply` runs them.

    State probes: is DEST a clone, of which repo, at which HEAD. Commands: clone (or fetch),
    then `checkout --detach SHA`, where --check learns SHA from `git ls-remote` (apply
    resolves it in the clone after the fetch; both name the same commit)."""

    name = "git"
    changes_sglang = True
    keys = ("repo", "ref", "dest", "depth", "force", "remote")
    required = ("repo", "ref", "dest")
    arg_types = {"repo": str, "ref": (str, int, float), "dest": str, "depth": int, "force": bool, "remote": str}

    def validate(self, step: Step) -> None:
        super().validate(step)
        self._check_ref(step, step.args)

    def render(self, step: Step, variables: dict[str, Any]) -> Any:
        args = super().render(step, variables)
        self._check_ref(step, args)
        return args

    def _check_ref(self, step: Step, args: Any) -> None:
        """A ref is a name or a sha, never an option: `--upload-pack=CMD` given to `git fetch`
        runs CMD. Git refuses such branch and tag names itself, so nothing real is lost."""
        ref = args.get("ref") if isinstance(args, dict) else None
        if isinstance(ref, str) and "{{" not in ref and ref.strip().startswith("-"):
            raise ConfigError(f"{step.label} (git): ref {ref!r} must not start with '-' (git would read it as "
                              "an option)", where=step.where, hint="give a branch, a tag or a commit sha")

    def _git(self, ctx: StepContext, *args: str) -> list[str]:
        return ["git", "-C", ctx.path(ctx.args["dest"]), *args]

    def _timeout(self, ctx: StepContext) -> float:
        """Clones and fetches run under the step's own timeout (a full SGLang history is ~1 GB)."""
        return ctx.timeout

    def _depth(self, ctx: StepContext) -> int:
        return int(ctx.args.get("depth", DEFAULT_DEPTH) or 0)

    def _fetch_by_name(self, ctx: StepContext, depth: int) -> list[str]:
        return ["bash", "-c", FETCH_BY_NAME, "_", ctx.path(ctx.args["dest"]), str(ctx.args["ref"]),
                f"--depth={depth}" if depth else ""]

    def _state(self, ctx: StepContext) -> tuple[bool, str | None]:
        """(fresh, HEAD): probes whether DEST is a clone of `repo`, refusing what apply must not touch."""
        dest, repo = ctx.path(ctx.args["dest"]), str(ctx.args["repo"])
        if ctx.probe(["test", "-e", f"{dest}/.git"]).rc != 0:
            if ctx.probe(["bash", "-c", 'test -e "$1" && test -n "$(ls -A "$1")"', "_", dest]).rc == 0:
                raise StepError(f"{dest} exists and is not a git checkout; refusing to clone over it")
            return True, None
        r = ctx.probe(self._git(ctx, "remote", "get-url", "origin"))
        if r.rc == 0 and r.stdout.strip() != repo:
            raise StepError(f"{dest} is a clone of {r.stdout.strip()}, not {repo}")
        return False, self._head(ctx)

    def _sync(self, ctx: StepContext, fresh: bool) -> list[str]:
        """The command that brings the ref's commits here. Shallow by default (`depth: 1`):
        a tag or branch is cloned with `--branch`, a full sha is fetched by itself into an
        empty repo; `depth: 0` clones everything. An existing clone fetches the ref by name
        (a clone made for one ref tracks only that one), shallow where the clone is."""
        dest, repo, ref, depth = ctx.path(ctx.args["dest"]), str(ctx.args["repo"]), str(ctx.args["ref"]), self._depth(ctx)
        if not fresh:
            shallow = ctx.probe(["test", "-f", f"{dest}/.git/shallow"]).rc == 0
            return self._fetch_by_name(ctx, max(depth, 1) if shallow else 0)
        if depth and _FULL_SHA.match(ref):
            return ["bash", "-c", 'git init -q "$1" && git -C "$1" remote add origin "$2" && '
                    'git -C "$1" fetch --depth "$3" origin "$4"', "_", dest, repo, str(depth), ref]
        if depth and not _SHA_LIKE.match(ref):
            return ["git", "clone", "--no-checkout", "--depth", str(depth), "--branch", ref, "--", repo, dest]
        return ["git", "clone", "--no-checkout", "--", repo, dest]

    def _checkout(self, ctx: StepContext, sha: str, head: str | None) -> list[str]:
        force = ["--force"] if ctx.args.get("force") or head is None else []
        return self._git(ctx, "checkout", "--quiet", "--detach", *force, sha)

    def _resolve(self, ctx: StepContext) -> str | None:
        """The commit the ref names in the local clone (tags and shas directly, branches via origin)."""
        ref = str(ctx.args["ref"])
        for candidate in (f"refs/remotes/origin/{ref}", f"refs/tags/{ref}", ref):
            r = ctx.probe(self._git(ctx, "rev-parse", "--verify", "--quiet", f"{candidate}^{{commit}}"))
            if r.rc == 0 and r.stdout.strip():
                return r.stdout.strip()
        return None

    def _remote_sha(self, ctx: StepContext) -> str | None:
        """The commit the ref names upstream, in the order `_resolve` prefers (branch, tag), or
        the ref itself when it is a full sha; None when the remote cannot say."""
        ref = str(ctx.args["ref"])
        if _FULL_SHA.match(ref):
            return ref
        r = ctx.probe(["git", "ls-remote", "--", str(ctx.args["repo"]), f"refs/heads/{ref}", f"refs/tags/{ref}",
                       f"refs/tags/{ref}^{{}}"], timeout=min(ctx.timeout, 60.0))
        pairs = [line.split("\t", 1) for line in r.stdout.splitlines() if "\t" in line] if r.ok else []
        found = {name.strip(): sha for sha, name in pairs}
        for name in (f"refs/heads/{ref}", f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}"):
            if name in found:
                return found[name].strip()
        return None

    def _head(self, ctx: StepContext) -> str | None:
        r = ctx.probe(self._git(ctx, "rev-parse", "HEAD"))
        return r.stdout.strip() if r.rc == 0 else None

    def _refuse_dirty(self, ctx: StepContext, head: str | None, want: str) -> None:
        """A checkout with local changes (a patched tree) is not moved without `force: true`."""
        if head is None or head == want or ctx.args.get("force"):
            return
        dirty = ctx.probe(self._git(ctx, "status", "--porcelain", "--untracked-files=no"), timeout=60)
        if dirty.stdout.strip():
            dest, ref = ctx.path(ctx.args["dest"]), ctx.args["ref"]
            raise StepError(f"{dest} has local changes (a patched tree?) and is at {head[:12]}, not {ref} "
                            f"({want[:12]}); revert the patches or set force: true")

    def describe(self, ctx: StepContext) -> list[str]:
        fresh, head = self._state(ctx)
        want = self._remote_sha(ctx)
        lines = [shown(self._sync(ctx, fresh))]
        if want is None:
            ref = ctx.args["ref"]
            return lines + [f"# then `git -C {ctx.path(ctx.args['dest'])} checkout --detach` the commit '{ref}' "
                            "names after the fetch (the remote does not list it: an abbreviated sha?)"]
        self._refuse_dirty(ctx, head, want)
        return lines + [shown(self._checkout(ctx, want, head))]

    def is_done(self, ctx: StepContext) -> bool | None:
        dest = ctx.path(ctx.args["dest"])
        if ctx.probe(["test", "-e", f"{dest}/.git"]).rc != 0:
            return False
        ref = str(ctx.args["ref"])
        # A branch can move upstream: only tags and shas are judged without fetching.
        if ctx.probe(self._git(ctx, "rev-parse", "--verify", "--quiet", f"refs/remotes/origin/{ref}")).rc == 0:
            return False
        head, want = self._head(ctx), self._resolve(ctx)
        if head is not None and head == want:
            ctx.facts.update(sha=head, ref=ref)
            return True
        return False

    def apply(self, ctx: StepContext) -> Outcome:
        dest, repo, ref = ctx.path(ctx.args["dest"]), str(ctx.args["repo"]), str(ctx.args["ref"])
        fresh, head = self._state(ctx)
        sync = self._sync(ctx, fresh)
        r = ctx.run(sync, timeout=self._timeout(ctx))
        if r.rc != 0 and fresh and _FULL_SHA.match(ref):
            # a server that refuses to serve a commit by its sha: the whole history, then
            ctx.run(["rm", "-rf", "--", dest], timeout=120)
            r = ctx.run(["git", "clone", "--no-checkout", "--", repo, dest], timeout=self._timeout(ctx))
        if r.rc != 0:
            if (fresh and "--branch" in sync) or (not fresh and self._resolve(ctx) is None):
                raise StepError(f"ref '{ref}' not found in {repo} (not a branch, tag or full commit sha): "
                                f"{r.tail(2)}")
            raise StepError(f"git {'clone ' + repo if fresh else 'fetch in ' + dest} failed: {r.tail(3)}")
        want = self._resolve(ctx)
        if want is None:
            raise StepError(f"ref '{ref}' not found in {repo} (not a branch, tag or commit)")
        self._refuse_dirty(ctx, head, want)
        r = ctx.run(self._checkout(ctx, want, head), timeout=self._timeout(ctx))
        if r.rc != 0:
            raise StepError(f"git checkout {ref} in {dest} failed: {r.tail(3)}")
        return Outcome(result=None, changed=head != want, data={"sha": want, "ref": ref},
                       message=f"{ref} = {want[:12]}")

    def verify(self, ctx: StepContext, outcome: Outcome) -> tuple[bool, str]:
        head, want = self._head(ctx), outcome.data.get("sha")
        if head != want:
            return False, f"HEAD is {head}, expected {want}"
        return True, ""
