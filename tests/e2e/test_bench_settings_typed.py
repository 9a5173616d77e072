"""Issue 33 point 3: the bench settings are parsed once per run, by the flow, and reach each
host's bench step as that same `BenchSettings` (the playbook's `settings: "{{ bench }}"`
renders to the object itself): not turned into a dict and read again per host and per phase
of the step, as they were (five reads per host)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specops.bench.settings import BenchSettings
from tests.support.arms import sim_inventory
from tests.support.deploy import run_cli

TINY = ["--arms", "baseline", "--concurrency", "1", "--repeats", "1", "--input-len", "32", "--output-len", "16"]


def test_a_bench_run_parses_its_settings_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[str] = []
    parse = BenchSettings.from_dict   # bound to the class before the counter replaces it

    def counted(cls: type[BenchSettings], data: dict[str, Any], where: str = "bench settings") -> BenchSettings:
        reads.append(where)
        return parse(data, where)

    monkeypatch.setattr(BenchSettings, "from_dict", classmethod(counted))
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    run = tmp_path / "run"
    bench = ("bench", "--host", "gpu", "-i", str(inv))
    first = run_cli(*bench, *TINY, "--out", str(run))
    assert first.exit_code == 0, first.output
    assert reads == ["specops bench"]
    assert (run / "results.jsonl").read_text().count("\n") == 1

    again = run_cli(*bench, "--resume", str(run))   # the run's own settings, from its manifest: read once too
    assert again.exit_code == 0, again.output
    assert reads == ["specops bench", "specops bench"]


def test_a_dotted_var_into_the_settings_names_the_options_instead(tmp_path: Path) -> None:
    """`bench` is the command's parsed settings, not a mapping a `--var bench.x=` edits: the
    refusal says so and points at the options, before anything runs."""
    inv = sim_inventory(tmp_path, {"connection": "local", "workdir": str(tmp_path / "w")})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *TINY, "--out", str(tmp_path / "run"),
                  "--var", "bench.num_prompts=5")
    assert res.exit_code == 2, res.output
    assert "--var bench.num_prompts: 'bench' holds the command's own settings" in res.output
    assert "specops bench --help" in res.output and not (tmp_path / "w" / ".specops").exists()


@pytest.mark.parametrize("where", ["vars", "host"])
def test_a_bench_mapping_in_the_inventory_is_refused_not_ignored(tmp_path: Path, where: str) -> None:
    """A `bench:` mapping in hosts.yaml (the inventory's vars or a host's) was silently replaced
    by the command's settings: a user's `num_prompts: 5` there measured the default instead.
    The run is refused naming the file, the host and the options, before anything runs."""
    entry: dict[str, Any] = {"connection": "local", "workdir": str(tmp_path / "w")}
    if where == "host":
        entry["vars"] = {"bench": {"num_prompts": 5}}
        inv = sim_inventory(tmp_path, entry)
    else:
        inv = sim_inventory(tmp_path, entry, bench={"num_prompts": 5})
    res = run_cli("bench", "--host", "gpu", "-i", str(inv), *TINY, "--out", str(tmp_path / "run"))
    assert res.exit_code == 2, res.output
    assert str(inv) in res.output and "host gpu" in res.output
    assert "vars.bench" in res.output and "specops bench --help" in res.output
    assert not (tmp_path / "w" / ".specops").exists() and not (tmp_path / "run").exists()
