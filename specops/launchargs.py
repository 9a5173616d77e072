"""A server's launch command line read as the server reads it.

Engines (is the KV cache fixed by an argument?), fairness (which args differ between arms),
the report (args when /server_info was not recorded) and tune (pinned ports) all read argv;
this is the one parser, below all of them in the import graph.
"""

from __future__ import annotations

from typing import Any, Sequence


def arg_name(flag: str) -> str:
    """`--max-running-requests` or `max-running-requests` -> `max_running_requests`."""
    return str(flag).lstrip("-").replace("-", "_")


def _scalar(text: str) -> Any:
    """A value read from argv as the server would resolve it: '256' -> 256, '0.5' -> 0.5."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def args_from_argv(argv: Sequence[Any]) -> dict[str, Any]:
    """Server args as a launch command line sets them (`--flag value`, `--flag=value`, `--switch`)."""
    parsed: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        tok = str(argv[i])
        if tok.startswith("--"):
            name, eq, value = tok[2:].partition("=")
            if eq:
                parsed[arg_name(name)] = _scalar(value)
            elif i + 1 < len(argv) and not str(argv[i + 1]).startswith("--"):
                parsed[arg_name(name)] = _scalar(str(argv[i + 1]))
                i += 1
            else:
                parsed[arg_name(name)] = True
        i += 1
    return parsed
