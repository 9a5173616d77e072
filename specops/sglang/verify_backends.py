"""Which attention backends a release runs EAGLE with, and where each one's TARGET_VERIFY
step gets its tokens-per-request count: read from the tree's source with `ast`.

Why: the adaptive patch's one-token verify ("trivial verify", one token per request) must
not run through metadata sized for `--speculative-num-draft-tokens` per request. Real
SGLang aborted with heap corruption when it did (triton's qo_indptr, mask and
max_extend_len assumed 3 tokens against a 1-token input). The set runs that verify through
a twin of the target's backend built while speculative_num_draft_tokens reads 1, so a
backend is safe when every count it sizes the verify with is either

- `twin`: an attribute its `__init__` sets from `server_args.speculative_num_draft_tokens`
  (or `speculative_eagle_topk`), which the twin reads as 1; or
- `per batch`: the batch's own `draft_token_num` (through `spec_info`), which is 1 for the
  one-token input,

and it never reads the server's count anywhere else (the shared server args and
`global_server_args_dict` keep the real value while the twin runs).

The set checks these facts for the backends it supports (SUPPORTED) in the tree it patched,
and refuses every other backend at launch (`specops_backend_problem` in the set's text).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from specops import pysource
from specops.hostfiles.treefiles import TreeFiles

ATTENTION_DIR = "python/sglang/srt/layers/attention"
SPECULATIVE_DIR = "python/sglang/srt/speculative"
#: where a release lists the backends its EAGLE worker accepts: a `backend_map` dict
#: (0.5.2+) or `attention_backend == "name"` branches (0.4.10 - 0.5.1)
EAGLE_BACKEND_LISTS = (f"{SPECULATIVE_DIR}/draft_utils.py", f"{SPECULATIVE_DIR}/eagle_worker.py",
                       f"{SPECULATIVE_DIR}/eagle_worker_v2.py")
#: the verify input whose `generate_attn_arg_prefill` a per-batch backend calls
VERIFY_INPUT_FILES = (f"{SPECULATIVE_DIR}/eagle_info.py", f"{SPECULATIVE_DIR}/eagle_utils.py")
VERIFY_INPUT_CLASS = "EagleVerifyInput"

#: backend name -> (file under ATTENTION_DIR, class): the backends the set makes correct
SUPPORTED = {
    "triton": ("triton_backend.py", "TritonAttnBackend"),
    "fa3": ("flashattention_backend.py", "FlashAttentionBackend"),
    "flashinfer": ("flashinfer_backend.py", "FlashInferAttnBackend"),
}
#: server args a twin is built with at 1
TWIN_ARGS = ("speculative_num_draft_tokens", "speculative_eagle_topk")
COUNT_ARG = "speculative_num_draft_tokens"
PER_BATCH_NAMES = ("draft_token_num", "spec_info")
#: words in the name of an attribute that holds a verify's size
COUNT_WORDS = ("draft_token", "num_draft", "topk")


@dataclass
class BackendVerdict:
    """What the source says of one backend's TARGET_VERIFY sizing in one release."""

    name: str
    cls: str
    ok: bool
    how: str  # "twin" | "per batch" | "" (not ok)
    detail: str
    twin_attrs: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.name} ({self.cls}): {'ok' if self.ok else 'NOT OK'}, {self.detail}"


@dataclass
class BackendReport:
    """Every EAGLE backend of a release: the supported ones checked, the rest refused."""

    accepted: list[str]
    verdicts: list[BackendVerdict]
    problems: list[str]

    @property
    def refused(self) -> list[str]:
        return [name for name in self.accepted if name not in SUPPORTED]

    @property
    def ok(self) -> bool:
        return not self.problems

    def lines(self) -> list[str]:
        out = [v.line() for v in self.verdicts]
        if self.refused:
            out.append(f"refused at launch with a threshold (not made correct by the set): {', '.join(self.refused)}")
        return out + [f"problem: {p}" for p in self.problems]


def _parse(files: TreeFiles, rel: str) -> ast.Module | None:
    data = files.read(rel)
    if data is None:
        return None
    return pysource.parse(data.decode("utf-8", errors="replace"), rel)


