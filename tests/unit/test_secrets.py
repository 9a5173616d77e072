"""Secrets are read from this machine, never written in clear, and masked everywhere."""

from __future__ import annotations

import json
import subprocess

import pytest

from specops.errors import ConfigError
from specops.secrets import MASK, env_file_text, loader_argv, looks_secret, parse_sources, redact, remember


def test_sources_read_from_env_and_file(tmp_path, monkeypatch):
    token_file = tmp_path / "hf_token"
    token_file.write_text("hf_fileTokenValue123\n")
    monkeypatch.setenv("MY_HF", "hf_envTokenValue456")
    sources = parse_sources({"HF_TOKEN": {"env": "MY_HF"}, "OTHER_KEY": {"file": str(token_file)}}, "hosts.yaml:3")
    assert sources["HF_TOKEN"].read() == "hf_envTokenValue456"
    assert sources["OTHER_KEY"].read() == "hf_fileTokenValue123"
    # once read, the values are masked in anything specops prints or writes
    assert redact("token hf_envTokenValue456 and hf_fileTokenValue123.") == f"token {MASK} and {MASK}."


@pytest.mark.parametrize("node, message", [
    ({"HF_TOKEN": "hf_literal"}, "must be {env: LOCAL_VARIABLE} or {file: LOCAL_PATH}, never the value itself"),
    ({"HF_TOKEN": {"env": "A", "file": "b"}}, "must be {env: LOCAL_VARIABLE}"),
    ({"bad name": {"env": "A"}}, "'bad name' is not an environment variable name"),
    ({"HF_TOKEN": {"env": ""}}, "secrets.HF_TOKEN.env must be a non-empty string"),
])
def test_bad_secret_specs_are_clear_errors(node, message):
    with pytest.raises(ConfigError) as err:
        parse_sources(node, "hosts.yaml:7")
    assert message in err.value.message and err.value.where == "hosts.yaml:7"


def test_missing_variable_or_file_is_an_error_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("NOPE_TOKEN_VAR", raising=False)
    src = parse_sources({"HF_TOKEN": {"env": "NOPE_TOKEN_VAR"}}, "hosts.yaml:2")["HF_TOKEN"]
    with pytest.raises(ConfigError, match="environment variable NOPE_TOKEN_VAR is not set on this machine"):
        src.read()
    src = parse_sources({"HF_TOKEN": {"file": str(tmp_path / "absent")}}, "hosts.yaml:2")["HF_TOKEN"]
    with pytest.raises(ConfigError, match="cannot read .*absent"):
        src.read()


def test_redact_masks_secret_looking_names_in_mappings_and_command_lines():
    env = {"HF_TOKEN": "abc-not-registered", "CUDA_VISIBLE_DEVICES": "0,1", "WANDB_API_KEY": "k-123456"}
    assert redact(env) == {"HF_TOKEN": MASK, "CUDA_VISIBLE_DEVICES": "0,1", "WANDB_API_KEY": MASK}
    line = "env CUDA_VISIBLE_DEVICES=0 HF_TOKEN=hf_abcdef 'MY_SECRET=x y' python -m sglang.launch_server"
    # a quoted assignment is masked to the end of its word: the value is "x y", all of it
    assert redact(line) == f"env CUDA_VISIBLE_DEVICES=0 HF_TOKEN={MASK} 'MY_SECRET={MASK}' python -m sglang.launch_server"
    # a host's ssh `key:` is a path, not a secret
    assert redact({"key": "~/.ssh/id_ed25519"}) == {"key": "~/.ssh/id_ed25519"}
    nested = {"arms": [{"env": {"HF_TOKEN": "zzz"}, "cmd": "HF_TOKEN=zzz run"}]}
    assert json.dumps(redact(nested)).count(MASK) == 2 and "zzz" not in json.dumps(redact(nested))


def test_known_values_are_masked_inside_any_text_and_bytes():
    remember("sk-live-0123456789")
    assert redact(b"Authorization: Bearer sk-live-0123456789\n") == f"Authorization: Bearer {MASK}\n".encode()
    assert redact(("a", "xsk-live-0123456789y")) == ("a", f"x{MASK}y")
    remember("ab")  # too short to mask inside ordinary text
    assert redact("abc") == "abc"
    assert looks_secret("HF_TOKEN") and not looks_secret("hf_token_path_lower") and not looks_secret("PATH")


def test_loader_puts_values_in_the_environment_not_in_argv(tmp_path):
    env_file = tmp_path / "secrets.env"
    env_file.write_text(env_file_text({"HF_TOKEN": "it's $(not) run", "B_KEY": "v"}))
    env_file.chmod(0o600)
    second = tmp_path / "arm.env"
    second.write_text(env_file_text({"B_KEY": "w", "C": "3"}))  # a later file wins
    out = subprocess.run(loader_argv(str(env_file), str(second)) +
                         ["bash", "-c", 'printf "%s|%s|%s" "$HF_TOKEN" "$B_KEY" "$C"'],
                         capture_output=True, text=True, check=True).stdout
    assert out == "it's $(not) run|w|3"
    missing = subprocess.run(loader_argv(str(tmp_path / "absent")) + ["true"], capture_output=True)
    assert missing.returncode == 111
    assert all("not) run" not in a for a in loader_argv(str(env_file)))


def test_secret_words_stand_alone_and_booleans_are_never_masked():
    """Real SGLang's CPU arms set TOKENIZERS_PARALLELISM=false: its name holds TOKEN but no
    secret, and masking "false" would hide every "false" in every log specops writes."""
    from specops.secrets import looks_secret, redact, remember

    assert all(looks_secret(n) for n in ("HF_TOKEN", "OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY", "API_KEYS"))
    assert not any(looks_secret(n) for n in ("TOKENIZERS_PARALLELISM", "KEYBOARD_LAYOUT", "MONKEY"))
    remember("false")
    remember("12345")
    assert redact("enable=false port=12345") == "enable=false port=12345"
    assert redact("TOKENIZERS_PARALLELISM=false HF_TOKEN=hf_abcdef") == "TOKENIZERS_PARALLELISM=false HF_TOKEN=***"
    assert redact({"HF_TOKEN": "hf_abcdef", "X_TOKEN": "true"}) == {"HF_TOKEN": "***", "X_TOKEN": "true"}
