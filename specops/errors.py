"""One error type that carries where things went wrong, so the CLI can say it in one line."""

from __future__ import annotations


class SpecopsError(Exception):
    """A failure a user can act on: the message names the file/line, host or step.

    `where` is a short locator ("hosts.yaml:12", "host gpu-a, step 'launch'") that the
    CLI prints before the message; `hint` says what to look at next.
    """

    def __init__(self, message: str, *, where: str | None = None, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.where = where
        self.hint = hint

    def __str__(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text


class ConfigError(SpecopsError):
    """Bad input (hosts.yaml, a playbook, a patch set, a dataset, an option, a run directory
    given to read); raised before anything runs, and the CLI exits 2 with one line."""


class TransportError(SpecopsError):
    """A host could not be reached, authenticated, or a file could not be moved."""


class StepError(SpecopsError):
    """A step failed its apply or its verification."""
