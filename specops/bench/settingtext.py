"""The bench settings as command-line text: how each option's text becomes settings (errors
name the flag), the words that ask for settings again (the resume command), and the rule of
one load axis per run. `BenchSettings`'s fields (bench/settings.py) name these in their
options' `parse` and `show`."""

from __future__ import annotations

from typing import Any, Callable, Mapping

from specops.bench.arrivals import DEFAULT_ARRIVAL, TRACE, parse_arrival
from specops.bench.repeats import RepeatRule, parse_repeats
from specops.config.optionspec import flag_words
from specops.errors import ConfigError


def ints(value: str, flag: str) -> list[int]:
    try:
        return [int(v) for v in str(value).split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} expects comma-separated integers, got '{value}'") from None


def read_lengths(flag: str) -> Callable[[Any], int | list[int]]:
    """--input-len / --output-len: one length (an int, as before lengths were an axis) or a
    comma-separated list of positive lengths swept beside concurrency."""
    def read(value: Any) -> int | list[int]:
        values = ints(value, flag)
        if not values:
            raise ConfigError(f"{flag} expects a length or comma-separated lengths, got '{value}'")
        bad = [v for v in values if v < 1]
        if bad:
            raise ConfigError(f"{flag} lengths must be at least 1, got {','.join(map(str, bad))} in '{value}'")
        return values[0] if len(values) == 1 else values
    return read


def read_as(name: str, read: Callable[[Any], Any]) -> Callable[[Any], dict[str, Any]]:
    """An option's parse: its value read by `read` into setting `name`; nothing for None."""
    return lambda value: {} if value is None else {name: read(value)}


def read_repeats(value: Any) -> dict[str, Any]:
    rule = parse_repeats(value)
    return {"repeats": rule.most, "repeats_auto": rule.auto}


def repeats_words(settings: Mapping[str, Any]) -> list[str]:
    if settings.get("repeats") is None:
        return []
    return ["--repeats", RepeatRule(bool(settings.get("repeats_auto")), int(settings["repeats"])).text()]


#: the scheduling switch: --arms-at-once (True), --one-arm-at-a-time (False), neither (None: auto)
SCHEDULES = {None: "auto", True: "arms-at-once", False: "one-arm-at-a-time"}


def scheduling_words(settings: Mapping[str, Any]) -> list[str]:
    mode = settings.get("scheduling")
    return [f"--{mode}"] if mode in ("arms-at-once", "one-arm-at-a-time") else []


def slo_words(settings: Mapping[str, Any]) -> list[str]:
    slo = settings.get("slo")
    if isinstance(slo, Mapping):
        slo = ",".join(f"{k}={v:g}" for k, v in slo.items()) or None
    return flag_words("--slo", slo)


def cost_words(settings: Mapping[str, Any]) -> list[str]:
    """A number; a per-host mapping is the hosts' `gpu_hour_cost` var's, not the option's."""
    cost = settings.get("gpu_hour_cost")
    return flag_words("--gpu-hour-cost", cost if isinstance(cost, (int, float)) else None)


def axis_of(settings: Mapping[str, Any]) -> str:
    """Which load option asks for `settings`: trace, phases, rate or concurrency."""
    for name in ("trace", "phases", "rate"):
        if settings.get(name) is not None:
            return name
    return "concurrency"


def load_words(name: str, *also: str) -> Callable[[Mapping[str, Any]], list[str]]:
    """A load option's words: only where the settings' load axis is `name` (or one of `also`)."""
    flag = "--" + name.replace("_", "-")
    return lambda settings: flag_words(flag, settings.get(name)) if axis_of(settings) in (name, *also) else []


def read_scheduling(value: bool | None) -> dict[str, Any]:
    return {"scheduling": SCHEDULES[value]}


#: The load settings, of which a run has one axis: levels of concurrency or rate, phases or a trace.
LOAD = ("concurrency", "rate", "arrival", "trace", "phases")


def load_axis(typed: Mapping[str, Any], given: set[str]) -> tuple[str, ...]:
    """The load options a run keeps: `phases` (with its arrival), a `trace`, `rate` levels
    and their `arrival`, or `concurrency` levels."""
    if typed.get("phases") is not None:
        if typed.get("rate") is not None or "concurrency" in given or typed.get("trace") is not None:
            raise ConfigError("--phases is the run's whole load: give it without --rate, --concurrency or --trace",
                              where="bench --phases", hint="one load per run: --phases '2/s:120s,16/s:120s,2/s:120s'")
        return ("phases", "arrival")
    if typed.get("trace") is not None:
        if typed.get("rate") is not None or "concurrency" in given or "arrival" in given:
            raise ConfigError("--trace replays the file's own arrivals: give it without --rate, --arrival or "
                              "--concurrency", where="bench --trace")
        return ("trace",)
    if parse_arrival(typed.get("arrival") or DEFAULT_ARRIVAL).kind == TRACE:
        raise ConfigError("--arrival trace is what --trace FILE replays; give the file", where="bench --arrival")
    if typed.get("rate") is not None and "concurrency" in given:
        raise ConfigError("give --rate (open loops) or --concurrency (closed loops), not both", where="bench --rate",
                          hint="one load axis per run: --rate 1,2,4,8 or --concurrency 1,2,4,8")
    if typed.get("rate") is None:
        if "arrival" in given:
            raise ConfigError("--arrival shapes the arrivals of --rate; give --rate too", where="bench --arrival")
        return ("concurrency",)
    return ("rate", "arrival")
