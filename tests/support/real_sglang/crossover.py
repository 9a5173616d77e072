"""What the `--small` crossover tests (tests/real_sglang/test_real_crossover.py on vLLM,
test_real_crossover_sglang.py on each SGLang route) hold bench/real_crossover.py's loop to, on
whichever route ran: one copy of the checks every route shares."""

from __future__ import annotations

from pathlib import Path
from typing import Any

#: the loop's commands, in order
STEPS = ("deploy", "bench", "tune", "bench", "verify", "stop")
#: --small's levels are 1 and 2: the adaptive arm's threshold until tune writes one
TOP_LEVEL = 2


def check_loop_ran(run: dict[str, Any]) -> None:
    """Every command ran and none failed; a ratio per level and a crossover of a known kind
    (never a throughput ratio's value: the tiny models make EAGLE-3 lose on a loaded machine)."""
    assert [c.split()[1] for c in run["commands"]] == list(STEPS), run["commands"]
    assert run["failed_commands"] == [], run["failed_commands"]
    ratios = run["eagle3_over_baseline"]
    assert set(ratios) == {"1", "2"} and all(isinstance(r, float) and r > 0 for r in ratios.values()), ratios
    assert run["crossover"]["kind"] in ("interpolated", "never", "every"), run["crossover"]


def check_tune_kept_its_word(run: dict[str, Any], work: Path) -> dict[str, Any]:
    """tune --write on the real servers: whichever decision it reports (on a loaded 2-core CPU
    often `no-speculation`), its exit code and output agree with it, it tried one candidate at
    most (each a server launch), and it wrote a schedule and threshold only when verified (the
    bench after it ran the placeholder, the top level, otherwise). Its result, for the route's
    own checks."""
    tune: dict[str, Any] = run["tune"]
    assert tune["status"] in ("verified", "unverified", "no-speculation"), tune
    assert (tune["exit"] == 0) == (tune["status"] == "verified"), tune
    assert len(tune["candidates"]) <= 1, tune["candidates"]
    said = " ".join((work / "02-tune.log").read_text().split())
    assert tune["status"] in said and " ".join(tune["message"].split()) in said, said[-3000:]
    assert (run["tuned_schedule"] is not None) is (tune["status"] == "verified"), run["tuned_schedule"]
    written = tune["threshold"] if tune["status"] == "verified" else TOP_LEVEL
    assert run["adaptive_threshold_benched"] == written, (run["adaptive_threshold_benched"], tune)
    return tune
