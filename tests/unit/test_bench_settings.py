"""Bench settings: checked like every YAML file, and the default prompt count defined once."""

from __future__ import annotations

import pytest

from specops.bench.client import default_num_prompts
from specops.bench.settings import BenchSettings
from specops.errors import ConfigError


def test_default_prompt_count_is_the_clients() -> None:
    """The sweep and the client each computed max(4 x c, 16); the sweep now asks the client."""
    settings = BenchSettings.from_dict({"arms": ["baseline"], "concurrency": [1, 8, 64]})
    assert [settings.prompts_for(c) for c in (1, 3, 8, 64)] == [default_num_prompts(c) for c in (1, 3, 8, 64)]
    assert BenchSettings.from_dict({"num_prompts": 10}).prompts_for(64) == 10
    assert BenchSettings.from_dict({"prompts_per_level": 7}).prompts_for(1) == 7


@pytest.mark.parametrize("data, message", [
    ({"concurrency": [1, "2"]}, "specops bench: 'concurrency' in bench settings must be a list of ints, got [1, '2']"),
    ({"arms": "baseline"}, "specops bench: 'arms' in bench settings must be a list, got a string"),
    ({"keep_servers": "yes"}, "specops bench: 'keep_servers' in bench settings must be a boolean, got a string"),
    ({"num_prompts": 4, "prompts_per_level": 4}, "specops bench: give --num-prompts or --prompts-per-level, not both"),
    ({"repeats": 0}, "specops bench: --repeats must be at least 1"),
])
def test_bad_settings_name_the_setting(data: dict, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        BenchSettings.from_dict(data, where="specops bench")
    assert str(err.value) == message
