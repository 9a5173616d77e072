"""The GPUs of a host and who holds them: one `nvidia-smi` round trip and its parser.

A probe is a host-side script paired with the parser of its output (as in probes.py):
the script prints sections, the parser turns them into typed facts. Everything is read
in one command so the preflight costs one round trip, however many GPUs a host has.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import asdict, dataclass, field
from typing import Any

from specops.transport.base import Transport

#: Seconds the whole probe may take (nvidia-smi is slow on a busy 8-GPU box, not this slow).
PROBE_TIMEOUT_S = 60.0
#: Memory used on an idle GPU (the driver's own, a display) stays well below this.
IDLE_MEMORY_MIB = 1024

GPU_QUERY = "index,uuid,name,memory.total,memory.used,driver_version,mig.mode.current"
APPS_QUERY = "gpu_uuid,pid,process_name,used_memory"

_SCRIPT = r"""
if ! command -v nvidia-smi >/dev/null 2>&1; then echo @@missing; exit 0; fi
echo @@gpus
nvidia-smi --query-gpu={gpu_query} --format=csv,noheader,nounits 2>&1 || echo "@@failed $?"
echo @@apps
nvidia-smi --query-compute-apps={apps_query} --format=csv,noheader,nounits 2>&1 || echo "@@failed $?"
echo @@header
nvidia-smi 2>/dev/null | head -n 6
echo @@sessions
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null); do
  ps -o pid=,sid=,user= -p "$pid" 2>/dev/null
