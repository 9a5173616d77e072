"""`specops hosts check`: what a host offers, gathered in one round trip.

Every command over SSH costs a round trip, so one bash script prints every fact in its
own `@@section` and the client splits them. Missing tools (no git, no nvidia-smi) are
facts, not failures; only an unreachable host makes `reachable` false.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from typing import Any

from specops.errors import TransportError
from specops.ports import EPHEMERAL_RANGE_FILE, parse_ephemeral
from specops.transport.base import HostFacts, Transport

#: Seconds the whole probe may take on the host.
FACTS_TIMEOUT_S = 30.0

_SCRIPT = r"""
py={python}
wd={workdir}
echo @@python; "$py" --version 2>&1 || echo "@@missing $py"
echo @@git; git --version 2>&1 || echo "@@missing git"
echo @@disk
d="$wd"; while [ ! -e "$d" ] && [ "$d" != / ]; do d=$(dirname -- "$d"); done
echo "$d"; df -Pk -- "$d" 2>&1 | tail -n 1
echo @@cpu
{cpu}
echo @@gpus
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>&1 || echo "@@failed $?"
fi
echo @@end
"""


def gather_facts(transport: Transport, workdir: str, python: str = "python3") -> HostFacts:
    """Reachability, host key status, python/git versions, free disk in `workdir` (on its
    nearest existing parent) and GPUs. Never raises for a host problem: an unreachable
    host gives `reachable=False` with the error."""
    try:
        wd = transport.expand(workdir)
        result = transport.run(_SCRIPT.format(python=shlex.quote(python), workdir=shlex.quote(wd), cpu=CPU_SCRIPT),
                               timeout=FACTS_TIMEOUT_S)
    except TransportError as exc:
        return HostFacts(reachable=False, host_key=_host_key(transport), error=str(exc))
    facts = HostFacts(reachable=True, host_key=_host_key(transport))
    if result.timed_out:
        facts.error = f"probe timed out after {FACTS_TIMEOUT_S:g} s"
        return facts
    sections = _sections(result.stdout)
    facts.python = _version(sections.get("python", []))
    facts.git = _version(sections.get("git", []))
    facts.free_disk = _disk(sections.get("disk", []), wd)
    facts.cpu = parse_cpu("\n".join(sections.get("cpu", []))).describe()
    gpu_lines = sections.get("gpus", [])
    if any(ln.startswith("@@failed") for ln in gpu_lines):
        facts.error = "nvidia-smi failed: " + " ".join(ln for ln in gpu_lines if not ln.startswith("@@"))
    else:
        facts.gpus = [_gpu(ln) for ln in gpu_lines if ln.strip()]
    return facts


def _host_key(transport: Transport) -> str:
    return transport.identity()


def _sections(stdout: str) -> dict[str, list[str]]:
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in stdout.splitlines():
        if line.startswith("@@") and " " not in line:
            current = sections.setdefault(line[2:], [])
        elif current is not None:
            current.append(line)
    return sections


def _version(lines: list[str]) -> str:
    """`Python 3.11.7` -> `3.11.7`; a missing tool -> "missing"."""
    text = " ".join(ln.strip() for ln in lines if ln.strip())
    if not text or text.startswith("@@missing") or "@@missing" in text:
        return "missing"
    words = text.split()
    for word in words:
        if word[:1].isdigit():
            return word
    return text


def _disk(lines: list[str], workdir: str) -> str:
    """`df -Pk` available column -> `123.4 GiB free on /path`."""
    if len(lines) < 2:
        return ""
    where, row = lines[0].strip(), lines[1].split()
    try:
        kib = int(row[3])
    except (IndexError, ValueError):
        return "unknown (" + lines[1].strip() + ")"
    gib = kib / (1024 * 1024)
    note = "" if where == workdir else f" ({workdir} does not exist yet)"
    return f"{gib:.1f} GiB free on {where}{note}"


def _gpu(line: str) -> str:
    """`NVIDIA H100 80GB HBM3, 81559 MiB` -> `NVIDIA H100 80GB HBM3 (81559 MiB)`."""
    name, _, mem = line.partition(",")
    return f"{name.strip()} ({mem.strip()})" if mem.strip() else name.strip()


# ----- the CPU: what a `device: cpu` host serves on ------------------------------------

#: model name (lscpu's, which ARM hosts have too, else /proc/cpuinfo's), online CPUs, memory;
#: each fact on a `key: value` line, a missing tool simply leaves its line out
CPU_SCRIPT = r"""
if command -v lscpu >/dev/null 2>&1; then
  LC_ALL=C lscpu 2>/dev/null | sed -n 's/^Model name:[[:space:]]*/model: /p' | head -n 1
fi
sed -n 's/^model name[[:space:]]*:[[:space:]]*/model: /p' /proc/cpuinfo 2>/dev/null | head -n 1
echo "cores: $(nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null)"
sed -n 's/^MemTotal:[[:space:]]*\([0-9]*\) kB/memory_kib: \1/p' /proc/meminfo 2>/dev/null
""".strip()


@dataclass
class CPUFacts:
    """A host's CPU as the CPU probe saw it (a CPU host's manifest, report and `hosts check`)."""

    model: str = ""
    cores: int | None = None
    memory_gib: float | None = None

    def describe(self) -> str:
        """`AMD EPYC 7B13 (2 cores, 23.5 GiB)`; `unknown CPU` when the probe found nothing."""
        extra = [f"{self.cores} cores"] if self.cores else []
        extra += [f"{self.memory_gib:.1f} GiB"] if self.memory_gib else []
        return (self.model or "unknown CPU") + (f" ({', '.join(extra)})" if extra else "")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def cpu_probe_command() -> list[str]:
    """The CPU probe as an argv list: one round trip, read-only."""
    return ["bash", "-c", CPU_SCRIPT]


def parse_cpu(stdout: str) -> CPUFacts:
    """The CPU probe's `key: value` lines; the first model line wins (lscpu's)."""
    facts = CPUFacts()
    for line in stdout.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "model" and value and not facts.model:
            facts.model = " ".join(value.split())
        elif key == "cores" and value.isdigit():
            facts.cores = int(value)
        elif key == "memory_kib" and value.isdigit():
            facts.memory_gib = round(int(value) / (1024 * 1024), 1)
    return facts


def read_cpu(transport: Transport, timeout: float = FACTS_TIMEOUT_S) -> CPUFacts:
    """Run the CPU probe on the host and parse it (an unanswered probe: facts left empty)."""
    return parse_cpu(transport.run(cpu_probe_command(), timeout=timeout).stdout)


def read_ephemeral(transport: Transport, timeout: float = FACTS_TIMEOUT_S) -> tuple[int, int]:
    """The host kernel's ephemeral port range (specops.ports: where no chosen port may lie);
    Linux's default where the host cannot say."""
    res = transport.run(["cat", EPHEMERAL_RANGE_FILE], timeout=timeout)
    return parse_ephemeral(res.stdout if res.ok else None)
