"""Session fixtures of the real_sglang tier: the cached runtime venvs and the tiny models
(tests/support/real_sglang builds both once per machine, under a lock, so both xdist
workers may ask)."""

from __future__ import annotations

import pytest

from tests.support.real_sglang.models import TinyModels, ensure_models
from tests.support.real_sglang.runtime import Runtime, RuntimeBuildError, ensure_runtime


@pytest.fixture(scope="session")
def real_runtime() -> Runtime:
    """The runtime venv (torch + SGLang's dependencies, no sglang); built if missing (~4-9 min)."""
    try:
        return ensure_runtime()
    except RuntimeBuildError as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture(scope="session")
def tiny_models(real_runtime: Runtime) -> TinyModels:
    """Tiny Llama target, its EAGLE-3 head, a bad draft and a ShareGPT file; made if missing."""
    try:
        return ensure_models()
    except RuntimeBuildError as exc:
        pytest.fail(str(exc), pytrace=False)
