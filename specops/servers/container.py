"""SGLang's container image as the runtime: each arm a container of `sglang_image`.

The image carries torch, sgl-kernel and flashinfer builds that match each other; the
patched checkout is bind-mounted over the image's own `sglang` package, so the patch is
what runs. A launch plan stays the plan the venv route builds (same argv, same checks
against the tree's parser); `adapt_plan` only records how to wrap it, and
`run_argv` turns it into `podman|docker run ...`. The container's client runs attached,
detached from the session (`setsid nohup`, as every arm), with its output in the arm's log:
the one readiness watch, crash detection, `logs` and `status` read it unchanged, and a
container that dies ends its client, which is what the watch sees.

Environment and secrets: never `-e VALUE`, and never `--env-file` either, because a
container's configured environment is printed by `podman inspect` / `docker inspect`
(Config.Env), secrets included. The arm's two 0600 env files (the same ones the venv route
sources) are read inside the container by a few lines of python that then exec the server,
so no value is on any command line or in the container's configuration.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import asdict, dataclass, replace
from typing import Any, Sequence

from specops.config.inventory import CONTAINER_RUNTIMES, container_var_problem
from specops.engines import engine_named
from specops.errors import ConfigError, StepError
from specops.hostfiles import paths
from specops.servers.remote import q
from specops.sglang.paths import PKG
from specops.transport.base import Transport

RUNTIMES = CONTAINER_RUNTIMES
#: the python every SGLang image has on PATH; servers and probes run with it
CONTAINER_PYTHON = "python3"
_TIMEOUT = 120.0
#: reads the env files named before `--` (shell-quoted `K=V` lines, as secrets.env_file_text
#: writes them) into the environment, then execs the rest: values stay off every argv
LOADER = ("import os, shlex, sys\n"
          "i = sys.argv.index('--')\n"
          "for f in sys.argv[2:i]:  # argv[1]: the label ps shows\n"
          "    for tok in shlex.split(open(f).read()):\n"
          "        k, _, v = tok.partition('=')\n"
          "        os.environ[k] = v\n"
          "os.execvp(sys.argv[i + 1], sys.argv[i + 1:])\n")
#: run inside the image: where `sglang` resolves (without importing it: its __init__ needs
#: the whole runtime) and the hashes of the files that prove which tree that is
PROBE = r"""
import hashlib, importlib.util, os, sys
spec = importlib.util.find_spec("sglang")
locs = list(spec.submodule_search_locations or []) if spec else []
print("@@PY %d.%d" % sys.version_info[:2])
print("@@DIR " + (os.path.realpath(locs[0]) if locs else ""))
for rel in sys.argv[1:]:
    p = os.path.join(locs[0], rel) if locs else ""
    if p and os.path.isfile(p):
        print("@@HASH %s %s" % (hashlib.sha256(open(p, "rb").read()).hexdigest(), rel))
