"""Transports: how specops reaches a host. See base.Transport for the contract."""

from specops.transport.base import TIMEOUT_RC, Command, CommandResult, Transport, command_line
from specops.transport.local import LocalTransport

__all__ = ["TIMEOUT_RC", "Command", "CommandResult", "Transport", "LocalTransport", "command_line"]
