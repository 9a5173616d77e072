"""For the two processes that only ever speak plain HTTP on loopback: the simulator and the
builtin client a bench point starts beside the server. Importing aiohttp builds two default
TLS contexts (the system's CA bundle read and parsed): about 50 ms of every such process's
start, once per bench point and per simulated server, for TLS neither uses. A process that
calls `without_tls()` before importing aiohttp has no `ssl` module, which aiohttp supports
(an `https://` URL is then refused by aiohttp itself)."""

from __future__ import annotations

import sys
from typing import Any, cast


def without_tls() -> None:
    """Make `import ssl` fail in this process (unless something already imported it).
    Only for a process's entry point (`if __name__ == "__main__"`), never a library call:
    it changes the whole process."""
    if "ssl" not in sys.modules:
        cast(dict[str, Any], sys.modules)["ssl"] = None
