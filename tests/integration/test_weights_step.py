"""The `weights` step: local model directories, missing paths, and the Hub when it cannot be
reached. No network here, so the Hub is made unreachable on purpose (HF_ENDPOINT at a
closed loopback port, as a user behind a mirror would set it): the step must say so in
about a second, not hang. The Hub's own library runs for real (huggingface_hub from the
test extra, the environment's python playing the host's venv)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from specops.sim.testing import free_port
from tests.support.deploy import inventory, run_cli, write_yaml

pytest.importorskip("huggingface_hub")


def _run(tmp_path: Path, models: list[str], *extra: str, **env: str):
    inv = inventory(tmp_path, {"box": {"connection": "local", "workdir": str(tmp_path / "w")}})
    pb = write_yaml(tmp_path / "weights.yaml", {"steps": [{
        "name": "model weights",
        "weights": {"models": models, "python": sys.executable,
                    "env": {"HF_HOME": str(tmp_path / "hf"), **env}}}]})
    return run_cli("deploy", "--host", "box", "-i", str(inv), "-p", str(pb), "--runs-dir", str(tmp_path / "runs"), *extra)


def test_local_model_directory_with_config_is_verified(tmp_path):
    model = tmp_path / "models" / "llama"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    res = _run(tmp_path, [str(model)], "--json")
    assert res.exit_code == 0, res.output
    (step,) = json.loads(res.output)["hosts"]["box"]["steps"]
    assert (step["status"], step["detail"]) == ("skipped", "already verified")  # nothing to do: it is there


def test_missing_path_and_directory_without_config_are_named(tmp_path):
    res = _run(tmp_path, [str(tmp_path / "nope")])
    assert res.exit_code == 1
    assert f"model path {tmp_path / 'nope'} does not exist on box" in res.output
    empty = tmp_path / "empty"
    empty.mkdir()
    res = _run(tmp_path, [str(empty)])
    assert f"model path {empty} on box has no config.json (not a model directory)" in res.output


def test_unreachable_hub_is_said_at_once(tmp_path):
    started = time.monotonic()
    res = _run(tmp_path, ["meta-llama/Llama-3.1-8B-Instruct"], HF_ENDPOINT=f"http://127.0.0.1:{free_port()}")
    took = time.monotonic() - started
    assert res.exit_code == 1, res.output
    assert "cannot reach the Hugging Face Hub from box to fetch meta-llama/Llama-3.1-8B-Instruct" in res.output
    assert "no complete copy is cached there" in res.output
    assert took < 150, took  # planning is bounded; it never waits for a download that cannot start


@pytest.mark.parametrize("name", ["HF_TOKEN", "MIRROR_API_KEY"])
def test_the_hub_planning_script_masks_the_token_before_it_cuts_the_error(tmp_path, name):
    """The host-side script cuts a Hub error to 600 characters; the host's token is masked
    before that cut, since the controller cannot mask a token it receives only in part.
    (A repo id is echoed in the Hub's validation error: here the id carries the token.)
    Every secret of the environment is, not only the Hub's two names (issue 55)."""
    import subprocess

    from specops.servers.weights import PLAN_SCRIPT

    def detail(repo: str, token: str | None) -> str:
        env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin",
               **({name: token} if token else {})}
        out = subprocess.run([sys.executable, "-c", PLAN_SCRIPT, repo, "", "1"], capture_output=True, text=True,
                             env=env, timeout=120)
        line = next(ln for ln in out.stdout.splitlines() if ln.startswith("@@PLAN "))
        return str(json.loads(line[len("@@PLAN "):])["detail"])

    token = "hf_" + "T5wQ2nV8" * 4  # shares no piece with test_canary.py's value (see test_canary_scan)
    at = detail("MARK" + "x" * 200, None).index("MARK")  # where the error echoes the repo id
    repo = "x" * (600 - at - 10) + token  # the token straddles the 600-character cut
    unmasked = detail(repo, None)
    assert token[:10] in unmasked and token not in unmasked  # unmasked, the cut would leave a piece
    masked = detail(repo, token)
    assert "***" in masked
    assert not any(token[i:i + 8] in masked for i in range(len(token) - 7))
