"""The step engine on `connection: local` hosts (each with its own workdir, like separate
machines): ordering, verification, retries, check mode, resume, when, rollback, timeouts."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml
from tests.support.waiting import wait_gone


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
    # the kill is sent at the timeout; wait for it to land (a loaded machine reaps slowly)
    wait_gone(f"sleep ({n}|{n + 1}|{n + 2})$|{tag}", "the timed-out step's process group gone")


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


#: Polls for a file from inside a step, with a deadline of its own (a broken engine must not
#: leave a step waiting for ever): `{0}` is the path.
AWAIT_FILE = "for i in $(seq 1200); do test -e {0} && break; sleep 0.05; done; test -e {0}"


def _rollback_kept_its_promise(tmp_path: Path, res, hosts: list[str]) -> set[str]:
    """With any_errors_fatal, whichever host fails first: each host that ran the step failed
    and rolled back (its rolled-back file exists, the journal and the summary say so); a host
    that did not run it is reported "not run" and has nothing to roll back. Returns the hosts
    that ran the step, read per host from the journal, not assumed."""
    run = only_run_dir(tmp_path / "runs")
    ev = events(run)
    ran = {e["host"] for e in ev if e["event"] == "step_start" and e["step"] == "bad"}
    assert ran, f"no host ran the step: {ev}"
    doc = json.loads(res.output)
    for host in hosts:
        marker = tmp_path / f"w{host[1:]}" / "rolled-back"
        step = doc["hosts"][host]["steps"][0]
        if host in ran:
            assert step["status"] == "failed", (host, step)
            assert step["detail"].endswith("(rolled back: rollback command exited 0)"), (host, step)
            assert [e["notes"] for e in ev if e["event"] == "rollback" and e["host"] == host] == [
                ["rollback command exited 0"]], (host, ev)
            assert marker.exists(), f"{host} ran the step and failed, but did not roll back"
        else:
            assert step["status"] == "not run", (host, step)
            # never a bare success: the host did nothing it was asked, and the report says why
            assert doc["hosts"][host]["ok"] is False, (host, doc["hosts"][host])
            assert step["detail"] == doc["hosts"][host]["error"] == "not run: another host failed (any_errors_fatal)"
            assert not [e for e in ev if e.get("host") == host and e["event"] in ("command", "rollback", "fail")], (
                host, ev)
            assert not marker.exists(), f"{host} never ran the step, yet something rolled it back"
    assert set(doc["hosts"]) == set(hosts) and doc["ok"] is False
    return ran


def test_rollback_runs_on_failure(tmp_path: Path, inv: Path) -> None:
    """Both hosts' step fails at once: the host that fails first stops the other, which then
    either had already started the step (and rolls back too) or had not (and is "not run").
    Which of the two depends on the machine's speed; the promise holds either way."""
    pb = playbook(tmp_path, [{"name": "bad", "shell": "false", "rollback": "touch {{ workdir }}/rolled-back"}],
                  any_errors_fatal=True)
    res = run_cli("deploy", "--host", "h0,h1", "-p", str(pb), "-i", str(inv), "--json")
    assert res.exit_code == 1, res.output
    _rollback_kept_its_promise(tmp_path, res, ["h0", "h1"])


def test_rollback_when_the_other_host_fails_mid_step(tmp_path: Path, inv: Path) -> None:
    """One ordering made certain: h0 is inside the step when h1 fails (h1 fails only once h0's
    step has started, h0 only once h1 has rolled back), so both ran it and both roll back."""
    started, other_rolled_back = tmp_path / "w0" / "started", tmp_path / "w1" / "rolled-back"
    step = ("{% if inventory_hostname == 'h0' %}touch " + str(started) + "; " + AWAIT_FILE.format(other_rolled_back)
            + "; false{% else %}" + AWAIT_FILE.format(started) + "; false{% endif %}")
    pb = playbook(tmp_path, [{"name": "bad", "shell": step, "rollback": "touch {{ workdir }}/rolled-back"}],
                  any_errors_fatal=True)
    res = run_cli("deploy", "--host", "h0,h1", "-p", str(pb), "-i", str(inv), "--json")
    assert res.exit_code == 1, res.output
    assert _rollback_kept_its_promise(tmp_path, res, ["h0", "h1"]) == {"h0", "h1"}
    ev = [(e["event"], e["host"]) for e in events(only_run_dir(tmp_path / "runs")) if e.get("step") == "bad"]
    assert ev.index(("rollback", "h1")) < ev.index(("fail", "h1")) < ev.index(("fail", "h0")), ev


def test_rollback_when_the_other_host_failed_before_it_started(tmp_path: Path, inv: Path) -> None:
    """The other ordering made certain: one host at a time (--forks 1), h1 first: h1 fails
    and rolls back before h0 starts, so h0 never runs the step and has nothing to undo."""
    pb = playbook(tmp_path, [{"name": "bad", "shell": "false", "rollback": "touch {{ workdir }}/rolled-back"}],
                  any_errors_fatal=True)
    res = run_cli("deploy", "--host", "h1,h0", "--forks", "1", "-p", str(pb), "-i", str(inv), "--json")
    assert res.exit_code == 1, res.output
    assert _rollback_kept_its_promise(tmp_path, res, ["h0", "h1"]) == {"h1"}


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


def test_a_host_stopped_before_it_started_says_so_on_the_console(tmp_path: Path, inv: Path) -> None:
    """Without --json: the host that never started is named with the reason in the failure
    lines, not counted as done (it once showed "ok": true with an empty detail)."""
    pb = playbook(tmp_path, [{"name": "bad", "shell": "false"}], any_errors_fatal=True)
    res = run_cli("deploy", "--host", "h1,h0", "--forks", "1", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1, res.output
    assert "h0: not run: another host failed (any_errors_fatal)" in res.output, res.output
