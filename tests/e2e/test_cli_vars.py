"""Issue 12: `--var a.b.c=V` sets one nested value and keeps the rest; `bench --threshold N`."""

from __future__ import annotations

from pathlib import Path

from tests.support.deploy import inventory, run_cli, write_yaml

ARMS = {"baseline": {"port": 30001}, "eagle3": {"port": 30002}, "adaptive": {"port": 30003, "threshold": 8}}


def _setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    out = tmp_path / "seen.txt"
    inv = inventory(tmp_path, {"box": {"connection": "local", "engine": "sim", "workdir": str(tmp_path / "w")}},
                    {"arms": ARMS, "note": "plain"})
    pb = write_yaml(tmp_path / "show.yaml", {"name": "show", "steps": [{"name": "show arms", "shell": {
        "cmd": "echo {{ arms.adaptive.threshold }} {{ arms.adaptive.port }} {{ arms.baseline.port }} "
               "{{ arms | length }} > " + str(out)}}]})
    return inv, pb, out


def test_dotted_var_sets_one_value_and_keeps_the_rest(tmp_path: Path) -> None:
    inv, pb, out = _setup(tmp_path)
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "arms.adaptive.threshold=16",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    assert out.read_text().split() == ["16", "30003", "30001", "3"]


def test_mapping_var_merges_into_the_dict(tmp_path: Path) -> None:
    inv, pb, out = _setup(tmp_path)
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "arms={adaptive: {threshold: 4}}",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 0, res.output
    assert out.read_text().split() == ["4", "30003", "30001", "3"]


def test_dotted_var_into_a_scalar_or_unknown_name_is_an_error(tmp_path: Path) -> None:
    inv, pb, out = _setup(tmp_path)
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "note.x=1",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 2 and "'note' is str" in res.output and "not a mapping" in res.output, res.output
    res = run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--var", "arm.adaptive.threshold=3",
                  "--runs-dir", str(tmp_path / "runs"))
    assert res.exit_code == 2 and "no variable named 'arm'" in res.output and "did you mean 'arms'" in res.output
    assert not out.exists()


def test_bench_threshold_is_the_adaptive_arms(tmp_path: Path) -> None:
    inv, pb, out = _setup(tmp_path)
    res = run_cli("bench", "--host", "box", "-i", str(inv), "-p", str(pb), "--threshold", "32",
                  "--runs-dir", str(tmp_path / "runs"))
    assert out.read_text().split() == ["32", "30003", "30001", "3"], res.output
