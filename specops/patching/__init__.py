"""Syntax-tree anchored patch sets for SGLang trees."""

from specops.patching.applier import (
    APPLIED,
    BLOCKED,
    NEW,
    EditResult,
    PatchPlan,
    PatchReport,
    apply,
    check_applicable,
    plan,
    revert,
    run_verify,
)
from specops.patching.model import PatchError, PatchSet, load_patchset, parse_patchset

__all__ = [
    "APPLIED", "BLOCKED", "NEW", "EditResult", "PatchPlan", "PatchReport", "apply", "check_applicable",
    "plan", "revert", "run_verify", "PatchError", "PatchSet", "load_patchset", "parse_patchset",
]