"""
#: files of the package compared between the tree and what the container sees
PROOF_FILES = ("version.py", "_version.py", "srt/server_args.py")


@dataclass(frozen=True)
class ContainerSettings:
    """`sglang_image` and `container_runtime` (None: podman, else docker, as the host has them)."""

    image: str
    runtime: str | None = None

    @classmethod
    def from_vars(cls, variables: dict[str, Any], where: str = "vars") -> "ContainerSettings | None":
        image = variables.get("sglang_image")
        if image in (None, ""):
            return None
        problem = image_problem(image) or runtime_problem(variables.get("container_runtime"))
        if problem:
            raise ConfigError(problem, where=where)
        runtime = variables.get("container_runtime")
        return cls(str(image), str(runtime) if runtime else None)


def image_problem(value: Any) -> str:
    """'' for a usable image reference, else what is wrong with it (config.inventory's rule)."""
    return container_var_problem("sglang_image", value)


def runtime_problem(value: Any) -> str:
    return container_var_problem("container_runtime", value)


def container_name(workdir: str, arm: str) -> str:
    """`specops-<workdir hash>-<arm>`: one name per host work directory and arm, so status,
    logs, stop and the leases of any later command find the same container."""
    digest = hashlib.sha256(workdir.encode()).hexdigest()[:10]
    return f"specops-{digest}-{re.sub(r'[^A-Za-z0-9_.-]', '-', arm)}"


# --- the image on the host ---------------------------------------------------------------

@dataclass
class ImageFacts:
    """What the host's runtime says of the image, and what the container sees of the tree."""

    runtime: str
    image: str
    image_id: str
    #: the registry digest (`name@sha256:...`) where the image came from a registry, else None
    digest: str | None
    #: where the image's own `sglang` package lives: the mount target for the tree
    sglang_dir: str
    python: str = ""

    def manifest(self) -> dict[str, Any]:
        """The manifest's `container` entry: the image as the run used it."""
        return image_record(asdict(self))


#: what a manifest keeps of an image: the same four fields wherever it is written
IMAGE_KEYS = ("runtime", "image", "image_id", "digest")


def image_record(box: dict[str, Any]) -> dict[str, Any]:
    """An arm's container record (or ImageFacts as a dict) as the manifest keeps it."""
    return {k: box.get(k) for k in IMAGE_KEYS}


_SCRIPT = r"""
rt="$1"; img="$2"; pkg="$3"; pull="$4"; probe="$5"; shift 5
if [ -z "$rt" ]; then for c in podman docker; do command -v "$c" >/dev/null 2>&1 && { rt=$c; break; }; done; fi
[ -n "$rt" ] && command -v "$rt" >/dev/null 2>&1 || { echo "@@NORUNTIME $rt"; exit 20; }
echo "@@RUNTIME $rt"
if ! "$rt" image inspect "$img" >/dev/null 2>&1 && [ "$pull" = 1 ]; then
  "$rt" pull -q "$img" 2>&1 | tail -3 | sed 's/^/@@PULL /'
fi
info=$("$rt" image inspect --format '{{.Id}} {{json .RepoDigests}}' "$img" 2>&1) \
  || { echo "@@NOIMAGE"; printf '%s\n' "$info" | tail -2; exit 21; }
echo "@@IMAGE $info"
bare=$("$rt" run --rm --network none --entrypoint python3 "$img" -c "$probe" "$@" 2>&1) \
  || { echo "@@PROBEFAIL"; printf '%s\n' "$bare" | tail -5; exit 22; }
printf '%s\n' "$bare" | sed 's/^@@/@@BARE_/'
dir=$(printf '%s\n' "$bare" | sed -n 's/^@@DIR //p')
[ -n "$dir" ] || exit 0
[ -d "$pkg" ] || { echo "@@NOTREE"; exit 23; }
(cd "$pkg" && for f in "$@"; do [ -f "$f" ] && echo "@@TREE $(sha256sum "$f" | cut -d' ' -f1) $f"; done; true)
"$rt" run --rm --network none -v "$pkg:$dir:ro" --entrypoint python3 "$img" -c "$probe" "$@" 2>&1 | tail -20
"""


def image_facts(transport: Transport, settings: ContainerSettings, tree: str, *, pull: bool = False,
                timeout: float = _TIMEOUT) -> ImageFacts:
    """Find the runtime, check the image is on the host (pulling it first when `pull`), find
    its `sglang` package and prove that, with the tree mounted over it, `sglang` resolves to
    the tree's files (the hashes of PROOF_FILES match). One round trip; StepError naming
    the image and the host otherwise."""
    pkg = posixpath.join(tree, PKG)
    res = transport.run(["bash", "-c", _SCRIPT, "specops-image", settings.runtime or "", settings.image, pkg,
                         "1" if pull else "0", PROBE, *PROOF_FILES], timeout=timeout)
    lines = res.stdout.splitlines()
    where = f"host {transport.name}, image {settings.image}"

    def tagged(tag: str) -> list[str]:
        return [ln[len(tag) + 1:] for ln in lines if ln.startswith(tag + " ") or ln == tag]

    if res.rc == 20:
        wanted = settings.runtime or "podman or docker"
        raise StepError(f"no container runtime on host {transport.name} ({wanted} not found)", where=where,
                        hint="install podman or docker there, or drop sglang_image to use the venv route")
    runtime = (tagged("@@RUNTIME") or [""])[0]
    if res.rc == 21:
        said = " ".join(tagged("@@PULL")) or res.tail(2)
        raise StepError(f"image {settings.image} is not on host {transport.name}"
                        + (f" and pulling it failed: {said}" if pull else ""), where=where,
                        hint=f"`{runtime} pull {settings.image}` (or `{runtime} load -i FILE`) on that host")
    if res.rc == 22:
        raise StepError(f"image {settings.image} cannot run {CONTAINER_PYTHON}: {res.tail(3)}", where=where)
    if res.rc == 23:
        raise StepError(f"{pkg} is missing: not an SGLang checkout (run the git step first)", where=where)
    if not res.ok or not tagged("@@IMAGE"):
        raise StepError(f"checking image {settings.image} failed (rc {res.rc}): {res.tail(5)}", where=where)
    image_id, _, digests = tagged("@@IMAGE")[0].partition(" ")
    try:
        repo_digests = [str(d) for d in json.loads(digests or "[]") or []]
    except ValueError:
        repo_digests = []
    sglang_dir = (tagged("@@BARE_DIR") or [""])[0]
    if not sglang_dir:
        raise StepError(f"image {settings.image} has no `sglang` package for {CONTAINER_PYTHON}", where=where,
                        hint="use one of SGLang's own images (lmsysorg/sglang:<tag>)")
    facts = ImageFacts(runtime, settings.image, image_id, repo_digests[0] if repo_digests else None, sglang_dir,
                       (tagged("@@BARE_PY") or [""])[0])
    problem = mount_problem(facts, tree, tagged("@@DIR"), tagged("@@HASH"), tagged("@@TREE"))
    if problem:
        raise StepError(problem, where=where, hint="the patch would not be what runs; check the tree and the image")
    return facts


def mount_problem(facts: ImageFacts, tree: str, dirs: Sequence[str], seen: Sequence[str],
                  want: Sequence[str]) -> str:
    """'' when the container, with the tree mounted, resolves `sglang` to the mount and sees
    the tree's own files; else what differs."""
    pkg = posixpath.join(tree, PKG)
    if list(dirs) != [facts.sglang_dir]:
        return f"with {pkg} mounted, sglang in the image resolves to {dirs[0] if dirs else 'nothing'}, " \
               f"not {facts.sglang_dir}"
    if not want:
        return f"{pkg} has none of {', '.join(PROOF_FILES)}"
    if sorted(seen) != sorted(want):
        return f"the container's {facts.sglang_dir} is not the tree {pkg}: its files differ"
    return ""


# --- plans and commands ---------------------------------------------------------------

def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def adapt_plan(plan: Any, facts: ImageFacts, tree: str, *, engine: str, home: str) -> Any:
    """The launch plan as a container: the image's python instead of the host's, the tree
    mounted over the image's `sglang`, and its GPUs (none for a CPU arm or the simulator)."""
    serving = engine_named(engine)
    simulated = serving.simulated
    env = dict(plan.env)
    visible = env.pop("CUDA_VISIBLE_DEVICES", None)  # the runtime renumbers the GPUs it maps from 0
    gpus = [] if simulated or plan.device == "cpu" or not visible else visible.split(",")
    mounts = [(plan.workdir, plan.workdir, "rw")]
    if not _under(tree, plan.workdir):
        mounts.append((tree, tree, "ro"))
    mounts.append((posixpath.join(tree, PKG), facts.sglang_dir, "ro"))
    for i, arg in enumerate(plan.argv[:-1]):  # a local model outside the work directory
        value = plan.argv[i + 1]
        if arg in serving.model_flags and value.startswith("/") \
                and not any(_under(value, m[0]) for m in mounts):
            mounts.append((value, value, "ro"))
    if not simulated:  # the weights the weights step put in the host's Hub cache
        hub = env.get("HF_HOME") or posixpath.join(home, ".cache", "huggingface")
        env["HF_HOME"] = hub
        mounts.append((hub, hub, "rw"))
    argv = [CONTAINER_PYTHON, *plan.argv[1:]]
    box = {"runtime": facts.runtime, "image": facts.image, "image_id": facts.image_id, "digest": facts.digest,
           "name": container_name(plan.workdir, plan.arm), "gpus": gpus,
           "mounts": [list(m) for m in mounts]}
    return replace(plan, argv=argv, env=env, container=box)


def gpu_flags(runtime: str, gpus: Sequence[str]) -> list[str]:
    """The arm's GPUs: docker's `--gpus "device=N,M"`; podman's CDI devices (podman 4 accepts
    `--gpus` and ignores it), one `--device nvidia.com/gpu=N` each."""
    if not gpus:
        return []
    if runtime == "docker":
        return ["--gpus", f'"device={",".join(gpus)}"']
    return [a for g in gpus for a in ("--device", f"nvidia.com/gpu={g}")]


def run_argv(plan: Any) -> list[str]:
    """`<runtime> run` for the plan: attached (its client is the arm's process, its output the
    arm's log), `--init` (stop takes half a second, not the runtime's 10 s kill timeout),
    host networking, the arm's env files read inside by LOADER, the server's argv after it."""
    box = plan.container
    env_files = [paths.server_env(plan.workdir, plan.arm)] + ([plan.secrets_file] if plan.secrets_file else [])
    mounts = [a for src, dst, mode in box["mounts"] for a in ("-v", f"{src}:{dst}:{mode}")]
    return [box["runtime"], "run", "--rm", "--name", box["name"], "--init", "--network", "host",
            "--label", f"specops.arm={plan.arm}", "--label", f"specops.workdir={plan.workdir}",
            *mounts, *gpu_flags(box["runtime"], box["gpus"]), "-w", plan.cwd or plan.workdir,
            "--entrypoint", CONTAINER_PYTHON, box["image"],
            "-c", LOADER, "specops-env", *env_files, "--", *plan.argv]


def launch_lines(plan: Any) -> list[str]:
    """Before the run: a container of the same name left over (its client was killed) goes,
    and the Hub cache mounted into it exists."""
    box = plan.container
    dirs = [src for src, _, mode in box["mounts"] if mode == "rw"]
    return [f"mkdir -p {' '.join(q(d) for d in dirs)} || exit 12",
            f"{q(box['runtime'])} rm -f {q(box['name'])} >/dev/null 2>&1 || true"]


def stop_script(states: Sequence[Any], grace_s: float) -> str:
    """`<runtime> stop -t GRACE` then `rm -f` for each container, all at once; prints
    `@@C <i> 1` for a container that was running."""
    lines = []
    for i, st in enumerate(states):
        rt, name = q(st.container["runtime"]), q(st.container["name"])
        lines.append(f"( r=0; [ \"$({rt} inspect -f '{{{{.State.Running}}}}' {name} 2>/dev/null)\" = true ] && r=1; "
                     f"{rt} stop -t {int(grace_s)} {name} >/dev/null 2>&1; {rt} rm -f {name} >/dev/null 2>&1; "
                     f"echo \"@@C {i} $r\" ) &")
    return "\n".join(lines + ["wait"])


def stop_containers(transport: Transport, states: Sequence[Any], grace_s: float) -> set[str]:
    """Stop and remove the states' containers; the arms whose container was running."""
    if not states:
        return set()
    res = transport.run(stop_script(states, grace_s), timeout=grace_s + 60)
    running = {int(p[1]) for p in (ln.split() for ln in res.stdout.splitlines() if ln.startswith("@@C "))
               if len(p) == 3 and p[2] == "1"}
    return {st.arm for i, st in enumerate(states) if i in running}


def image_manifest(states: Sequence[Any]) -> dict[str, Any] | None:
    """The bench manifest's `container` entry from the arms' states: runtime, image, image id
    and registry digest per image the arms ran (None when no arm ran in a container)."""
    boxes = [st.container for st in states if getattr(st, "container", None)]
    if not boxes:
        return None
    images = {b["image_id"]: image_record(b) for b in boxes}
    arms = {st.arm: st.container["image_id"] for st in states if getattr(st, "container", None)}
    return {"images": list(images.values()), "arms": arms}


def facts_dict(facts: ImageFacts) -> dict[str, Any]:
    return asdict(facts)
