"""Every command, walked with a table of bad inputs: each is refused before anything runs,
with exit code 2, one `error:` line (and at most a `hint:` line) naming the file, line,
host, step or option, no traceback, and nothing created (no runs/, no host workdir).

In-process through click's runner (as the other e2e tests), with one row again as a real
process: what a user's terminal shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from specops.cli.main import main
from specops.data import shipped_inventory

PATCH_EDIT = "edits:\n  - name: e\n    file: {file}\n    op: {op}\n    anchor: {anchor}\n    text: 'y = 1'\n"


def _patch_set(name: str, file: str = "python/sglang/a.py", op: str = "insert_after",
               anchor: str = "{assign: x}") -> str:
    return f"name: {name}\n" + PATCH_EDIT.format(file=file, op=op, anchor=anchor)


def _playbook(step: str) -> str:
    return f"steps:\n  - {step}\n"


LATIN = "# café\n".encode("latin-1")

#: name -> file content, written into the working directory the rows run in (the inventories
#: as text: a row names the line of its error)
FILES: dict[str, str | bytes] = {
    "secret-hosts.yaml": "hosts:\n  local: {connection: local, engine: sim}\nsecrets:\n  HF_TOKEN: {file: token.bin}\n",
    "token.bin": b"hf_\xff\xfe\n",
    "latin-hosts.yaml": b"hosts:\n  local: {connection: local}\n" + LATIN,
    "list-hosts.yaml": "- local\n",
    "typo-hosts.yaml": "hosts:\n  gpu-a:\n    adress: 10.0.0.5\n",
    "ctrl-hosts.yaml": "hosts:\n  gpu-a: {address: \"10.0.0.5\x01\"}\n",
    "port-hosts.yaml": "hosts:\n  gpu-a: {address: 10.0.0.5, port: 99999}\n",
    "name-hosts.yaml": "hosts:\n  ../gpu-a: {address: 10.0.0.5}\n",
    "empty-hosts.yaml": "defaults:\n  workdir: ''\nhosts:\n  gpu-a: {address: 10.0.0.5}\n",
    "group-hosts.yaml": "hosts:\n  gpu-a: {address: 10.0.0.5}\ngroups:\n  all-gpus: [gpu-a, [gpu-b]]\n",
    "key-hosts.yaml": "hosts:\n  ? [gpu-a]\n  : {address: 10.0.0.5}\n",
    "pb-latin.yaml": b"steps:\n  - shell: echo hi\n" + LATIN,
    "pb-kind.yaml": _playbook("shel: echo hi"),
    "pb-undefined.yaml": _playbook("shell: echo {{ nope }}"),
    "pb-patch.yaml": _playbook("patch: {set: escape, tree: '{{ workdir }}/sglang'}"),
    "pb-fetch.yaml": _playbook("fetch: {src: /etc/hostname, dest: /tmp/evil}"),
    "pb-mode.yaml": _playbook("copy: {content: x, dest: '{{ workdir }}/x', mode: 644}"),
    "pb-template.yaml": _playbook("copy: {src: latin.txt, dest: '{{ workdir }}/x', template: true}"),
    "pb-arm.yaml": _playbook("server: {arms: [baselin], tree: '{{ workdir }}/sglang'}"),
    "pb-types.yaml": _playbook("wait: {port: '30000'}"),
    "pb-regex.yaml": "steps:\n  - shell: echo hi\n    verify: {stdout_matches: '(hi'}\n",
    "pb-retries.yaml": "steps:\n  - shell: echo hi\n    retries: -1\n",
    "latin.txt": "café {{ x }}\n".encode("latin-1"),
    "dataset.json": b'[{"conversations": [{"from": "human", "value": "caf\xe9"}]}]\n',
    "playbooks/patches/escape.yaml": _patch_set("escape", file="python/../../x.py"),
    "playbooks/patches/absolute.yaml": _patch_set("absolute", file="/etc/x.py"),
    "playbooks/patches/latin.yaml": _patch_set("latin").encode() + LATIN,
    "playbooks/patches/notpython.yaml": _patch_set("notpython", file="python/sglang/notes.txt"),
    "playbooks/patches/position.yaml": _patch_set("position", anchor="{function: f, position: body_start}"),
    "playbooks/patches/nokind.yaml": _patch_set("nokind", anchor="{method: f}"),
    "tree/python/sglang/a.py": "x = 1\n",
    "notarun/keep.txt": "not a run directory\n",
    "torn/results.jsonl": '{"arm": "baseline"\n{"arm": "eagle3"}\n',
    "badmanifest/results.jsonl": '{"arm": "baseline", "concurrency": 1, "status": "ok"}\n',
    "badmanifest/manifest.json": "nope\n",
}

# (id, argv, what the error line must say)
ROWS: list[tuple[str, list[str], str]] = [
    # hosts.yaml
    ("hosts-non-utf8", ["deploy", "--host", "local", "-i", "latin-hosts.yaml"],
     "latin-hosts.yaml:3: inventory is not UTF-8 text (byte 0xe9"),
    ("hosts-not-a-mapping", ["hosts", "-i", "list-hosts.yaml"],
     "list-hosts.yaml:1: the inventory must be a mapping, got a list"),
    ("hosts-typo", ["hosts", "check", "-i", "typo-hosts.yaml"],
     "typo-hosts.yaml:3: unknown key 'adress' in host 'gpu-a' (did you mean 'address'?)"),
    ("hosts-control-char", ["status", "--host", "gpu-a", "-i", "ctrl-hosts.yaml"],
     "ctrl-hosts.yaml:2: YAML cannot hold character U+0001"),
    ("hosts-port", ["stop", "--host", "gpu-a", "-i", "port-hosts.yaml"],
     "port-hosts.yaml:2: host 'gpu-a': port 99999 is out of range"),
    ("hosts-name-path", ["hosts", "-i", "name-hosts.yaml"], "name-hosts.yaml:2: host name '../gpu-a' must be"),
    ("hosts-empty-workdir", ["deploy", "--host", "gpu-a", "-i", "empty-hosts.yaml"],
     "empty-hosts.yaml:2: host 'gpu-a': 'workdir' is empty"),
    ("hosts-group-member", ["hosts", "check", "-i", "group-hosts.yaml"],
     "group-hosts.yaml:4: group 'all-gpus': members are host names, got ['gpu-b']"),
    ("hosts-list-key", ["status", "--host", "gpu-a", "-i", "key-hosts.yaml"],
     "key-hosts.yaml:2: a key must be a name, not a list"),
    ("secret-non-utf8", ["deploy", "--host", "local", "-i", "secret-hosts.yaml"],
     "secret-hosts.yaml:3: secret HF_TOKEN: token.bin is not UTF-8 text"),
    ("hosts-missing", ["status", "--host", "local", "-i", "nowhere.yaml"], "inventory not found: nowhere.yaml"),
    ("unknown-host", ["deploy", "--host", "nosuch"], "unknown host or group 'nosuch'; the inventory has: local"),
    ("unknown-host-logs", ["logs", "--host", "locl"], "unknown host or group 'locl' (did you mean 'local'?)"),
    ("unknown-host-check", ["hosts", "check", "--host", "gpu-z"], "unknown host or group 'gpu-z'"),
    # playbooks
    ("playbook-non-utf8", ["deploy", "--host", "local", "-p", "pb-latin.yaml"],
     "pb-latin.yaml:3: playbook is not UTF-8 text"),
    ("playbook-kind", ["deploy", "--host", "local", "-p", "pb-kind.yaml"],
     "pb-kind.yaml:2: step 1: unknown step kind 'shel' (did you mean 'shell'?)"),
    ("playbook-undefined", ["deploy", "--host", "local", "-p", "pb-undefined.yaml"],
     "step 1 'shell 1': undefined variable 'nope' (host local)"),
    ("playbook-from-step", ["deploy", "--host", "local", "--from-step", "99"],
     "--from-step 99: the playbook has steps 1..11"),
    ("step-arg-type", ["deploy", "--host", "local", "-p", "pb-types.yaml"],
     "pb-types.yaml:2: 'port' in step 1 'wait 1' (wait) must be an integer, got a string"),
    ("verify-regex", ["deploy", "--host", "local", "-p", "pb-regex.yaml"],
     "pb-regex.yaml:3: 'stdout_matches' in verify is not a valid regex"),
    ("step-retries", ["deploy", "--host", "local", "-p", "pb-retries.yaml"],
     "pb-retries.yaml:3: step 'shell 1': retries must be 0 or more"),
    ("fetch-dest-absolute", ["deploy", "--host", "local", "-p", "pb-fetch.yaml"],
     "pb-fetch.yaml:2: step 1 'fetch 1': fetch dest '/tmp/evil' must be a relative path inside the run directory"),
    ("copy-mode-number", ["deploy", "--host", "local", "-p", "pb-mode.yaml"],
     "step 1 'copy 1': mode must be an octal string such as '0640', got 644"),
    ("copy-template-non-utf8", ["deploy", "--host", "local", "-p", "pb-template.yaml"],
     "latin.txt:1: step 1 'copy 1' (copy src) template is not UTF-8 text"),
    ("server-unknown-arm", ["deploy", "--host", "local", "-p", "pb-arm.yaml"],
     "step 1 'server 1': no arm 'baselin' (did you mean 'baseline'?)"),
    ("deploy-resume-nothing", ["deploy", "--host", "local", "--resume"], "--resume: no failed run of playbook 'deploy'"),
    ("deploy-no-host", ["deploy"], "deploy: Missing option '--host'"),
    # --var
    ("var-no-equals", ["deploy", "--host", "local", "--var", "novalue"], "--var expects NAME=VALUE, got 'novalue'"),
    ("var-dotted-unknown", ["bench", "--host", "local", "--var", "nope.x=1"], "--var nope.x: no variable named 'nope'"),
    ("var-wrong-kind", ["deploy", "--host", "local", "--var", "arms=3"], "cannot evaluate when: ('adaptive' in arms or 'spec-off' in arms)"),
    ("var-bad-threshold", ["bench", "--host", "local", "--var", "arms.adaptive.threshold=x"],
     "'threshold' in arm 'adaptive' must be an integer"),
    # patch sets, through deploy and through `specops patch`
    ("patch-leaves-tree-deploy", ["deploy", "--host", "local", "-p", "pb-patch.yaml"],
     "escape.yaml:4: 'file' in edit 'e': path 'python/../../x.py' leaves the tree (the patch set of step 1"),
    ("patch-leaves-tree", ["patch", "apply", "escape", "--tree", "tree"],
     "'file' in edit 'e': path 'python/../../x.py' leaves the tree"),
    ("patch-absolute", ["patch", "check", "absolute", "--tree", "tree"], "path '/etc/x.py' is absolute"),
    ("patch-non-utf8", ["patch", "check", "latin", "--tree", "tree"], "latin.yaml:8: patch set is not UTF-8 text"),
    ("patch-anchor-needs-python", ["patch", "revert", "notpython", "--tree", "tree"],
     "a assign anchor is a syntax-tree anchor and needs a .py file"),
    ("patch-anchor-op", ["patch", "check", "position", "--tree", "tree"],
     "op insert_after does not fit a body_start anchor"),
    ("patch-anchor-unknown-kind", ["patch", "check", "nokind", "--tree", "tree"],
     "unknown key 'method' in the anchor of edit 'e'"),
    ("patch-unknown-set", ["patch", "check", "nosuch", "--tree", "tree"], "no patch set named 'nosuch'"),
    ("patch-not-a-tree", ["patch", "detect", "--tree", "notarun"], "not an SGLang checkout"),
    # bench, report, compare, stop, tune
    ("bench-unknown-arm", ["bench", "--host", "local", "--arms", "baseline,eagle4"],
     "no arm 'eagle4' on host local (did you mean 'eagle3'?)"),
    ("bench-dataset-non-utf8", ["bench", "--host", "local", "--dataset", "dataset.json"],
     "dataset.json:1: dataset is not UTF-8 text"),
    ("bench-concurrency", ["bench", "--host", "local", "--concurrency", "1,x"], "--concurrency expects comma-separated"),
    ("bench-num-prompts", ["bench", "--host", "local", "--num-prompts", "-3"], "--num-prompts must be at least 1"),
    ("bench-threshold", ["bench", "--host", "local", "--threshold", "0"], "Invalid value for '--threshold'"),
    ("bench-resume-not-a-run", ["bench", "--host", "local", "--resume", "notarun"], "notarun has no manifest.json"),
    ("report-not-a-run", ["report", "notarun"], "notarun has no results.jsonl"),
    ("report-missing", ["report", "nowhere"], "Directory 'nowhere' does not exist"),
    ("report-corrupt-line", ["report", "torn"], "torn/results.jsonl:1: corrupt result line"),
    ("compare-corrupt-manifest", ["compare", "badmanifest", "torn"], "badmanifest/manifest.json: manifest is not valid"),
    ("bench-resume-corrupt", ["bench", "--host", "local", "--resume", "badmanifest"], "manifest is not valid JSON"),
    ("compare-not-a-run", ["compare", "notarun", "notarun"], "notarun has no results.jsonl"),
    ("stop-unknown-arm", ["stop", "--host", "local", "--server", "nosuch"], "no arm 'nosuch' on local"),
    ("logs-negative", ["logs", "--host", "local", "-n", "-5"], "Invalid value for '--lines'"),
    ("tune-from-not-a-run", ["tune", "--host", "local", "--from", "notarun"], "--from notarun: no results.jsonl"),
    ("tune-budget", ["tune", "--host", "local", "--budget-minutes", "-1"], "--budget-minutes must be > 0"),
    ("tune-candidates", ["tune", "--host", "local", "--candidates", "0"], "--candidates must be >= 1 (got 0)"),
    # tune's shared options are read and checked by the settings schema, as bench's are (issue 56)
    ("tune-concurrency", ["tune", "--host", "local", "--concurrency", "1,x"], "--concurrency expects comma-separated"),
    ("tune-concurrency-zero", ["tune", "--host", "local", "--concurrency", "0,4"],
     "tune --concurrency: concurrency level 0 is not a positive"),
    ("tune-concurrency-twice", ["tune", "--host", "local", "--concurrency", "4,4"],
     "tune --concurrency: a concurrency level is listed twice"),
    ("tune-input-len", ["tune", "--host", "local", "--input-len", "256,0"], "--input-len lengths must be at least 1"),
    ("tune-output-len-twice", ["tune", "--host", "local", "--output-len", "8,8"], "--output-len lists a length twice"),
    ("tune-num-prompts", ["tune", "--host", "local", "--num-prompts", "-3"], "--num-prompts must be at least 1"),
    ("tune-steps", ["tune", "--host", "local", "--steps", "0,-1"], "--steps expects non-negative integers"),
    ("unknown-command", ["deplyo"], "No such command 'deplyo'"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A working directory holding a good hosts.yaml (the simulated `local` host, workdir
    inside it, never created by a refused command) and the bad files the rows name."""
    root = tmp_path_factory.mktemp("bad-inputs")
    host_dir = root / "host-workdir"
    # the shipped inventory as shipped, its workdir moved here
    (root / "hosts.yaml").write_text(shipped_inventory().read_text().replace("~/.specops-local", str(host_dir)))
    for name, content in FILES.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def _snapshot(root: Path) -> dict[str, int]:
    return {str(p.relative_to(root)): p.stat().st_size for p in root.rglob("*")}


