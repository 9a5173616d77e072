"""Issue 26: a light command imports only what it uses. Every command paid 1.2 s of imports
(matplotlib, aiohttp, the step engine, jinja2) before it started, because the group
imported every command module; now `cli/lazy` loads a command's module when it runs.

Each light command runs as a real `specops` process on a local host, which reports the
modules it had loaded when it exited (`sys.modules`, not a timer). And every command the
group lists really loads, with the short help the table promises."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import click
import pytest
import yaml
from click.testing import CliRunner

from specops.cli.lazy import LazyCommand, LazyGroup
from specops.cli.main import COMMANDS, main
from specops.servers.lifecycle import ServerState
from tests.support.deploy import inventory

ROOT = Path(__file__).resolve().parents[2]
#: Heavy packages no light command uses (paramiko/fabric: no SSH connection to a local host).
HEAVY = ("matplotlib", "aiohttp", "jinja2", "paramiko", "fabric", "numpy")
#: The playbook machinery: `deploy` needs it, `--help`, `status` and `logs` do not.
ENGINE = {"specops.run.engine", "specops.steps", "specops.bench.sweep"}
#: Runs the CLI as `specops` does and writes the top-level packages it loaded to $LOADED_TO.
PROBE = textwrap.dedent("""
    import atexit, json, os, sys
    def _report():
        with open(os.environ["LOADED_TO"], "w") as f:
            json.dump(sorted(sys.modules), f)
    atexit.register(_report)
    sys.argv[0] = "specops"
    from specops.cli import main
    main()
""")


def loaded(tmp_path: Path, *args: str) -> tuple[int, set[str], str]:
    """(exit code, every module loaded by then, output) of `specops ARGS` in a fresh interpreter."""
    out = tmp_path / "loaded.json"
    env = dict(os.environ, LOADED_TO=str(out), PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    return proc.returncode, set(json.loads(out.read_text())), proc.stdout + proc.stderr


def heavy(modules: set[str]) -> list[str]:
    return sorted(h for h in HEAVY if h in modules)


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A local host with one server's state file (its pid long gone) and its log."""
    wd = tmp_path / "work"
    for sub in ("logs", "servers"):
        (wd / ".specops" / sub).mkdir(parents=True)
    log = wd / ".specops" / "logs" / "baseline.log"
    log.write_text("starting\nready\n")
    command = "python -m sglang.launch_server --port 30000"
    state = ServerState(arm="baseline", kind="baseline", pid=999_999, pgid=999_999, proc_start="1", port=30000,
                        command=command, argv=command.split(), env={}, args_hash="h", log_path=str(log),
                        state_path=str(wd / ".specops" / "servers" / "baseline.json"), mechanism="none",
                        started_at=0.0, workdir=str(wd))
    Path(state.state_path).write_bytes(state.to_json())
    return inventory(tmp_path, {"local": {"connection": "local", "engine": "sim", "workdir": str(wd)}})


def _playbook(tmp_path: Path, command: str) -> Path:
    pb = tmp_path / "pb.yaml"
    pb.write_text(yaml.safe_dump({"name": "plain", "steps": [{"name": "one", "shell": command}]}))
    return pb


def test_help_imports_no_command_module(tmp_path: Path) -> None:
    rc, modules, output = loaded(tmp_path, "--help")
    assert rc == 0, output
    assert all(name in output for name in COMMANDS)
    assert heavy(modules) == []
    commands = {target.target.partition(":")[0] for target in COMMANDS.values()}
    assert sorted(commands & modules) == []
    assert sorted(ENGINE & modules) == []


@pytest.mark.parametrize("args, rc, shown", [(["status", "--help"], 0, "Per arm"),
                                              (["status"], 1, "baseline is dead"),  # 1: an arm is dead
                                              (["logs"], 0, "ready"), (["logs", "--json"], 0, '"ready"')],
                         ids=["status-help", "status", "logs", "logs-json"])
def test_status_and_logs_of_a_local_host_load_nothing_heavy(tmp_path: Path, host: Path, args: list[str], rc: int,
                                                            shown: str) -> None:
    extra = [] if "--help" in args else ["-H", "local", "-i", str(host)]
    code, modules, output = loaded(tmp_path, *args, *extra)
    assert (code, shown in output) == (rc, True), output  # it did its work
    assert heavy(modules) == []
    assert sorted(ENGINE & modules) == []  # no playbook machinery for a status


@pytest.mark.parametrize("check", [True, False], ids=["check", "run"])
def test_deploy_of_a_plain_playbook_on_a_local_host_loads_nothing_heavy(tmp_path: Path, host: Path,
                                                                        check: bool) -> None:
    pb = _playbook(tmp_path, "true")
    rc, modules, output = loaded(tmp_path, "deploy", "-H", "local", "-i", str(host), "-p", str(pb),
                                 "--runs-dir", str(tmp_path / "runs"), *(["--check"] if check else []))
    assert rc == 0, output
    assert "specops.run.engine" in modules  # it did run the engine
    assert heavy(modules) == []


def test_a_template_loads_jinja2_where_it_renders(tmp_path: Path, host: Path) -> None:
    """The check above would see jinja2: a playbook that renders a `{{ }}` loads it."""
    pb = _playbook(tmp_path, "echo {{ inventory_hostname }}")
    rc, modules, output = loaded(tmp_path, "deploy", "-H", "local", "-i", str(host), "-p", str(pb), "--check")
    assert rc == 0, output
    assert heavy(modules) == ["jinja2"]


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_listed_command_loads_with_the_short_help_of_the_table(name: str) -> None:
    res = CliRunner().invoke(main, [name, "--help"])
    assert res.exit_code == 0, f"{res.output}{res.exception!r}"
    command = main.get_command(click.Context(main), name)
    assert command is not None and command.name == name
    assert command.get_short_help_str(limit=10_000) == COMMANDS[name].short_help


@pytest.mark.parametrize("width", [80, 60, 200])
def test_the_listing_is_clicks_own_without_loading_anything(width: int) -> None:
    """The lazy group's `Commands:` section, nothing loaded, reads as a plain click group's
    holding every command (each shortened to the width as click does)."""
    def listing(group: click.Group) -> str:
        ctx = click.Context(group, info_name="specops", terminal_width=width, max_content_width=width)
        formatter = ctx.make_formatter()
        group.format_commands(ctx, formatter)
        return formatter.getvalue()

    fresh = LazyGroup("specops", lazy=COMMANDS)
    lazy_text = listing(fresh)
    assert fresh.commands == {}  # listed, not loaded
    ctx = click.Context(main)
    eager = click.Group("specops", commands={name: main.get_command(ctx, name) for name in COMMANDS})
    assert lazy_text == listing(eager)


def test_a_mistyped_command_is_still_answered_with_the_close_name() -> None:
    res = CliRunner().invoke(LazyGroup("specops", lazy=COMMANDS), ["statsu"])
    assert res.exit_code == 2
    assert "No such command 'statsu'. Did you mean 'status'?" in res.output


def test_a_bad_table_entry_fails_when_its_command_is_asked_for() -> None:
    group = LazyGroup("specops", lazy={"nope": LazyCommand("specops.cli.servers:nope", "x")})
    with pytest.raises(AttributeError):
        group.get_command(click.Context(group), "nope")
