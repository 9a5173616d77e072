"""`specops deploy` end to end over a real sshd on loopback, hosts as 127.0.0.x."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.support.deploy import events, inventory, only_run_dir, run_cli, write_yaml
from tests.support.waiting import wait_gone


@pytest.fixture
def inv(tmp_path: Path, sshd) -> Path:
    hosts = {f"h{i}": sshd.host_entry(i, workdir=str(tmp_path / f"w{i}")) for i in range(3)}
    hosts["loc"] = {"connection": "local", "workdir": str(tmp_path / "wl")}
    return inventory(tmp_path, hosts, {"msg": "hi"}, groups={"gpus": ["h0", "h1", "h2"]})


STEPS = [
    {"name": "prepare", "shell": ["mkdir", "-p", "{{ workdir }}/out"]},
    {"name": "upload", "copy": {"content": "{{ msg }} {{ inventory_hostname }}\n", "dest": "{{ workdir }}/out/a.txt", "mode": "0640"}},
    {"name": "wait for it", "wait": {"file": "{{ workdir }}/out/a.txt", "regex": "^hi", "timeout": 5, "interval": 0.2}},
    {"name": "cat", "shell": "cat {{ workdir }}/out/a.txt", "verify": {"stdout_matches": "^hi (h[0-2]|loc)$"}},
    {"name": "bring back", "fetch": {"src": "{{ workdir }}/out/a.txt"}},
]


def test_three_ssh_hosts_and_local_run_the_same_playbook(tmp_path: Path, inv: Path) -> None:
    pb = write_yaml(tmp_path / "p.yaml", {"name": "multi", "steps": STEPS})
    res = run_cli("deploy", "--host", "gpus,loc", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 0, res.output
    run = only_run_dir(tmp_path / "runs")
    for name, wd in [("h0", "w0"), ("h1", "w1"), ("h2", "w2"), ("loc", "wl")]:
        assert (tmp_path / wd / "out/a.txt").read_text() == f"hi {name}\n"
        assert (run / "fetched" / name / "a.txt").read_text() == f"hi {name}\n"
    assert oct((tmp_path / "w0/out/a.txt").stat().st_mode & 0o777) == "0o640"
    ev = events(run)
    assert {e["host"] for e in ev if e["event"] == "done"} == {"h0", "h1", "h2", "loc"}
    # a re-run skips what is already verified (the copy) and still succeeds
    again = run_cli("deploy", "--host", "gpus", "-p", str(pb), "-i", str(inv))
    assert again.exit_code == 0
    ev2 = events(sorted((tmp_path / "runs").iterdir())[-1])
    assert {e["host"] for e in ev2 if e["event"] == "skip" and e["step"] == "upload"} == {"h0", "h1", "h2"}


def test_failure_on_one_host_leaves_others_running(tmp_path: Path, inv: Path) -> None:
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "only h1 fails", "shell": "test {{ inventory_hostname }} != h1", "retries": 1, "delay": 0.1},
        {"name": "mark", "shell": ["touch", "{{ workdir }}/marked"]},
    ]})
    res = run_cli("deploy", "--host", "gpus", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1
    assert "h1: step 1 'only h1 fails' (shell): verify failed (2 tries): exit code 1" in res.output
    assert (tmp_path / "w0/marked").exists() and (tmp_path / "w2/marked").exists()
    assert not (tmp_path / "w1/marked").exists()


def test_check_mode_over_ssh_changes_nothing(tmp_path: Path, inv: Path) -> None:
    pb = write_yaml(tmp_path / "p.yaml", {"steps": STEPS})
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--check")
    assert res.exit_code == 0, res.output
    assert f"mkdir -p {tmp_path}/w0/out" in res.output
    assert not (tmp_path / "w0").exists()


def test_remote_timeout_kills_process_group(tmp_path: Path, inv: Path) -> None:
    tag = f"specops-ssh-timeout-{time.time_ns() % 100000}"
    n = 300 + time.time_ns() % 9000  # durations of our own: other runs on this machine sleep too
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "hang", "shell": f"sleep {n} & sleep {n + 1} & echo {tag}; sleep {n + 2}", "timeout": 1},
        {"name": "after", "shell": "echo still-usable"}]})
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1 and "timed out" in res.output
    # the host kills the group at the timeout; wait for that to land (the sshd is local)
    wait_gone(f"sleep ({n}|{n + 1}|{n + 2})( |$)", "the remote step's process group gone")


def test_injection_over_ssh_never_runs(tmp_path: Path, inv: Path) -> None:
    pwned = tmp_path / "PWNED"
    evil = f"x; touch {pwned}; echo $(touch {pwned}) `touch {pwned}` \"; touch {pwned}\""
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [
        {"name": "script", "shell": "echo {{ evil }} > {{ workdir }}/echoed", "verify": {"file_contains": {"path": "{{ workdir }}/echoed", "regex": "touch"}}},
        {"name": "argv", "shell": ["printf", "%s", "{{ evil }}"], "verify": {"stdout_contains": "$(touch"}},
    ]})
    res = run_cli("deploy", "--host", "h0", "-p", str(pb), "-i", str(inv), "--var", f"evil={evil}")
    assert res.exit_code == 0, res.output
    assert not pwned.exists()
    assert (tmp_path / "w0/echoed").read_text() == evil + "\n"


def test_changed_host_key_is_refused(tmp_path: Path, sshd) -> None:
    kh = tmp_path / "known_hosts"
    other = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    kh.write_text(f"[{sshd.address(5)}]:{sshd.port} {other}\n")
    entry = dict(sshd.host_entry(5, workdir=str(tmp_path / "w5")), known_hosts=str(kh))
    inv = inventory(tmp_path, {"changed": entry})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [{"shell": ["touch", "{{ workdir }}/x"]}]})
    res = run_cli("deploy", "--host", "changed", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1
    # the failure line says which host, that its key CHANGED, and how to clear a legitimate change
    assert "host key for changed" in res.output and "CHANGED" in res.output, res.output
    assert "ssh-keygen -R" in res.output and "Refusing" in res.output, res.output
    assert not (tmp_path / "w5").exists()
    assert kh.read_text() == f"[{sshd.address(5)}]:{sshd.port} {other}\n", "known_hosts must not be rewritten"


def test_strict_refuses_unknown_host_and_accept_new_records(tmp_path: Path, sshd) -> None:
    kh = tmp_path / "known_hosts"
    kh.write_text("")
    strict = dict(sshd.host_entry(6, workdir=str(tmp_path / "w6")), known_hosts=str(kh), host_key="strict")
    new = dict(sshd.host_entry(6, workdir=str(tmp_path / "w6")), known_hosts=str(kh))
    inv = inventory(tmp_path, {"strict": strict, "new": new})
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [{"shell": ["true"]}]})
    res = run_cli("deploy", "--host", "strict", "-p", str(pb), "-i", str(inv))
    assert res.exit_code == 1 and "unknown" in res.output.lower() and "strict" in res.output.lower()
    assert kh.read_text() == ""
    assert run_cli("deploy", "--host", "new", "-p", str(pb), "-i", str(inv)).exit_code == 0
    assert sshd.host_pubkey.split()[1] in kh.read_text()
    assert run_cli("deploy", "--host", "strict", "-p", str(pb), "-i", str(inv)).exit_code == 0


def test_unreachable_and_auth_failure_name_the_host(tmp_path: Path, sshd) -> None:
    bad_key = tmp_path / "bad_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(bad_key)], check=True)
    hosts = {
        "down": {"address": "127.0.0.1", "port": 1, "connect_timeout": 3, "workdir": str(tmp_path / "d")},
        "denied": dict(sshd.host_entry(7, workdir=str(tmp_path / "w7")), key=str(bad_key)),
    }
    inv = inventory(tmp_path, hosts)
    pb = write_yaml(tmp_path / "p.yaml", {"steps": [{"shell": ["true"]}]})
    t0 = time.monotonic()
    res = run_cli("deploy", "--host", "down,denied", "-p", str(pb), "-i", str(inv))
    assert time.monotonic() - t0 < 60  # no hang on either host (loose: a loaded machine is slow)
    assert res.exit_code == 1
    assert "down" in res.output and "127.0.0.1:1" in res.output
    assert "denied" in res.output and "authentication" in res.output.lower()


def test_hosts_check_reports_facts(tmp_path: Path, inv: Path) -> None:
    res = run_cli("hosts", "check", "--host", "h0,loc", "-i", str(inv), "--json")
    assert res.exit_code == 0, res.output
    import json

    facts = json.loads(res.output)
    assert facts["h0"]["reachable"] and facts["h0"]["python"].startswith("3.") and facts["h0"]["git"][:1].isdigit()
    assert facts["h0"]["free_disk"] and facts["h0"]["gpus"] == []
    assert facts["loc"]["reachable"]
