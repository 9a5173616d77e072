"""Model weights on the host before any server starts.

Left to SGLang, a Hub model is downloaded inside the readiness wait, three arms at once,
and a missing token shows up minutes later as a crash. Here each model is settled first:
a local path must hold a `config.json`; a Hub id is planned with the Hub's own library
(which files are missing, how many bytes), checked against the free disk of the host's
Hugging Face cache, downloaded with the Hub's CLI, and verified by planning again. The
host-side script runs with the environment's python and prints one JSON line, which
`parse_plan` reads: the script and its parser live side by side.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from specops.secrets import SECRET_NAME

#: A Hub id is `org/name` (or a bare name); anything that looks like a path is a path.
PATH_PREFIXES = ("/", "~", "./", "../")

PLAN_SCRIPT = r"""
import json, os, shutil, sys
repo, rev, offline = sys.argv[1], sys.argv[2] or None, sys.argv[3] == "1"
out = {"repo": repo}
try:
    import huggingface_hub as h
    from huggingface_hub import constants
except ImportError as exc:
    print(json.dumps({"repo": repo, "error": "no-hub", "detail": str(exc)})); sys.exit(0)
out["hub_version"] = h.__version__
cache = constants.HF_HUB_CACHE
d = cache
while not os.path.exists(d) and d not in ("/", ""):
    d = os.path.dirname(d)
out["cache"], out["free_bytes"] = cache, shutil.disk_usage(d or "/").free

def chain(exc):
    seen = []
    while exc is not None and exc not in seen:
        seen.append(exc)
        exc = exc.__cause__ or exc.__context__
    return seen

def classify(exc):
    names = set()
    for e in chain(exc):
        names.update(t.__name__ for t in type(e).__mro__)
    status = None
    for e in chain(exc):
        status = status or getattr(getattr(e, "response", None), "status_code", None)
    if "GatedRepoError" in names or status in (401, 403):
        return "gated"
    if "RepositoryNotFoundError" in names or "RevisionNotFoundError" in names or status == 404:
        return "not-found"
    if "LocalEntryNotFoundError" in names and offline:
        return "not-cached"
    return "unreachable"

try:
    if offline:
        out["path"] = h.snapshot_download(repo, revision=rev, local_files_only=True)
        out["files"] = []
    else:
        try:
            infos = h.snapshot_download(repo, revision=rev, dry_run=True)
            out["files"] = [{"name": i.filename, "size": i.file_size, "download": bool(i.will_download)}
                            for i in infos]
        except TypeError:  # huggingface_hub without dry runs: ask for the file list, look in the cache
            info = h.HfApi().model_info(repo, revision=rev, files_metadata=True)
            out["files"] = [{"name": s.rfilename, "size": s.size,
                             "download": not isinstance(h.try_to_load_from_cache(repo, s.rfilename, revision=rev), str)}
                            for s in info.siblings or []]
except Exception as exc:
    detail = type(exc).__name__ + ": " + str(exc)
    import re  # every secret of the environment masked here, before the cut, not after it
    secret = re.compile(@@SECRET_NAME@@)
    for value in sorted((v for k, v in os.environ.items() if secret.search(k) and len(v) >= 4), key=len, reverse=True):
        detail = detail.replace(value, "***")
    out["error"], out["detail"] = classify(exc), detail[:600]
print("@@PLAN " + json.dumps(out))
""".replace("@@SECRET_NAME@@", repr(SECRET_NAME.pattern))

DOWNLOAD_SCRIPT = r"""
bin=$(dirname -- "$1"); shift
if [ -x "$bin/hf" ]; then exec "$bin/hf" download "$@"; fi
if [ -x "$bin/huggingface-cli" ]; then exec "$bin/huggingface-cli" download "$@"; fi
echo "neither hf nor huggingface-cli next to $bin/python: install huggingface_hub in that environment" >&2
exit 127
"""


def is_local_path(model: str) -> bool:
    return model.startswith(PATH_PREFIXES)


def plan_argv(python: str, repo: str, revision: str | None = None, *, offline: bool = False) -> list[str]:
    return [python, "-c", PLAN_SCRIPT, repo, revision or "", "1" if offline else "0"]


def download_argv(python: str, repo: str, revision: str | None = None) -> list[str]:
    """The Hub's own CLI from the same environment (hf, or huggingface-cli where older)."""
    argv = ["bash", "-c", DOWNLOAD_SCRIPT, "download", python, repo]
    return argv + (["--revision", revision] if revision else [])


def config_probe_argv(path: str) -> list[str]:
    """Prints `dir`, `config` or `missing` for a local model path."""
    script = 'if [ -f "$1/config.json" ]; then echo config; elif [ -d "$1" ]; then echo dir; else echo missing; fi'
    return ["bash", "-c", script, "probe", path]


@dataclass
class HubPlan:
    repo: str
    files: list[dict[str, Any]] = field(default_factory=list)
    free_bytes: int | None = None
    cache: str = ""
    error: str = ""   # "", "gated", "not-found", "unreachable", "not-cached", "no-hub", "bad-output"
    detail: str = ""
    path: str = ""

    @property
    def missing(self) -> list[dict[str, Any]]:
        return [f for f in self.files if f.get("download")]

    @property
    def missing_bytes(self) -> int | None:
        sizes = [f.get("size") for f in self.missing]
        return None if any(s is None for s in sizes) else sum(int(s or 0) for s in sizes)

    @property
    def complete(self) -> bool:
        return not self.error and not self.missing


def parse_plan(repo: str, stdout: str, stderr: str = "") -> HubPlan:
    line = next((ln for ln in stdout.splitlines() if ln.startswith("@@PLAN ")), None)
    if line is None:
        tail = (stderr or stdout).strip().splitlines()[-3:]
        return HubPlan(repo, error="bad-output", detail=" ".join(tail) or "no output")
    data = json.loads(line[len("@@PLAN "):])
    return HubPlan(repo, files=list(data.get("files") or []), free_bytes=data.get("free_bytes"),
                   cache=str(data.get("cache") or ""), error=str(data.get("error") or ""),
                   detail=str(data.get("detail") or ""), path=str(data.get("path") or ""))


def explain(plan: HubPlan, host: str) -> str:
    """One line a user can act on, for a plan that cannot proceed."""
    if plan.error == "gated":
        return (f"model {plan.repo} is gated: accept its licence on the Hub and provide HF_TOKEN through "
                f"`secrets` in hosts.yaml ({plan.detail.splitlines()[0] if plan.detail else 'HTTP 401/403'})")
    if plan.error == "not-found":
        return f"model {plan.repo} does not exist on the Hub (or is private: provide HF_TOKEN through `secrets`)"
    if plan.error == "unreachable":
        return (f"cannot reach the Hugging Face Hub from {host} to fetch {plan.repo}, and no complete copy is "
                f"cached there: {plan.detail}")
    if plan.error == "no-hub":
        return f"huggingface_hub is not installed in the environment on {host}: {plan.detail}"
    return f"cannot plan the download of {plan.repo} on {host}: {plan.error} {plan.detail}".strip()


def disk_problem(plan: HubPlan, host: str, headroom: float = 1.05) -> str:
    """A refusal when the cache's disk cannot hold what is missing (with 5% headroom)."""
    need = plan.missing_bytes
    if need is None or plan.free_bytes is None or need * headroom <= plan.free_bytes:
        return ""
    gib = 1024 ** 3
    return (f"model {plan.repo} needs {need / gib:.1f} GiB more in {plan.cache} on {host}; "
            f"{plan.free_bytes / gib:.1f} GiB free there")
