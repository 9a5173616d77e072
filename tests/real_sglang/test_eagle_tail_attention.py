"""The eagle-torch-native sets attend an EAGLE extend with its own queries only (issue 54).

torch_native's extend computes a full seq_len x seq_len attention for every request and keeps
the last rows. Measured on SGLang 0.5.14 at eight requests, that made the attention of a
drafting-off step (a one-token verify) 15% of the step against the baseline decode's 4%, so the
adaptive arm ran 0.85-0.91x of the baseline where it was not drafting at all. The sets'
`eagle_tail_extend` gives a verify and a draft extend one query per extend token. Here it runs in
each route's real runtime on a patched copy of the release's tree, against torch_native's own
extend and decode on random caches (tests/support/real_sglang/tail_attention_check.py).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.real_sglang import NEWER_ENGINES_GROUP, PATCH_ROUTE_GROUP
from tests.support.real_sglang.adaptive_check import patched_tree
from tests.support.real_sglang.runtime import HERE, ensure_runtime
from tests.support.real_sglang.server import server_env
from tests.support.standin import STANDIN_VERSION

pytestmark = [pytest.mark.real_sglang, pytest.mark.timeout(1800)]

CHECK = HERE / "tail_attention_check.py"
#: release -> its eagle-torch-native set
SETS = {STANDIN_VERSION: "eagle-torch-native", "0.5.14": "eagle-torch-native-v2"}
#: each release's case in the group of the runtime it runs (tests/support/real_sglang/__init__.py)
GROUPS = {STANDIN_VERSION: PATCH_ROUTE_GROUP, "0.5.14": NEWER_ENGINES_GROUP}
#: float32 attention over 4-40 keys: the two paths sum the same terms in another order
ATOL = 1e-5


@pytest.mark.parametrize("version", [pytest.param(v, marks=pytest.mark.xdist_group(GROUPS[v])) for v in sorted(SETS)])
def test_the_tail_attention_equals_torch_natives_extend_and_a_one_token_one_its_decode(version: str,
                                                                                   tmp_path: Path) -> None:
    python = ensure_runtime(version).python
    tree = patched_tree(version, tmp_path / "tree", python, SETS[version])
    proc = subprocess.run([str(python), str(CHECK)], env=server_env(tree), capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    for batch in ("verify", "draft-extend", "one-token"):
        assert out[batch]["taken"], (version, batch, out)
        assert out[batch]["max_abs_diff"] <= ATOL, (version, batch, out)
    assert out["one-token"]["equal_to_decode"], out
    assert out["prefill-left-alone"], out
