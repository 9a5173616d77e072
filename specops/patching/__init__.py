"""Syntax-tree anchored patch sets for SGLang trees, and SGLang layout detection."""

from specops.patching.engine import (
    APPLIED, BLOCKED, NEW, EditResult, PatchPlan, PatchReport, apply, check_applicable, plan, revert,
    run_verify,
)
from specops.patching.files import LocalTreeFiles, TransportTreeFiles, TreeFiles
from specops.patching.layout import SGLangLayout, detect_layout, layout_summary
from specops.patching.model import PatchError, PatchSet, load_patchset, parse_patchset

__all__ = [
    "APPLIED", "BLOCKED", "NEW", "EditResult", "PatchPlan", "PatchReport", "apply", "check_applicable",
    "plan", "revert", "run_verify", "LocalTreeFiles", "TransportTreeFiles", "TreeFiles", "SGLangLayout",
    "detect_layout", "layout_summary", "PatchError", "PatchSet", "load_patchset", "parse_patchset",
]
