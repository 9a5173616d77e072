"""The git step clones only what the ref needs (issue 10: the full ~1.2 GB history under a
900 s cap, whatever the step's timeout), on a real repository served over file://."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from specops.config.inventory import Host
from specops.config.playbook import Step
from specops.run.journal import Journal
from specops.run.state import Run
from specops.steps.base import StepContext
from specops.steps.git import Git
from specops.transport.local import LocalTransport
from tests.support.deploy import events, inventory, run_cli, write_yaml


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(cwd), "-c", "user.email=t@t", "-c", "user.name=t", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> dict:
    """Five commits on main, v1 tagged on the second, a branch `dev` with one more."""
    src = tmp_path / "src"
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    shas = []
    for i in range(5):
        (src / "f").write_text(str(i))
        _git(src, "add", "f")
        _git(src, "commit", "-qm", f"c{i}")
        shas.append(_git(src, "rev-parse", "HEAD"))
        if i == 1:
            _git(src, "tag", "v1")
    _git(src, "checkout", "-qb", "dev")
    (src / "f").write_text("dev")
    _git(src, "commit", "-qam", "dev")
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    _git(bare, "config", "uploadpack.allowAnySHA1InWant", "true")
    return {"url": f"file://{bare}", "shas": shas, "dev": _git(src, "rev-parse", "HEAD")}


def _deploy(tmp_path: Path, repo: dict, ref: str, timeout: int = 1800):
    inv = inventory(tmp_path, {"h": {"connection": "local", "workdir": str(tmp_path / "w")}})
    pb = write_yaml(tmp_path / "p.yaml", {"name": "g", "steps": [
        {"name": "co", "git": {"repo": repo["url"], "ref": ref, "dest": "{{ workdir }}/co"}, "timeout": timeout}]})
    return run_cli("deploy", "--host", "h", "-p", str(pb), "-i", str(inv))


def _commits(tree: Path) -> int:
    return int(_git(tree, "rev-list", "--count", "HEAD"))


def test_a_tag_is_cloned_shallow_and_stays_verified(tmp_path, repo):
    res = _deploy(tmp_path, repo, "v1")
    assert res.exit_code == 0, res.output
    co = tmp_path / "w/co"
    assert _git(co, "rev-parse", "HEAD") == repo["shas"][1]
    assert _git(co, "rev-parse", "--is-shallow-repository") == "true" and _commits(co) == 1
    assert _git(co, "describe", "--tags") == "v1"  # the tree's version comes from it
    # another ref later: fetched by name, still shallow
    res = _deploy(tmp_path, repo, "dev")
    assert res.exit_code == 0, res.output
    assert _git(co, "rev-parse", "HEAD") == repo["dev"] and _commits(co) == 1


def test_a_branch_and_a_bare_sha_are_shallow_too(tmp_path, repo):
    assert _deploy(tmp_path, repo, "main").exit_code == 0
    assert _commits(tmp_path / "w/co") == 1
    other = tmp_path / "other"
    other.mkdir()
    res = _deploy(other, repo, repo["shas"][3])
    assert res.exit_code == 0, res.output
    co = other / "w/co"
    assert _git(co, "rev-parse", "HEAD") == repo["shas"][3] and _commits(co) == 1


def test_an_unknown_ref_fails_without_cloning_everything(tmp_path, repo):
    res = _deploy(tmp_path, repo, "no-such-tag")
    assert res.exit_code == 1 and "ref 'no-such-tag' not found" in res.output, res.output
    cmds = [e["command"] for e in events(sorted((tmp_path / "runs").iterdir())[-1]) if e["event"] == "command"]
    assert not any(c.startswith("git clone --no-checkout -- ") for c in cmds), cmds  # no full clone


class _Timed(LocalTransport):
    """The real local transport, noting each command's timeout (the journal does not)."""

    def __init__(self) -> None:
        super().__init__("h")
        self.timeouts: list[tuple[str, float]] = []

    def run(self, cmd, *, timeout, **kw):
        self.timeouts.append((cmd if isinstance(cmd, str) else " ".join(cmd), timeout))
        return super().run(cmd, timeout=timeout, **kw)


def test_the_clone_and_fetch_run_under_the_steps_own_timeout(tmp_path, repo):
    """Before: min(step timeout, 900 s) whatever the step said."""
    transport = _Timed()
    step = Step(index=0, name="co", kind="git", args={}, where="p.yaml:1", timeout=2400.0)
    ctx = StepContext(host=Host(name="h", connection="local"), transport=transport, step=step,
                      args={"repo": repo["url"], "ref": "v1", "dest": str(tmp_path / "co")}, vars={},
                      journal=Journal(tmp_path / "run"), run_dir=tmp_path / "run", playbook_dir=tmp_path,
                      run_state=Run(tmp_path / "run"))
    Git().apply(ctx)
    ctx.args["ref"] = "dev"
    Git().apply(ctx)
    heavy = [(c, t) for c, t in transport.timeouts if c.startswith(("git clone", f"git -C {tmp_path}/co fetch"))]
    assert heavy and all(t == 2400.0 for _, t in heavy), heavy


def test_a_ref_that_reads_as_an_option_is_refused_before_anything_runs(tmp_path, repo):
    """Issue 35, finding 9: `ref: --upload-pack=CMD` reached `git fetch ... origin "$2"` in
    an existing clone, where git read it as an option and ran CMD."""
    assert _deploy(tmp_path, repo, "v1").exit_code == 0
    marker = tmp_path / "PWNED"
    res = _deploy(tmp_path, repo, f"--upload-pack=touch {marker}; git-upload-pack")
    assert not marker.exists(), "the ref ran as a command"
    assert res.exit_code == 2, res.output
    assert "p.yaml:" in res.output and "must not start with '-'" in res.output
