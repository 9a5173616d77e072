"""Engine._run_step's skip / verify / retry / register decisions, as the journal and the
files on a `connection: local` host show them (written for the survivors of
`python bench/mutation.py engine`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml


@pytest.fixture
def inv(tmp_path: Path) -> Path:
    hosts = {f"h{i}": {"connection": "local", "workdir": str(tmp_path / f"w{i}")} for i in range(2)}
    return inventory(tmp_path, hosts)


def _deploy(tmp_path: Path, inv: Path, steps: list[dict], *extra: str, hosts: str = "h0"):
    pb = write_yaml(tmp_path / "p.yaml", {"name": "t", "steps": steps})
    return run_cli("deploy", "--host", hosts, "-p", str(pb), "-i", str(inv), *extra)


def _runs(tmp_path: Path) -> list[list[dict]]:
    return [events(d) for d in sorted((tmp_path / "runs").iterdir()) if d.is_dir()]


def test_a_templated_when_is_rendered_per_host(tmp_path, inv):
    res = _deploy(tmp_path, inv, [{"name": "only h0", "shell": ["touch", "{{ workdir }}/ran"],
                                   "when": "{{ inventory_hostname == 'h0' }}"}], hosts="h0,h1")
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w0/ran").exists() and not (tmp_path / "w1/ran").exists()
    ev = events(only_run_dir(tmp_path / "runs"))
    assert [(e["host"], e["reason"]) for e in ev if e["event"] == "skip"] == [("h1", "when")]


@pytest.mark.parametrize("verify,reruns", [
    ({"file_exists": "{{ workdir }}/f"}, False),  # state checks only: a second run skips the step
    ({"file_exists": "{{ workdir }}/f", "stdout_contains": "x"}, True),
    ({"file_exists": "{{ workdir }}/f", "stdout_matches": "x"}, True),
    ({"file_exists": "{{ workdir }}/f", "rc": 0}, True),
])
def test_state_only_verify_skips_a_step_already_done(tmp_path, inv, verify, reruns):
    step = {"name": "count", "shell": "mkdir -p {{ workdir }} && echo x >> {{ workdir }}/n && touch {{ workdir }}/f && echo x",
            "verify": verify}
    assert _deploy(tmp_path, inv, [step]).exit_code == 0
    assert _deploy(tmp_path, inv, [step]).exit_code == 0
    assert (tmp_path / "w0/n").read_text() == ("x\nx\n" if reruns else "x\n")
    if not reruns:
        skips = [e for e in _runs(tmp_path)[1] if e["event"] == "skip"]
        assert [(e["step"], e["reason"]) for e in skips] == [("count", "already verified")]


def test_retries_make_exactly_the_attempts_asked_for(tmp_path, inv):
    res = _deploy(tmp_path, inv, [{"name": "never", "shell": "echo no", "verify": {"stdout_contains": "yes"},
                                   "retries": 2, "delay": 0}])
    assert res.exit_code == 1
    ev = events(only_run_dir(tmp_path / "runs"))
    assert [e["attempt"] for e in ev if e["event"] == "apply"] == [1, 2, 3]
    assert [(e["attempt"], e["ok"]) for e in ev if e["event"] == "verify"] == [(1, False), (2, False), (3, False)]
    assert [(e["attempt"], e["delay_s"]) for e in ev if e["event"] == "retry"] == [(1, 0), (2, 0)]


def test_a_registered_result_carries_rc_and_output(tmp_path, inv):
    res = _deploy(tmp_path, inv, [
        {"name": "probe", "shell": "echo hello", "register": "r"},
        {"name": "use", "shell": ["sh", "-c", "echo '{{ r.rc }}/{{ r.stdout | trim }}' > {{ workdir }}/out"]},
    ])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "w0/out").read_text() == "0/hello\n"


def test_journal_names_host_step_and_kind(tmp_path, inv):
    assert _deploy(tmp_path, inv, [{"name": "one", "shell": ["true"]}]).exit_code == 0
    (start,) = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "step_start"]
    assert (start["host"], start["step"], start["step_index"], start["kind"]) == ("h0", "one", 0, "shell")


def test_check_mode_journals_the_commands(tmp_path, inv):
    assert _deploy(tmp_path, inv, [{"name": "one", "shell": ["touch", "{{ workdir }}/x"]}], "--check").exit_code == 0
    checks = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "check"]
    assert [(e["host"], e["step"], e["commands"]) for e in checks] == [("h0", "one", [f"touch {tmp_path}/w0/x"])]


def test_a_failure_without_retries_or_rollback_says_just_what_was_seen(tmp_path, inv):
    res = _deploy(tmp_path, inv, [{"name": "bad", "shell": "echo oops; exit 3"}])
    assert res.exit_code == 1
    (fail,) = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "fail"]
    assert fail["error"] == "verify failed: exit code 3: oops"
    assert not [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "rollback"]


def test_a_rollback_script_is_rendered_for_the_shell_and_journaled(tmp_path, inv):
    res = _deploy(tmp_path, inv, [{"name": "bad", "shell": "exit 1",
                                   "rollback": "mkdir -p {{ workdir }} && echo {{ inventory_hostname }} > {{ workdir }}/rb"}])
    assert res.exit_code == 1
    assert (tmp_path / "w0/rb").read_text() == "h0\n"
    ev = events(only_run_dir(tmp_path / "runs"))
    assert [e["notes"] for e in ev if e["event"] == "rollback"] == [["rollback command exited 0"]]
    (fail,) = [e for e in ev if e["event"] == "fail"]
    assert fail["error"] == "verify failed: exit code 1: (no output) (rolled back: rollback command exited 0)"


def test_an_ignored_failure_is_done_and_says_so(tmp_path, inv):
    res = _deploy(tmp_path, inv, [{"name": "bad", "shell": "exit 1", "ignore_errors": True},
                                  {"name": "next", "shell": ["true"]}])
    assert res.exit_code == 0, res.output
    done = [e for e in events(only_run_dir(tmp_path / "runs")) if e["event"] == "done"]
    assert [(e["step"], e.get("ignored_failure")) for e in done] == [
        ("bad", "exit code 1: (no output)"), ("next", None)]