def _check(row: str, code: int, stderr: str, output: str, expected: str) -> None:
    lines = stderr.strip().splitlines()
    assert code == 2, f"{row}: exit {code}\n{output}"
    assert "Traceback" not in output, f"{row}: a traceback reached the user\n{output}"
    assert lines and lines[0].startswith("error: "), f"{row}: {stderr!r}"
    assert len(lines) == 1 or (len(lines) == 2 and lines[1].startswith("  hint: ")), f"{row}: {stderr!r}"
    assert expected in lines[0], f"{row}: {lines[0]!r} does not say {expected!r}"


@pytest.mark.parametrize("row,argv,expected", ROWS, ids=[r[0] for r in ROWS])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(workdir: Path, monkeypatch: pytest.MonkeyPatch,
                                                          row: str, argv: list[str], expected: str) -> None:
    monkeypatch.chdir(workdir)
    monkeypatch.delenv("SPECOPS_INVENTORY", raising=False)
    before = _snapshot(workdir)
    res = CliRunner().invoke(main, argv)
    assert res.exception is None or isinstance(res.exception, SystemExit), f"{row}: {res.exception!r}"
    _check(row, res.exit_code, res.stderr, res.output, expected)
    assert _snapshot(workdir) == before, f"{row}: something was created or changed (runs/, the host's workdir)"


def test_as_a_real_process_the_terminal_shows_the_same_one_line(workdir: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "SPECOPS_INVENTORY"}
    before = _snapshot(workdir)
    proc = subprocess.run([sys.executable, "-m", "specops", "deploy", "--host", "local", "-p", "pb-patch.yaml"],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=120)
    _check("subprocess", proc.returncode, proc.stderr, proc.stdout + proc.stderr,
           "'file' in edit 'e': path 'python/../../x.py' leaves the tree")
    assert proc.stdout == "" and _snapshot(workdir) == before
