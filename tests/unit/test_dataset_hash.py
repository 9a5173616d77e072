"""The manifest's dataset hash fingerprints the prompts themselves: random prompts are token
ids with no text, so a hash of the texts alone would call two different workloads the same
(and `tune` would reuse a run measured on other prompts)."""

from __future__ import annotations

import pytest

from specops.bench import client
from specops.bench.settings import BenchSettings, dataset_hash


def test_the_hash_changes_with_the_prompt_ids_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = BenchSettings.from_dict({"dataset": "random", "seed": 3, "input_len": 16, "output_len": 8})
    assert all(p.ids is not None for p in client.make_prompts(2, input_len=16, output_len=8, seed=3))
    before = dataset_hash(settings)
    assert dataset_hash(settings) == before  # the same prompts, the same hash
    monkeypatch.setattr(client, "RANDOM_ID_LO", client.RANDOM_ID_LO + 1)
    assert dataset_hash(settings) != before
