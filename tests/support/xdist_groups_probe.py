"""A pytest plugin for tests/unit/test_real_tier_runtimes.py: at the end of collection, one line
per item, `GROUPS <nodeid> <group,group...>`, the xdist_group marks it carries (module, class,
parameter and fixture-parameter marks alike, as xdist's loadgroup reads them)."""

from __future__ import annotations

import pytest


def pytest_collection_finish(session: pytest.Session) -> None:
    for item in session.items:
        groups = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group")})
        print(f"GROUPS {item.nodeid} {','.join(groups)}")
