"""The step engine on `connection: local` hosts (each with its own workdir, like separate
machines): ordering, verification, retries, check mode, resume, when, rollback, timeouts."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    hosts = {f"h{i}": {"connection": "local", "workdir": str(tmp_path / f"w{i}")} for i in range(3)}
    return inventory(tmp_path, hosts, {"greeting": "hello"}, groups={"all3": list(hosts)})


def playbook(tmp_path: Path, steps: list[dict], **extra) -> Path:
    return write_yaml(tmp_path / "p.yaml", {"name": "t", "steps": steps, **extra})


def test_three_hosts_multi_step(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [
        {"name": "make dir", "shell": ["mkdir", "-p", "{{ workdir }}/d"]},
        {"name": "write", "copy": {"content": "{{ greeting }} from {{ inventory_hostname }}\n", "dest": "{{ workdir }}/d/f.txt"}},
        {"name": "read", "shell": "cat {{ workdir }}/d/f.txt", "verify": {"stdout_matches": "^hello from h[0-2]$"}},
    ])
    res = run_cli("deploy", "--host", "all3", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 0, res.output
    for i in range(3):
        assert (tmp_path / f"w{i}/d/f.txt").read_text() == f"hello from h{i}\n"
    ev = events(only_run_dir(tmp_path / "runs"))
    kinds = {e["event"] for e in ev}
    assert {"run_start", "step_start", "apply", "verify", "done", "command", "run_done"} <= kinds
    cmds = [e for e in ev if e["event"] == "command" and e["host"] == "h1"]
    assert cmds[0]["command"] == f"mkdir -p {tmp_path}/w1/d" and cmds[0]["rc"] == 0


def test_verification_failure_retries_then_fails_only_that_host(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [
        {"name": "flaky on h1", "shell": "echo {{ inventory_hostname }}",
         "verify": {"stdout_contains": "h0"}, "retries": 2, "delay": 0.05, "when": "inventory_hostname != 'h2'"},
        {"name": "after", "shell": ["touch", "{{ workdir }}/after"]},
    ])
    res = run_cli("deploy", "--host", "h0,h1,h2", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1
    assert "h1: step 1 'flaky on h1' (shell): verify failed (3 tries): stdout does not contain 'h0'" in res.output
    assert (tmp_path / "w0/after").exists() and (tmp_path / "w2/after").exists()
    assert not (tmp_path / "w1/after").exists()
    ev = events(only_run_dir(tmp_path / "runs"))
    assert len([e for e in ev if e["event"] == "retry" and e["host"] == "h1"]) == 2
    assert any(e["event"] == "skip" and e["host"] == "h2" and e["reason"] == "when" for e in ev)


def test_check_mode_changes_nothing_and_prints_commands(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [
        {"name": "touch", "shell": "touch {{ workdir }}/touched"},
        {"name": "write", "copy": {"content": "x", "dest": "{{ workdir }}/c.txt"}},
    ])
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--check")
    assert res.exit_code == 0, res.output
    assert f"bash -c 'touch {tmp_path}/w0/touched'" in res.output
    assert not (tmp_path / "w0").exists()


def test_resume_continues_failed_run_without_reapplying(tmp_path: Path, inv: Path) -> None:
    counter = tmp_path / "w0" / "count"
    pb = playbook(tmp_path, [
        {"name": "count", "shell": "mkdir -p {{ workdir }} && echo x >> {{ workdir }}/count",
         "verify": {"file_exists": "{{ workdir }}/count"}},
        {"name": "needs gate", "shell": "test -e {{ workdir }}/gate"},
        {"name": "last", "shell": ["touch", "{{ workdir }}/last"]},
    ])
    first = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv))
    assert first.exit_code == 1 and counter.read_text() == "x\n"
    (tmp_path / "w0" / "gate").touch()
    second = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--resume")
    assert second.exit_code == 0, second.output
    assert counter.read_text() == "x\n", "step 1 was re-applied on resume"
    assert (tmp_path / "w0" / "last").exists()
    assert len(list((tmp_path / "runs").iterdir())) == 1, "resume continues the same run directory"
    ev = events(only_run_dir(tmp_path / "runs"))
    assert any(e["event"] == "resume" for e in ev)


def test_from_step_and_unknown_from_step(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [{"name": "one", "shell": "false"}, {"name": "two", "shell": ["touch", "{{ workdir }}"]}])
    assert run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--from-step", "two").exit_code == 0
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--from-step", "tow")
    assert res.exit_code == 2 and "no step named 'tow' (did you mean 'two'?); the steps are: 1 one; 2 two" in res.output


def test_timeout_kills_the_whole_process_group(tmp_path: Path, inv: Path) -> None:
    tag = f"specops-timeout-{time.time_ns()}"
    n = 300 + time.time_ns() % 9000  # durations of our own: other runs on this machine sleep too
    pb = playbook(tmp_path, [{"name": "hang", "shell": f"sleep {n} & sleep {n + 1} & exec -a {tag} sleep {n + 2}",
                              "timeout": 1}])
    t0 = time.monotonic()
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1 and "timed out" in res.output
    assert time.monotonic() - t0 < 120  # the 1 s timeout, not the 300 s sleeps
    time.sleep(0.3)
    left = subprocess.run(["pgrep", "-f", f"sleep ({n}|{n + 1}|{n + 2})$|{tag}"], capture_output=True, text=True).stdout
    assert left.strip() == "", f"processes survived the timeout: {left}"


def test_injection_values_are_never_executed(tmp_path: Path, inv: Path) -> None:
    pwned = tmp_path / "PWNED"
    evil = f"x; touch {pwned}; echo $(touch {pwned}) `touch {pwned}`"
    pb = playbook(tmp_path, [
        {"name": "script", "shell": "echo {{ evil }}", "verify": {"stdout_contains": "touch"}},
        {"name": "argv", "shell": ["echo", "{{ evil }}"]},
        {"name": "copy", "copy": {"content": "{{ evil }}", "dest": "{{ workdir }}/{{ name }}"}},
    ])
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", f"evil={evil}",
                  "--var", "name=f; touch PWNED2")
    assert res.exit_code == 0, res.output
    assert not pwned.exists()
    assert (tmp_path / "w0" / "f; touch PWNED2").read_text() == evil


def test_rollback_runs_on_failure(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [{"name": "bad", "shell": "false", "rollback": "touch {{ workdir }}/rolled-back"}],
                  any_errors_fatal=True)
    (tmp_path / "w0").mkdir()
    res = run_cli("deploy", "--host", "h0,h1", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1
    assert (tmp_path / "w0" / "rolled-back").exists()


def test_undefined_variable_fails_naming_step_before_anything_runs(tmp_path: Path, inv: Path) -> None:
    pb = playbook(tmp_path, [
        {"name": "first", "shell": ["touch", "{{ workdir }}/ran"], "register": "first"},
        {"name": "uses registered", "shell": "echo {{ first.stdout }}"},
        {"name": "uses typo", "shell": "echo {{ greting }}"}])
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 2
    assert "p.yaml:11: step 3 'uses typo': undefined variable 'greting' (host h0)" in res.output
    assert not (tmp_path / "w0").exists(), "nothing may run when a template is broken"


def test_git_step_checks_out_ref_and_verifies_sha(tmp_path: Path, inv: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    g = ["git", "-C", str(src), "-c", "user.email=t@t", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(src)], check=True)
    (src / "a").write_text("1")
    subprocess.run(g + ["add", "a"], check=True)
    subprocess.run(g + ["commit", "-qm", "one"], check=True)
    subprocess.run(g + ["tag", "v1"], check=True)
    v1 = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    (src / "a").write_text("2")
    subprocess.run(g + ["commit", "-qam", "two"], check=True)
    bare = tmp_path / "repo.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(src), str(bare)], check=True)
    pb = playbook(tmp_path, [{"name": "checkout", "git": {"repo": str(bare), "ref": "{{ ref }}", "dest": "{{ workdir }}/co"},
                              "register": "co"},
                             {"name": "show", "shell": "echo {{ co.sha }}", "verify": {"stdout_contains": v1}}])
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", "ref=v1")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w0/co/a").read_text() == "1"
    again = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", "ref=v1")
    assert again.exit_code == 0
    ev = events(sorted((tmp_path / "runs").iterdir())[-1])
    assert any(e["event"] == "skip" and e["step"] == "checkout" for e in ev), "an up-to-date checkout is skipped"
    # a patched (dirty) tree is never reset silently to another ref
    (tmp_path / "w0/co/a").write_text("patched")
    moved = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", "ref=master")
    assert moved.exit_code == 1 and "has local changes" in moved.output
    assert (tmp_path / "w0/co/a").read_text() == "patched"
    bad = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", "ref=nope-ref")
    assert bad.exit_code == 1 and "ref 'nope-ref' not found" in bad.output
