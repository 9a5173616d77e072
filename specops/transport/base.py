"""The one interface every step uses to touch a host, whether over SSH or locally.

Commands are argument lists (joined with shlex) or bash scripts (run by one
`bash --norc --noprofile -c`); either way they run in their own process group on the host, so a timeout kills the whole
group, children included. Files are written atomically (temp file beside the target, then
rename), so a reader never sees half a file.
"""

from __future__ import annotations

import shlex
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Protocol, Sequence, Union

Command = Union[Sequence[str], str]

#: Exit code reported for a command killed by its timeout (as coreutils `timeout` does).
TIMEOUT_RC = 124


#: The most of one stream (stdout or stderr) of one command a result keeps: its first and
#: last halves, around a note (a log cat'ed whole, a runaway loop never fill memory).
MAX_OUTPUT = 64 << 20
#: Bytes dropped on each side of such a cut: more than any secret's length, so no piece
#: of a secret the cut went through is left for the masking to miss.
CUT_GUARD = 4096


def cut_note(dropped: int) -> bytes:
    return f"\n[specops: {dropped} bytes of output cut here]\n".encode()


class OutputBuffer:
    """One stream of a command's output, read piece by piece, kept within `limit` bytes:
    the head, and a rolling tail (where the error usually is)."""

    def __init__(self, limit: int | None = None):
        self.limit = MAX_OUTPUT if limit is None else limit
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        half = self.limit // 2
        room = half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if data:
            self._tail += data
            if len(self._tail) > 2 * half:  # trimmed now and then: appends stay amortized
                del self._tail[:len(self._tail) - half]

    def value(self) -> bytes:
        half = self.limit // 2
        tail = bytes(self._tail[-half:]) if half else b""
        kept = len(self._head) + len(tail)
        if kept >= self.total:
            return bytes(self._head) + tail
        guard = min(CUT_GUARD, half)
        return (bytes(self._head[:len(self._head) - guard]) + cut_note(self.total - kept + 2 * guard)
                + tail[guard:])


@dataclass
class CommandResult:
    """What one command did: the exact command line, exit code, outputs and timing."""

    command: str
    rc: int
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def tail(self, lines: int = 20) -> str:
        """The last lines of stderr then stdout, for one-line failure messages and excerpts."""
        text = (self.stderr.strip() + "\n" + self.stdout.strip()).strip()
        return "\n".join(text.splitlines()[-lines:])


def command_line(cmd: Command) -> str:
    """The exact shell line a Command is, as journals and `--check` show it: argv is quoted
    word by word; a script is shown as `bash -c SCRIPT` (one quoted argument), which is
    what running it means (see `host_line` for how it is run without a second bash)."""
    if isinstance(cmd, str):
        return shlex.join(["bash", "-c", cmd])
    if not cmd:
        raise ValueError("empty command")
    return shlex.join([str(a) for a in cmd])


def host_line(cmd: Command) -> str:
    """The line the host's `bash --norc --noprofile -c` runs for a Command: argv quoted word
    by word, a script as it is. Every command already runs in a bash of its own, so a
    script needs no second one, and a second bash started by a command sshd ran would read
    ~/.bashrc again (Debian's bash does so for a top-level shell that sees SSH_CLIENT; a
    pyenv or conda init there costs ~100 ms per command)."""
    if isinstance(cmd, str):
        return cmd
    return command_line(cmd)


def prefixed(line: str, exports: list[str], cwd: str | None) -> str:
    """`line` after `export ...` and `cd`, all on its first line (a script's line numbers
    in bash's messages stay its own); a failed `cd` ends the command with bash's message."""
    head = ("export " + " ".join(shlex.quote(a) for a in exports) + "; ") if exports else ""
    if cwd:
        head += f"cd {shlex.quote(cwd)} || exit; "
    return head + line


def group_wrapped(line: str, timeout: float) -> str:
    """Wrap a command line so it runs in a new session/process group under a host-side
    timeout that kills the whole group (TERM, then KILL 5 s later).

    Order matters: `setsid -w` first gives `timeout` a fresh session whose process group
    it leads, and coreutils `timeout` (without --foreground) signals its whole group on
    expiry, so every child of the command dies with it. The reverse order
    (`timeout ... setsid ...`) moves the command out of timeout's group and leaves its
    children running. `--norc`: over ssh, bash sources ~/.bashrc even when not
    interactive (a pyenv/conda init there costs ~100 ms); the login shell that runs this
    line has already done so and exported its environment."""
    return shlex.join(["setsid", "-w", "timeout", "-k", "5", timeout_arg(timeout),
                       "bash", "--norc", "--noprofile", "-c", line])


def timeout_arg(timeout: float) -> str:
    """`timeout`'s duration argument: seconds, fractions kept ("1.5s"), at least 0.1 s."""
    text = f"{max(0.1, float(timeout)):.1f}".rstrip("0").rstrip(".")
    return f"{text}s"


class Transport(Protocol):
    """A connection to one host. One per host per run; every step reuses it.

    Callers use only what is declared here: they never ask which transport they hold."""

    name: str

    @property
    def home(self) -> str:
        """The login user's home directory on the host (`~`)."""
        ...

    def run(
        self,
        cmd: Command,
        *,
        timeout: float,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        stdin: bytes | None = None,
    ) -> CommandResult:
        """Run and wait. Never raises for a non-zero exit; raises TransportError when the
        host cannot be reached. On timeout the command's process group is killed and
        the result has timed_out=True, rc=TIMEOUT_RC."""
        ...

    def put(self, data: bytes, path: str, mode: int | None = None) -> None:
        """Write `data` to `path` atomically (temp file beside it + rename); parents are created."""
        ...

    def get(self, path: str) -> bytes:
        """Read a whole (small) file. Raises TransportError naming the path if absent."""
        ...

    def read_range(self, path: str, offset: int, length: int) -> bytes:
        """Read up to `length` bytes from `offset` (b"" past the end). Used for log tails."""
        ...

    def stat_size(self, path: str) -> int | None:
        """Size in bytes, or None when the file does not exist."""
        ...

    def expand(self, path: str) -> str:
        """Resolve `~` and a relative path (against the host's home) to an absolute path on the host."""
        ...

    def forward(self, port: int) -> AbstractContextManager[str]:
        """A context yielding a base URL on this machine (`http://127.0.0.1:N`) that reaches
        127.0.0.1:`port` on the host, for as long as the context is open."""
        ...

    def notes(self) -> list[str]:
        """What the run should know about how this transport works now (e.g. it fell back
        to a slower way of running commands); [] when nothing is worth saying."""
        ...

    def identity(self) -> str:
        """How the host's identity was checked (`known ssh-ed25519 SHA256:...`), for `hosts check`."""
        ...

    def close(self) -> None:
        """Release the connection; commands still running through it are ended."""
        ...

    def __enter__(self) -> "Transport":
        """`with open_transport(host) as t:` closes `t` on the way out, whatever happened."""
        ...

    def __exit__(self, *exc: object) -> None:
        ...


@dataclass
class HostFacts:
    """What `specops hosts check` reports per host."""

    reachable: bool
    host_key: str = ""
    python: str = ""
    git: str = ""
    free_disk: str = ""
    gpus: list[str] = field(default_factory=list)
    #: the CPU model, cores and memory (transport.probes.CPUFacts.describe)
    cpu: str = ""
    #: what the host's servers compute on (hosts.yaml `device`), filled in by `hosts check`
    device: str = ""
    error: str = ""
