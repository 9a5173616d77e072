"""A runtime against the release's own pins, before any server starts.

The install step puts the tree in `--no-deps` over a prepared runtime (or a venv the user
made), so nothing compares what the release pins with what the runtime holds. SGLang
0.5.8 pins transformers 4.57.1; over a runtime with transformers 5.3 it died at import
with `TypeError: AutoImageProcessor.register() got multiple values for argument
'exist_ok'`, and it needed `torchao`, which that runtime lacked: found only from the
server's traceback. Here the tree's pins (read on this side with the one pyproject reader,
`sglang.cuda.requirements`) go to a small script run by the runtime's python, which reads
`importlib.metadata` there and judges each pin with `packaging` where the host has it (a
plain release-number comparison where it does not); `parse` reads its answer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Sequence

#: The host-side script: argv[1] is a JSON list of requirement strings; prints one JSON
#: object per requirement. Python 3.8+, stdlib only (packaging where it is importable).
SCRIPT = r"""
import json, re, sys
import importlib.metadata as md
try:
    from packaging.requirements import Requirement
    from packaging.version import InvalidVersion, Version
except Exception:
    Requirement = None

def release(v):
    m = re.match(r"\s*v?(\d+(?:\.\d+)*)", v)
    return tuple(int(x) for x in m.group(1).split(".")) if m else None

def padded(a, b):
    n = max(len(a), len(b))
    return a + (0,) * (n - len(a)), b + (0,) * (n - len(b))

def plain_ok(spec, installed):
    have = release(installed)
    if have is None:
        return None
    for clause in [c.strip() for c in spec.split(",") if c.strip()]:
        m = re.match(r"(===|==|!=|~=|>=|<=|>|<)\s*(\S+)$", clause)
        if not m:
            return None
        op, want = m.groups()
        if want.endswith(".*"):
            pre = release(want[:-2])
            hit = pre is not None and have[:len(pre)] == pre
            if hit != (op == "=="):
                return False
            continue
        w = release(want)
        if w is None:
            return None
        a, b = padded(have, w)
        good = {"==": a == b, "===": installed == want, "!=": a != b, ">=": a >= b, "<=": a <= b,
                ">": a > b, "<": a < b, "~=": a >= b and a[:max(len(w) - 1, 1)] == b[:max(len(w) - 1, 1)]}[op]
        if not good:
            return False
    return True

for text in json.loads(sys.argv[1]):
    row = {"req": text.strip(), "name": None, "spec": "", "installed": None, "ok": None, "why": ""}
    marker = None
    if Requirement is not None:
        try:
            req = Requirement(text)
        except Exception as exc:
            row["why"] = "not a requirement: %s" % exc
            print(json.dumps(row)); continue
        row["name"], row["spec"] = req.name, str(req.specifier)
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            row["ok"], row["why"] = True, "not for this platform"
            print(json.dumps(row)); continue
    else:
        m = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:\[[^\]]*\])?\s*([^;]*)(;.*)?$", text)
        if not m:
            row["why"] = "not a requirement"
            print(json.dumps(row)); continue
        row["name"], row["spec"], marker = m.group(1), m.group(2).strip().strip("()"), m.group(3)
    try:
        row["installed"] = md.version(row["name"])
    except md.PackageNotFoundError:
        if marker:
            row["why"] = "its marker is not judged without packaging on the host"
        else:
            row["ok"] = False
        print(json.dumps(row)); continue
    if marker:
        row["why"] = "its marker is not judged without packaging on the host"
    elif Requirement is not None:
        try:
            row["ok"] = req.specifier.contains(Version(row["installed"]), prereleases=True)
        except InvalidVersion:
            row["why"] = "installed version %s is not a PEP 440 version" % row["installed"]
    else:
        row["ok"] = plain_ok(row["spec"], row["installed"])
    print(json.dumps(row))
"""

#: SGLang's CPU install (`device: cpu`) builds from this file: its pins differ (CPU torch, no CUDA kernels).
PYPROJECT_CPU = "python/pyproject_cpu.toml"

#: What a prepared runtime must hold, said by the refusal and docs/gpu-hosts.md.
RULE = ("a prepared runtime (sglang_runtime) or a venv made by hand must hold every package the release's "
        "python/pyproject.toml pins (python/pyproject_cpu.toml on a device: cpu host), at a version inside the pin")


@dataclass(frozen=True)
class Pin:
    """One requirement of the release, judged in the runtime: `ok` None when it could not be."""

    req: str
    name: str | None
    spec: str
    installed: str | None
    ok: bool | None
    why: str = ""

    def problem(self) -> str:
        """`transformers: pinned ==4.57.1, installed 5.3.0` / `torchao: pinned ==0.9.0, not installed`."""
        pin = f"pinned {self.spec}" if self.spec else "required"
        return f"{self.name}: {pin}, {'installed ' + self.installed if self.installed else 'not installed'}"


def command(python: str, requirements: Sequence[str]) -> list[str]:
    """The argv that judges `requirements` in the environment of `python` (no PYTHONPATH: the
    environment's own view, as its servers will have it)."""
    return ["env", "-u", "PYTHONPATH", python, "-c", SCRIPT, json.dumps(list(requirements))]


def parse(stdout: str) -> list[Pin]:
    """The script's answer, one Pin per requirement (lines that are not its JSON are skipped)."""
    pins = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            row = json.loads(line)
        except ValueError:
            continue
        pins.append(Pin(req=str(row.get("req", "")), name=row.get("name"), spec=str(row.get("spec") or ""),
                        installed=row.get("installed"), ok=row.get("ok"), why=str(row.get("why") or "")))
    return pins


def unmet(pins: Sequence[Pin]) -> list[Pin]:
    """The pins the runtime does not meet: missing, or installed outside the pin."""
    return [p for p in pins if p.ok is False]


def unjudged(pins: Sequence[Pin]) -> list[Pin]:
    """Pins that could not be judged on this host (no packaging for a marker, a version it cannot read)."""
    return [p for p in pins if p.ok is None]