def eagle_backends(files: TreeFiles) -> list[str]:
    """The attention backends this release's EAGLE worker accepts, in source order."""
    names: list[str] = []

    def add(value: object) -> None:
        if isinstance(value, str) and value not in names:
            names.append(value)

    for rel in EAGLE_BACKEND_LISTS:
        tree = _parse(files, rel)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) and any(
                    isinstance(t, ast.Name) and t.id == "backend_map" for t in node.targets):
                for key in node.value.keys:
                    add(key.value if isinstance(key, ast.Constant) else None)
            elif isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute) \
                    and node.left.attr == "attention_backend" and isinstance(node.ops[0], ast.Eq):
                add(node.comparators[0].value if isinstance(node.comparators[0], ast.Constant) else None)
    return names


def _find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _is_server_arg(node: ast.AST, arg: str) -> bool:
    """`<...>.server_args.<arg>` (a read of the server's own value)."""
    return (isinstance(node, ast.Attribute) and node.attr == arg and isinstance(node.value, ast.Attribute)
            and node.value.attr == "server_args")


def _global_reads(node: ast.AST, arg: str) -> list[int]:
    """Lines that read `arg` from the process-wide server args (`global_server_args_dict[arg]`,
    `get_global_server_args().arg`): they keep the server's value while a twin runs."""
    lines = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Subscript) and isinstance(sub.slice, ast.Constant) and sub.slice.value == arg:
            lines.append(sub.lineno)
        elif isinstance(sub, ast.Attribute) and sub.attr == arg and isinstance(sub.value, ast.Call) \
                and "global" in ast.unparse(sub.value.func):
            lines.append(sub.lineno)
    return lines


def _twin_attrs(init: ast.AST) -> list[str]:
    """`self.X` that __init__ sets from a server arg the twin reads as 1 (directly, or from a
    parenthesised/conditional expression holding it)."""
    attrs: list[str] = []
    for node in ast.walk(init):
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = node.value
            if value is None or not any(_is_server_arg(sub, a) for sub in ast.walk(value) for a in TWIN_ARGS):
                continue
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self":
                    attrs.append(t.attr)
    return attrs


def _verify_branches(method: ast.AST) -> list[ast.If]:
    """The `if ...is_target_verify():` branches of a method."""
    return [n for n in ast.walk(method) if isinstance(n, ast.If) and any(
        isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute) and c.func.attr == "is_target_verify"
        for c in ast.walk(n.test))]


def _count_like_self_reads(stmts: list[ast.stmt]) -> set[str]:
    """`self.X` reads whose name says they hold a per-request token count or the tree's width
    (num_draft_tokens, speculative_num_draft_tokens, topk, ...)."""
    return {sub.attr for stmt in stmts for sub in ast.walk(stmt)
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self"
            and any(word in sub.attr for word in COUNT_WORDS)}


def _names_in(stmts: list[ast.stmt]) -> set[str]:
    out: set[str] = set()
    for stmt in stmts:
        for sub in ast.walk(stmt):
            if isinstance(sub, ast.Attribute):
                out.add(sub.attr)
            elif isinstance(sub, ast.Name):
                out.add(sub.id)
            elif isinstance(sub, ast.keyword) and sub.arg:
                out.add(sub.arg)
    return out


def _runtime_count_problem(clsname: str, methods: dict[str, ast.FunctionDef | ast.AsyncFunctionDef],
                           twin: list[str]) -> str | None:
    """A read of the server's count the twin does not change: the process-wide args anywhere,
    `server_args.<count>` outside __init__, or a twin attribute reassigned after it."""
    for method_name, method in methods.items():
        for line in _global_reads(method, COUNT_ARG):
            return (f"{clsname}.{method_name} reads the process-wide {COUNT_ARG} (line {line}), "
                    "which stays at the server's value while the one-token twin runs")
        if method_name == "__init__":
            continue
        for sub in ast.walk(method):
            if _is_server_arg(sub, COUNT_ARG):
                return (f"{clsname}.{method_name} reads server_args.{COUNT_ARG} at run time "
                        f"(line {getattr(sub, 'lineno', '?')}), not from its own attribute")
            targets = sub.targets if isinstance(sub, ast.Assign) else [sub.target] if isinstance(sub, ast.AugAssign) else []
            for t in targets:
                if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self" \
                        and t.attr in twin:
                    return (f"{clsname}.{method_name} reassigns self.{t.attr} (line {t.lineno}), "
                            "so the twin's 1 may not hold")
    return None