done
echo @@end
"""


@dataclass(frozen=True)
class GPU:
    index: int
    uuid: str
    name: str
    memory_total_mib: int  # 0 where nvidia-smi says [N/A]
    memory_used_mib: int
    #: `mig.mode.current`: "Enabled" (the GPU is cut into MIG instances: its index alone is
    #: no device to CUDA), "Disabled", or "" where the GPU has no MIG ("[N/A]")
    mig: str = ""


@dataclass(frozen=True)
class ComputeApp:
    """A process with a CUDA context on a GPU; `sid` and `user` where `ps` can see it
    (in a container the host's pids are often invisible: then both stay unknown)."""

    gpu_uuid: str
    pid: int
    process_name: str
    used_memory_mib: int | None
    sid: int | None = None
    user: str = ""


@dataclass
class GPUInventory:
    """What `nvidia-smi` says about a host. `error` is set when it is missing or failed."""

    gpus: list[GPU] = field(default_factory=list)
    apps: list[ComputeApp] = field(default_factory=list)
    driver_version: str = ""
    cuda_version: str = ""
    error: str = ""

    @property
    def indices(self) -> list[int]:
        return [g.index for g in self.gpus]

    @property
    def mig_enabled(self) -> list[int]:
        """GPUs in MIG mode: CUDA sees their MIG instances, not the GPU by its index."""
        return [g.index for g in self.gpus if g.mig == "Enabled"]

    def gpu(self, index: int) -> GPU | None:
        return next((g for g in self.gpus if g.index == index), None)

    def apps_on(self, index: int) -> list[ComputeApp]:
        gpu = self.gpu(index)
        return [a for a in self.apps if gpu is not None and a.gpu_uuid == gpu.uuid]

    def describe(self) -> str:
        """`8 x NVIDIA H100 80GB HBM3 (81559 MiB), driver 550.54.15, CUDA 12.4`."""
        if self.error:
            return self.error
        if not self.gpus:
            return "no GPUs"
        names = sorted({g.name for g in self.gpus})
        mem = self.gpus[0].memory_total_mib or "?"
        what = f"{len(self.gpus)} x {names[0]} ({mem} MiB)" if len(names) == 1 else ", ".join(
            f"{g.index}: {g.name}" for g in self.gpus)
        mig = f", MIG on GPU {','.join(map(str, self.mig_enabled))}" if self.mig_enabled else ""
        return f"{what}, driver {self.driver_version or '?'}, CUDA {self.cuda_version or '?'}{mig}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def probe_command() -> list[str]:
    """The probe as an argv list (the script is one argument; nothing is substituted in)."""
    script = _SCRIPT.format(gpu_query=shlex.quote(GPU_QUERY), apps_query=shlex.quote(APPS_QUERY))
    return ["bash", "-c", script]


def read_gpus(transport: Transport, timeout: float = PROBE_TIMEOUT_S) -> GPUInventory:
    """Run the probe on the host and parse it."""
    result = transport.run(probe_command(), timeout=timeout)
    if result.timed_out:
        return GPUInventory(error=f"nvidia-smi did not answer within {timeout:g} s")
    return parse_probe(result.stdout)


#: The header's CUDA version under any label (`CUDA Version: 12.4`; R610+ `CUDA UMD Version: 13.3`)
#: and the driver's (`Driver Version: 550.54.15`; R610+ `KMD Version: 610.43.02`).
_HEADER_CUDA = re.compile(r"CUDA[A-Za-z ]*Version\s*:\s*(\d+(?:\.\d+)+)")
_HEADER_DRIVER = re.compile(r"(?:Driver|KMD)[A-Za-z ]*Version\s*:\s*(\d+(?:\.\d+)+)")
#: What nvidia-smi says when it runs but cannot answer, and what that usually means.
_SAID = (
    ("No devices were found", "the driver is loaded but sees no GPU (a container started without GPUs, "
                              "or GPUs lost after a reboot)"),
    ("Driver/library version mismatch", "the loaded kernel module and the installed driver libraries "
                                        "differ, usually after a driver upgrade without a reboot"),
)


def parse_probe(stdout: str) -> GPUInventory:
    """Parse the probe's sections; tolerant of `[N/A]` values and of every driver
    generation's header labels, strict about structure. When nvidia-smi cannot answer,
    `error` quotes what it said."""
    sections = _sections(stdout)
    if "missing" in sections:
        return GPUInventory(error="nvidia-smi not found on the host (no NVIDIA driver?)")
    gpu_lines = [ln for ln in sections.get("gpus", []) if ln.strip()]
    said = " ".join(ln.strip() for ln in gpu_lines if not ln.startswith("@@"))
    known = next((why for words, why in _SAID if words.lower() in said.lower()), None)
    failed = [ln for ln in gpu_lines if ln.startswith("@@failed")]
    if known or failed:
        return GPUInventory(error=f"nvidia-smi failed: {said or failed[0]}" + (f" ({known})" if known else ""))
    inv = GPUInventory()
    for line in gpu_lines:
        gpu, driver = _gpu_row(line)
        if gpu is None:
            return GPUInventory(error=f"nvidia-smi printed an unexpected line: {line.strip()!r}")
        inv.gpus.append(gpu)
        inv.driver_version = inv.driver_version or driver
    sessions = _sessions(sections.get("sessions", []))
    for line in sections.get("apps", []):
        app = _app_row(line)
        if app is not None:
            sid, user = sessions.get(app.pid, (None, ""))
            inv.apps.append(ComputeApp(app.gpu_uuid, app.pid, app.process_name, app.used_memory_mib, sid, user))
    header = " ".join(sections.get("header", []))
    match = _HEADER_CUDA.search(header)
    inv.cuda_version = match.group(1) if match else ""
    if not inv.driver_version:
        match = _HEADER_DRIVER.search(header)
        inv.driver_version = match.group(1) if match else ""
    return inv


def _sections(stdout: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("@@") and " " not in line.strip():
            current = sections.setdefault(line.strip()[2:], [])
        elif current is not None:
            current.append(line)
    return sections


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    try:
        return int(float(text))
    except ValueError:  # "[N/A]", "[Insufficient Permissions]", "[Not Supported]"
        return None


def _gpu_row(line: str) -> tuple[GPU | None, str]:
    """`0, GPU-..., NVIDIA H100 80GB HBM3, 81559, 0, 550.54.15, [N/A]` (a name has no comma;
    a row without the MIG field, as older probes asked, is read too)."""
    cells = [c.strip() for c in line.split(",")]
    if len(cells) not in (6, 7):
        return None, ""
    index, total, used = _int_or_none(cells[0]), _int_or_none(cells[3]), _int_or_none(cells[4])
    if index is None or not cells[1]:
        return None, ""
    mig = cells[6] if len(cells) == 7 and cells[6] in ("Enabled", "Disabled") else ""
    driver = cells[5] if re.fullmatch(r"\d+(?:\.\d+)+", cells[5]) else ""
    return GPU(index, cells[1], cells[2], total or 0, used or 0, mig), driver


def _app_row(line: str) -> ComputeApp | None:
    """`GPU-..., 23817, /usr/bin/python3, 70245`; a process name may hold commas."""
    if not line.strip() or line.startswith("@@") or "No running" in line:
        return None
    head, _, rest = line.partition(",")
    pid_text, _, rest = rest.partition(",")
    name, _, mem = rest.rpartition(",")
    pid = _int_or_none(pid_text)
    if pid is None or not head.strip().startswith("GPU-"):
        return None
    return ComputeApp(head.strip(), pid, name.strip(), _int_or_none(mem))


def _sessions(lines: list[str]) -> dict[int, tuple[int | None, str]]:
    """`ps -o pid=,sid=,user=` rows -> pid: (session id, user)."""
    out: dict[int, tuple[int | None, str]] = {}
    for line in lines:
        words = line.split()
        if len(words) >= 2 and words[0].isdigit():
            out[int(words[0])] = (_int_or_none(words[1]), words[2] if len(words) > 2 else "")
    return out
