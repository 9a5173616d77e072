"""`specops verify` on one host: its connection opened around bench.acceptance's measuring,
decide/verify.py's verdicts worded by report/verify.py, and the report written (verify.md and
verify.json, default runs/<id>/ beside the inventory). The CLI parses the options, calls
`verify_host` and prints the verdicts."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specops.bench.acceptance import measure
from specops.config.inventory import load_inventory
from specops.fsutil import atomic_write
from specops.report.verify import Verification, report_markdown, verification
from specops.run.engine import default_runs_dir
from specops.run.journal import new_run_id
from specops.transport.connect import open_transport


@dataclass
class Verified:
    """One host's verdicts, where the report went and the document `--json` prints."""

    host: str
    result: Verification
    report: Path
    doc: dict[str, Any]


def verify_host(inventory_path: str | None, host_spec: str, *, prompts: int, max_new_tokens: int,
                resume_steps: int, out: Path | None) -> Verified:
    """Run the checks on the host `host_spec` names and write the report beside `out`."""
    inv = load_inventory(inventory_path)
    host = inv.select_one(host_spec, "verify checks")
    with open_transport(host) as transport:
        measured = measure(inv, host, transport, prompts=prompts, max_new_tokens=max_new_tokens,
                           resume_steps=resume_steps)
    result = verification(measured)
    path = out or default_runs_dir(inv.path) / new_run_id("verify") / "verify.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, report_markdown(result) + "\n")
    doc = {**result.to_dict(), "report": str(path)}
    atomic_write(path.with_suffix(".json"), json.dumps(doc, indent=1) + "\n")
    return Verified(host.name, result, path, doc)