def check_backend(files: TreeFiles, name: str) -> BackendVerdict:
    """The verdict for one supported backend in this tree."""
    filename, clsname = SUPPORTED[name]
    rel = f"{ATTENTION_DIR}/{filename}"

    def bad(detail: str) -> BackendVerdict:
        return BackendVerdict(name, clsname, False, "", f"{rel}: {detail}")

    tree = _parse(files, rel)
    if tree is None:
        return bad("file not in the tree")
    cls = _find_class(tree, clsname)
    if cls is None:
        return bad(f"no class {clsname}")
    methods = _methods(cls)
    init = methods.get("__init__")
    if init is None:
        return bad(f"{clsname} has no __init__")
    twin = _twin_attrs(init)
    problem = _runtime_count_problem(clsname, methods, twin)
    if problem:
        return bad(problem)
    setup = methods.get("init_forward_metadata")
    if setup is None:
        return bad(f"{clsname} has no init_forward_metadata")
    branches = _verify_branches(setup)
    if not branches:
        return bad(f"{clsname}.init_forward_metadata has no is_target_verify() branch")
    body = [stmt for b in branches for stmt in b.body]
    untwinned = sorted(_count_like_self_reads(body) - set(twin))
    if untwinned:
        return bad(f"{clsname}.init_forward_metadata's verify branch reads self.{', self.'.join(untwinned)}, "
                   "not set from server_args in __init__, so the one-token twin cannot make it 1")
    used = _names_in(body)
    via_twin = sorted(used & set(twin))
    via_batch = sorted(used & set(PER_BATCH_NAMES))
    if via_twin:
        return BackendVerdict(name, clsname, True, "twin",
                              f"verify sized by self.{', self.'.join(via_twin)} (set from server_args in "
                              "__init__; the one-token twin is built with 1)", twin)
    if via_batch:
        return BackendVerdict(name, clsname, True, "per batch",
                              "verify sized from the batch's spec_info (draft_token_num is 1 for the "
                              "one-token input)", twin)
    return bad(f"{clsname}.init_forward_metadata's verify branch reads neither a count set in __init__ "
               "nor the batch's spec_info")


def _verify_input_problem(files: TreeFiles) -> str | None:
    """A per-batch backend sizes the verify through EagleVerifyInput.generate_attn_arg_prefill:
    it must take the count from the input itself (self.draft_token_num)."""
    for rel in VERIFY_INPUT_FILES:
        tree = _parse(files, rel)
        cls = _find_class(tree, VERIFY_INPUT_CLASS) if tree is not None else None
        if cls is None:
            continue
        method = _methods(cls).get("generate_attn_arg_prefill")
        if method is None:
            return f"{rel}: {VERIFY_INPUT_CLASS} has no generate_attn_arg_prefill"
        if _global_reads(method, COUNT_ARG) or any(_is_server_arg(s, COUNT_ARG) for s in ast.walk(method)):
            return f"{rel}: {VERIFY_INPUT_CLASS}.generate_attn_arg_prefill reads the server's {COUNT_ARG}"
        if "draft_token_num" not in _names_in(method.body):
            return f"{rel}: {VERIFY_INPUT_CLASS}.generate_attn_arg_prefill does not read self.draft_token_num"
        return None
    return f"no {VERIFY_INPUT_CLASS} in {' or '.join(VERIFY_INPUT_FILES)}"


def check_tree(files: TreeFiles) -> BackendReport:
    """Every EAGLE backend of the tree: each supported one the release accepts, checked."""
    accepted = eagle_backends(files)
    problems: list[str] = []
    if not accepted:
        problems.append(f"no EAGLE attention backend list found in {', '.join(EAGLE_BACKEND_LISTS)}")
    verdicts = [check_backend(files, name) for name in SUPPORTED if name in accepted]
    problems += [v.detail for v in verdicts if not v.ok]
    if any(v.ok and v.how == "per batch" for v in verdicts):
        why = _verify_input_problem(files)
        if why:
            problems.append(why)
    return BackendReport(accepted, verdicts, problems)
