"""`--check` lists, per step, the commands apply then runs: for shell, git, copy, fetch and
patch, the lines `--check --json` prints (probes and notes aside) are the commands the
journal records when the same playbook runs, in the same order. Over the real sshd."""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from specops.steps.base import PROBE
from specops.steps.git import FETCH_BY_NAME
from tests.support.deploy import events, inventory, run_cli, write_yaml
from tests.support.sglang_trees import tree_is_pristine

REPO = Path(__file__).resolve().parents[2]


def _planned(tmp_path: Path, inv: Path, book: Path, *extra: str) -> dict[str, list[str]]:
    res = run_cli("deploy", "--host", "h", "-p", str(book), "-i", str(inv), "--check", "--json", *extra)
    assert res.exit_code == 0, res.output
    steps = json.loads(res.output)["hosts"]["h"]["steps"]
    return {s["name"]: s["commands"] for s in steps}


def _commands(lines: list[str]) -> list[str]:
    return [c for c in lines if not c.startswith((PROBE, "#"))]


def _ran(tmp_path: Path, inv: Path, book: Path, *extra: str) -> dict[str, list[str]]:
    res = run_cli("deploy", "--host", "h", "-p", str(book), "-i", str(inv), *extra)
    assert res.exit_code == 0, res.output
    run_dir = _newest(tmp_path / "runs")
    ran: dict[str, list[str]] = {}
    for ev in events(run_dir):
        if ev["event"] in ("command", "put", "get") and not ev.get("probe") and ev.get("step"):
            ran.setdefault(ev["step"], []).append(ev["command"])
    return ran


def _newest(runs: Path) -> Path:
    return sorted(p for p in runs.iterdir() if p.is_dir())[-1]


def test_shell_copy_fetch(tmp_path: Path, sshd: Any) -> None:
    inv = inventory(tmp_path, {"h": sshd.host_entry(2, workdir=str(tmp_path / "w"))})
    (tmp_path / "local.txt").write_text("from here\n")
    book = write_yaml(tmp_path / "p.yaml", {"name": "kinds", "steps": [
        {"name": "script", "shell": {"cmd": "echo {{ word }} > out.txt", "chdir": "{{ workdir }}",
                                     "env": {"SECRET_TOKEN": "s3cr3t"}}},
        {"name": "argv", "shell": ["touch", "{{ workdir }}/argv it"]},
        {"name": "copy", "copy": {"src": str(tmp_path / "local.txt"), "dest": "{{ workdir }}/sub/c.txt", "mode": "0600"}},
        {"name": "inline", "copy": {"content": "a {{ word }}\n", "dest": "{{ workdir }}/inline.txt"}},
        {"name": "fetch", "fetch": {"src": "{{ workdir }}/out.txt"}},
    ]})
    extra = ("--var", "word=it's")
    planned = _planned(tmp_path, inv, book, *extra)
    assert not (tmp_path / "w/out.txt").exists(), "--check changed something"
    ran = _ran(tmp_path, inv, book, *extra)
    for step in ("script", "argv", "copy", "inline", "fetch"):
        assert _commands(planned[step]) == ran[step], step
    assert planned["script"][0] == f"cd {tmp_path}/w && bash -c " + shlex.quote("echo $'it\\x27s' > out.txt")
    assert "s3cr3t" not in json.dumps(planned) and "SECRET_TOKEN" in planned["script"][1]
    assert (tmp_path / "w/out.txt").read_text() == "it's\n"


def _repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    src = tmp_path / "src"
    g = ["git", "-C", str(src), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", "-b", "main", str(src)], check=True)
    shas = {}
    for n, tag in ((1, "v1"), (2, "v2")):
        (src / "a").write_text(str(n))
        subprocess.run(g + ["add", "a"], check=True)
        subprocess.run(g + ["commit", "-qm", f"c{n}"], check=True)
        subprocess.run(g + ["tag", "-a", "-m", tag, tag], check=True)  # annotated: ls-remote peels it
        shas[tag] = subprocess.run(g + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (src / "a").write_text("3")
    subprocess.run(g + ["commit", "-qam", "c3"], check=True)
    shas["main"] = subprocess.run(g + ["rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    return bare, shas


def test_git_fresh_clone_then_move_to_a_branch(tmp_path: Path, sshd: Any) -> None:
    inv = inventory(tmp_path, {"h": sshd.host_entry(2, workdir=str(tmp_path / "w"))})
    bare, shas = _repo(tmp_path)
    dest = f"{tmp_path}/w/co"
    book = write_yaml(tmp_path / "p.yaml", {"name": "git", "steps": [
        {"name": "checkout", "git": {"repo": str(bare), "ref": "{{ ref }}", "dest": "{{ workdir }}/co"}}]})

    planned = _planned(tmp_path, inv, book, "--var", "ref=v1")["checkout"]
    assert not Path(dest).exists(), "--check cloned"
    assert planned[0] == f"{PROBE}test -e {dest}/.git"
    assert any(p.startswith(f"{PROBE}git ls-remote") for p in planned)
    assert _commands(planned) == [f"git clone --no-checkout --depth 1 --branch v1 -- {bare} {dest}",
                                  f"git -C {dest} checkout --quiet --detach --force {shas['v1']}"]
    assert _ran(tmp_path, inv, book, "--var", "ref=v1")["checkout"] == _commands(planned)

    planned = _planned(tmp_path, inv, book, "--var", "ref=main")["checkout"]
    # a clone made for one ref fetches another by name (a local path clone is not shallow)
    assert _commands(planned) == [shlex.join(["bash", "-c", FETCH_BY_NAME, "_", dest, "main", ""]),
                                  f"git -C {dest} checkout --quiet --detach {shas['main']}"]
    assert subprocess.run(["git", "-C", dest, "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip() == shas["v1"], "--check moved the checkout"
    assert _ran(tmp_path, inv, book, "--var", "ref=main")["checkout"] == _commands(planned)

    # a patched (dirty) tree: --check says now what apply would refuse
    Path(dest, "a").write_text("patched")
    res = run_cli("deploy", "--host", "h", "-p", str(book), "-i", str(inv), "--check", "--var", "ref=v2")
    assert res.exit_code == 0 and "has local changes" in res.output


def test_patch(tmp_path: Path, sshd: Any, sglang_tree: Any) -> None:
    tree = sglang_tree("0.5.10.post1")
    inv = inventory(tmp_path, {"h": sshd.host_entry(2, workdir=str(tmp_path / "w"))})
    book = write_yaml(tmp_path / "p.yaml", {"name": "patch", "steps": [
        {"name": "dsd", "patch": {"set": str(REPO / "playbooks/patches/dynamic-spec-disable.yaml"), "tree": str(tree)}}]})
    planned = _planned(tmp_path, inv, book)["dsd"]
    assert tree_is_pristine(tree), "--check must not touch the tree"
    commands = _commands(planned)
    assert commands and commands[0].startswith(f"put {tree}/python/sglang/srt/")
    assert any(c.startswith(f"cd {tree} && ") for c in commands), "the set's verify commands"
    assert any("+    speculative_disable_batch_threshold: int = 0" in line for line in planned)
    assert _ran(tmp_path, inv, book)["dsd"] == commands
    # the check specops makes on the tree itself is in --check's plan and in the journal
    assert any(line.startswith("# specops check eagle-attention-backends") for line in planned)
    (check,) = [e for e in events(_newest(tmp_path / "runs")) if e["event"] == "check"]
    assert check["ok"] and check["step"] == "dsd" and any("triton (TritonAttnBackend): ok" in ln for ln in check["lines"])
