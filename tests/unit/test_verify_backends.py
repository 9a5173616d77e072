"""The adaptive set's attention-backend check, on every release tree it applies to (issue 28).

On real SGLang the one-token verify aborted with heap corruption when the backend sized it
for --speculative-num-draft-tokens per request. The set's verify reads, in each release's
source, that triton, fa3 and flashinfer size it from a count the one-token verify makes 1;
here that reading runs on the real trees, and on copies edited the ways a release could
break it, which must fail naming the file, method and line.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from specops.errors import ConfigError
from specops.hostfiles.treefiles import LocalTreeFiles
from specops.patching.model import PatchError, parse_patchset
from specops.sglang.source import ensure_tree
from specops.sglang.verify_backends import ATTENTION_DIR, SPECULATIVE_DIR, SUPPORTED, check_tree, eagle_backends
from tests.support.sglang_trees import apply_set, copy_tree

#: every release the dynamic-spec-disable set applies to (applies_to: 0.4.10 - 0.5.13)
SET_RELEASES = ["0.4.10", "0.4.10.post2", "0.5.1", "0.5.2", "0.5.3", "0.5.4", "0.5.5", "0.5.6", "0.5.7",
                "0.5.8", "0.5.9", "0.5.10.post1", "0.5.11", "0.5.12", "0.5.13"]
TRITON = f"{ATTENTION_DIR}/triton_backend.py"
FA3 = f"{ATTENTION_DIR}/flashattention_backend.py"
INFO = f"{SPECULATIVE_DIR}/eagle_info.py"


@pytest.mark.parametrize("version", SET_RELEASES)
def test_each_supported_backend_sizes_its_verify_from_a_count_the_one_token_verify_sets(version):
    report = check_tree(LocalTreeFiles(ensure_tree(version)))
    assert report.ok, report.lines()
    how = {v.name: v.how for v in report.verdicts}
    assert how == {"triton": "twin", "fa3": "twin", "flashinfer": "per batch"}, report.lines()
    triton = next(v for v in report.verdicts if v.name == "triton")
    assert "num_draft_tokens" in triton.twin_attrs
    # everything else this release's EAGLE accepts is refused at launch by the set's guard
    assert set(report.refused) == set(report.accepted) - set(SUPPORTED)
    assert "flashmla" in report.refused


def test_the_backend_lists_follow_each_release():
    """0.4.10's `attention_backend == ...` branches, 0.5.x's backend_map dicts."""
    assert eagle_backends(LocalTreeFiles(ensure_tree("0.4.10.post2"))) == ["flashinfer", "triton", "fa3", "flashmla"]
    newer = eagle_backends(LocalTreeFiles(ensure_tree("0.5.10.post1")))
    assert {"fa4", "trtllm_mha", "aiter", "nsa"} <= set(newer) and "torch_native" not in newer


def _small_tree(tmp_path: Path, version: str = "0.5.10.post1") -> Path:
    """The files the check reads, copied from a real tree (to edit them)."""
    src = ensure_tree(version)
    for rel in (f"{SPECULATIVE_DIR}/draft_utils.py", f"{SPECULATIVE_DIR}/eagle_worker.py", INFO,
                *(f"{ATTENTION_DIR}/{f}" for f, _ in SUPPORTED.values())):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(src / rel, tmp_path / rel)
    return tmp_path


def _edit(tree: Path, rel: str, old: str, new: str, count: int = 1) -> None:
    path = tree / rel
    text = path.read_text()
    assert text.count(old) >= count, f"{rel}: {old!r} not found (the release changed; update the test)"
    path.write_text(text.replace(old, new, count))


def test_a_verify_setup_reading_the_servers_count_at_run_time_fails(tmp_path):
    tree = _small_tree(tmp_path)
    assert check_tree(LocalTreeFiles(tree)).ok
    # the verify branch of init_forward_metadata reads the shared server args (3 while the twin runs)
    _edit(tree, TRITON, "            max_extend_len = self.num_draft_tokens",
          "            max_extend_len = self.model_runner.server_args.speculative_num_draft_tokens")
    report = check_tree(LocalTreeFiles(tree))
    assert not report.ok
    (problem,) = report.problems
    assert problem.startswith(f"{TRITON}: TritonAttnBackend.init_forward_metadata reads "
                              "server_args.speculative_num_draft_tokens at run time (line "), problem


def test_a_process_wide_read_of_the_count_fails(tmp_path):
    tree = _small_tree(tmp_path)
    _edit(tree, FA3, "metadata.max_seq_len_q = self.speculative_num_draft_tokens",
          'metadata.max_seq_len_q = global_server_args_dict["speculative_num_draft_tokens"]')
    (problem,) = check_tree(LocalTreeFiles(tree)).problems
    assert "FlashAttentionBackend.init_forward_metadata reads the process-wide speculative_num_draft_tokens" in problem


def test_a_count_not_taken_from_the_server_args_fails(tmp_path):
    """A count fixed in __init__ is not one the twin can set."""
    tree = _small_tree(tmp_path)
    _edit(tree, TRITON, "self.num_draft_tokens = model_runner.server_args.speculative_num_draft_tokens",
          "self.num_draft_tokens = 3")
    (problem,) = check_tree(LocalTreeFiles(tree)).problems
    assert problem == (f"{TRITON}: TritonAttnBackend.init_forward_metadata's verify branch reads "
                       "self.num_draft_tokens, not set from server_args in __init__, so the one-token twin "
                       "cannot make it 1")


def test_a_per_batch_backend_whose_verify_input_reads_the_servers_count_fails(tmp_path):
    tree = _small_tree(tmp_path)
    _edit(tree, INFO, "        paged_kernel_lens = paged_kernel_lens + self.draft_token_num",
          "        paged_kernel_lens = paged_kernel_lens + get_global_server_args().speculative_num_draft_tokens")
    (problem,) = check_tree(LocalTreeFiles(tree)).problems
    assert problem == f"{INFO}: EagleVerifyInput.generate_attn_arg_prefill reads the server's speculative_num_draft_tokens"


def test_the_set_refuses_a_tree_whose_backend_fails_the_check_and_restores_every_file(tmp_path):
    tree = tmp_path / "sglang"
    copy_tree("0.5.10.post1", tree, committed=True)
    _edit(tree, TRITON, "            max_extend_len = self.num_draft_tokens",
          "            max_extend_len = self.model_runner.server_args.speculative_num_draft_tokens")
    subprocess.run(["git", "commit", "-qam", "edited"], cwd=tree, check=True)
    with pytest.raises(PatchError) as err:
        apply_set("dynamic-spec-disable", tree, python="python3", tree=str(tree), run_verify_cmds=True)
    assert "verify 'each supported attention backend sizes its verify from a count the one-token verify sets' " \
           "failed: problem: python/sglang/srt/layers/attention/triton_backend.py: TritonAttnBackend." in str(err.value)
    status = subprocess.run(["git", "status", "--porcelain"], cwd=tree, capture_output=True, text=True, check=True)
    assert status.stdout == ""  # every file put back, no state folder left


def test_the_check_passes_on_the_real_tree_and_is_reported(tmp_path):
    tree = tmp_path / "sglang"
    copy_tree("0.5.10.post1", tree)
    report = apply_set("dynamic-spec-disable", tree, python="python3", tree=str(tree), run_verify_cmds=True)
    first = report.verify[0]
    assert first.ok and first.command.startswith("# specops check eagle-attention-backends")
    assert "triton (TritonAttnBackend): ok" in first.stdout and "refused at launch" in first.stdout


def test_a_verify_entry_names_a_known_check_or_runs_a_command():
    base = "name: s\nedits:\n  - {name: e, file: a.py, op: delete, anchor: {text: x}}\nverify:\n"
    with pytest.raises(ConfigError, match=r"unknown check 'eagle-attention-backend' \(did you mean "
                                          r"'eagle-attention-backends'\?\)"):
        parse_patchset(base + "  - {check: eagle-attention-backend}\n", "set.yaml")
    with pytest.raises(ConfigError, match="exactly one of 'run'"):
        parse_patchset(base + "  - {check: eagle-attention-backends, run: [true]}\n", "set.yaml")
    ps = parse_patchset(base + "  - {check: eagle-attention-backends}\n", "set.yaml")
    assert ps.verify[0].check == "eagle-attention-backends" and ps.verify[0].run is None
