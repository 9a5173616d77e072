"""Arm leases: which runs use an arm's server on a host right now, so two runs never mix.

Two people (or two terminals) benchmark one host at once. A run that uses an arm records
a lease beside the arm's state, one small file per run
(`<workdir>/.specops/leases/<arm>/<key>.json`, replaced atomically: two runs never
overwrite each other's record). Another run may share the arm only when its launch
arguments are identical (args hash); otherwise it is refused at once, naming the holder,
or waits for the lease (`--wait`), or takes the arm over (`--take-over`): it writes
`<key>.revoked` for the holder, whose next point then fails with "arm X taken over by
run Y" instead of whatever error the restart caused.

A claim decides under a per-arm lock on the host (a `.lock` symlink naming its owner's
token: `ln -s` is atomic), so of two runs claiming at once with different arguments
exactly one wins; only its owner removes it, and a stale one is broken by rename.
A lease is dead when its heartbeat (the file's
mtime on the host's clock, refreshed every HEARTBEAT_S by a daemon thread) is older than
EXPIRE_S, or when its CLI ran on this machine and that process is gone. Dead leases are
ignored and removed, leaving a revoked marker (in case the holder was only slow).
"""

from __future__ import annotations

import base64
import getpass
import json
import os
import posixpath
import re
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal, Sequence

import specops.servers.recordfile as recordfile
from specops.errors import SpecopsError
from specops.hostfiles import paths
from specops.servers.lifecycle import ServerState, probe
from specops.servers.remote import POLL_HEALTH_S, q
from specops.transport.base import Transport

HEARTBEAT_S = 5.0
#: A lease whose heartbeat is older than this is dead (three missed beats and a grace).
EXPIRE_S = 3 * HEARTBEAT_S + 5.0
#: How often a waiting run (`--wait`) looks again.
WAIT_POLL_S = 1.0
#: A claim decides under a per-arm lock (a directory); one older than this was left by a dead CLI.
LOCK_STALE_S = 30.0
LOCK_WAIT_S = 60.0
_TIMEOUT = 30.0

Mode = Literal["refuse", "wait", "take_over"]
#: what a lease's key and arm may be (LeaseBook.key, an arm name): they name files
_PLAIN = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


class LeaseHeld(SpecopsError):
    """Another run holds the arm with other launch arguments (refused, or waited too long)."""


class TakenOver(SpecopsError):
    """This run's arm was taken over by another run (or replaced under it): the arm's sweep ends."""


@dataclass
class LeasePolicy:
    """What a run does when an arm it needs is held with other arguments."""

    mode: Mode = "refuse"
    wait_timeout_s: float = 1800.0


@dataclass
class Lease:
    """One run's record of using one arm (the file's content, plus its age on the host)."""

    run_id: str
    arm: str
    key: str
    args_hash: str
    pid: int
    pid_start: str
    user: str
    cli_host: str
    since: float
    heartbeat: float
    command: str = ""
    argv: list[str] = field(default_factory=list)
    age_s: float = 0.0  # not stored: the host's now minus the file's mtime

    def to_json(self) -> bytes:
        data = asdict(self)
        data.pop("age_s")
        return json.dumps(data, sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: bytes, age_s: float) -> "Lease":
        """Raises recordfile.BadRecord (a ValueError) for a file that does not fit. The key
        and arm name files (a dead lease is removed, a revoked marker written by them): one
        that is not a plain name (`../../x`) is refused."""
        lease = recordfile.load(cls, raw, age_s=age_s)
        for name, value in (("key", lease.key), ("arm", lease.arm)):
            if not _PLAIN.fullmatch(value):
                raise recordfile.BadRecord(f"{name!r} {value[:40]!r} is not a plain name")
        recordfile.pid("pid", lease.pid)  # its CLI's, asked with kill(pid, 0): -1 or 0 would always answer
        return lease

    def who(self) -> str:
        """`run R (user U on host H, pid P, since 2026-11-30 10:53:01 UTC)`."""
        return (f"run {self.run_id} (user {self.user} on {self.cli_host}, pid {self.pid}, "
                f"since {utc(self.since)})")


def utc(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))


@dataclass
class ArmView:
    """What the host says about one arm, read in one round trip: every lease file, the
    revoked markers, the server's state file."""

    leases: list[Lease]
    revoked: dict[str, dict[str, Any]]  # key -> the marker file's JSON
    state: ServerState | None

    def live(self, here: str | None = None) -> list[Lease]:
        return [lease for lease in self.leases if is_live(lease, here) and lease.key not in self.revoked]


@dataclass
class Claim:
    """A claim that succeeded. `lead`: no other run with these arguments is ahead, so this
    run launches (or reuses) the server; else it waits for theirs. `shared_with`: run ids
    of the other holders with identical arguments."""

    arm: str
    lead: bool
    shared_with: list[str]


# ---------------------------------------------------------------- this process

def _proc_start(pid: int) -> str:
    """/proc/<pid>/stat starttime: tells a process from a later one with the same pid."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return fields[19] if fields[0] != "Z" else "zombie"
    except (OSError, IndexError):
        return ""


def pid_alive(pid: int, start: str) -> bool:
    """Whether process `pid` (started at `start`, when known) still runs on this machine."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    now = _proc_start(pid)
    if now == "zombie":
        return False
    return not (start and now and now != start)


def this_host() -> str:
    return socket.gethostname()


def is_live(lease: Lease, here: str | None = None) -> bool:
    """Heartbeat recent, and (when its CLI ran here) its process still running."""
    if lease.age_s > EXPIRE_S:
        return False
    if lease.cli_host == (here or this_host()) and not pid_alive(lease.pid, lease.pid_start):
        return False
    return True


# ---------------------------------------------------------------- host side

def _lock_script(d: str, owner: str) -> str:
    """Take the arm's claim lock: a symlink whose target is the owner's token (`ln -s` is
    atomic and fails when the name exists; the token reads back whole). One left by a CLI
    that died holding it (older than LOCK_STALE_S) is broken by renaming it aside and
    checking the renamed one is the lock judged stale; a fresh lock taken in between is put
    back, never removed. Gives up after LOCK_WAIT_S."""
    lock = q(posixpath.join(d, ".lock"))
    aside = q(posixpath.join(d, f".lock.broken.{owner}"))
    return (f"mkdir -p {q(d)} || exit 12; n=0; until ln -sT {q(owner)} {lock} 2>/dev/null; do "
            f"o=$(readlink {lock} 2>/dev/null); "
            f"a=$(( $(date +%s) - $(stat -c %Y {lock} 2>/dev/null || date +%s) )); "
            f"if [ \"$a\" -gt {int(LOCK_STALE_S)} ] && mv -T {lock} {aside} 2>/dev/null; then "
            f"g=$(readlink {aside} 2>/dev/null); "
            f"[ \"$g\" = \"$o\" ] || ln -sT \"$g\" {lock} 2>/dev/null; rm -rf -- {aside}; fi; "
            f"n=$((n+1)); [ $n -gt {int(LOCK_WAIT_S * 20)} ] && {{ echo @@LOCKBUSY; exit 14; }}; sleep 0.05; done")


def _listing(folder: str) -> list[str]:
    """Script lines printing one arm folder's lease files (`@@L mtime base64`) and revoked
    markers (`@@R key base64`); `folder` is a shell word (quoted path or `"$d"`)."""
    return [f"for f in {folder}/*.json; do [ -e \"$f\" ] || continue; "
            "echo \"@@L $(stat -c %Y \"$f\") $(base64 -w0 < \"$f\") $(printf %s \"$f\" | base64 -w0)\"; done",
            f"for f in {folder}/*.revoked; do [ -e \"$f\" ] || continue; b=${{f##*/}}; "
            "echo \"@@R ${b%.revoked} $(base64 -w0 < \"$f\") $(printf %s \"$f\" | base64 -w0)\"; done"]


def _parse_views(stdout: str, host: str) -> dict[str, ArmView]:
    """The listing's lines as one ArmView per arm (`@@A arm` starts an arm; lines before any
    belong to ""). Ages are the host's now (`@@NOW`) minus each file's mtime. Each file line
    ends with its path (base64), named in the warning when the file is skipped."""
    now = 0.0
    views: dict[str, ArmView] = {}
    view = views.setdefault("", ArmView([], {}, None))
    for line in stdout.splitlines():
        parts = line.split(" ")
        try:
            if parts[0] == "@@NOW":
                now = float(parts[1])
            elif parts[0] == "@@A" and len(parts) == 2:
                view = views.setdefault(parts[1], ArmView([], {}, None))
            elif parts[0] == "@@L" and len(parts) == 4:
                view.leases.append(Lease.from_json(base64.b64decode(parts[2]), max(0.0, now - float(parts[1]))))
            elif parts[0] == "@@R" and len(parts) == 4:
                view.revoked[parts[1]] = recordfile.load_object(base64.b64decode(parts[2]) or b"{}")
            elif parts[0] == "@@S" and len(parts) == 3:
                view.state = ServerState.from_json(base64.b64decode(parts[1]), recordfile.named(parts[2]))
        except ValueError as exc:  # a torn or foreign file is no lease
            recordfile.skipped(recordfile.named(parts[-1]) if len(parts) > 2 else line[:80], host, exc)
    return views


def read_arm(transport: Transport, workdir: str, arm: str, *, lock: str | None = None) -> ArmView:
    """Every lease of `arm`, the revoked markers and the server state, in one round trip
    (with `lock`, an owner token, after taking the arm's claim lock as that owner: `unlock`
    with the same token releases it). Markers older than a day (their holder long gone)
    are removed on the way."""
    d = paths.leases_dir(workdir, arm)
    script = "\n".join([
        _lock_script(d, lock) if lock else "true",
        "echo \"@@NOW $(date +%s)\"",
        *_listing(q(d)),
        f"s={q(paths.server_state(workdir, arm))}; [ -e \"$s\" ] && echo \"@@S $(base64 -w0 < \"$s\") "
        f"{base64.b64encode(paths.server_state(workdir, arm).encode()).decode()}\"",
        f"find {q(d)} -maxdepth 1 -name '*.revoked' -mmin +1440 -delete 2>/dev/null; true",
    ])
    res = transport.run(script, timeout=_TIMEOUT + LOCK_WAIT_S)
    if not res.ok:
        what = "its claim lock stayed taken" if "@@LOCKBUSY" in res.stdout else res.tail(3)
        raise SpecopsError(f"reading the leases of arm '{arm}' failed: {what}", where=f"host {transport.name}")
    return _parse_views(res.stdout, transport.name)[""]


def holders(transport: Transport, workdir: str) -> dict[str, list[Lease]]:
    """The live leases of every arm on the host, in one round trip: who is using which
    server right now (`specops status`, and the guard before a step changes SGLang).
    Read only: dead leases are left for the next claim to clear."""
    root = posixpath.dirname(paths.leases_dir(workdir, "x"))
    script = "\n".join([
        "echo \"@@NOW $(date +%s)\"",
        f"for d in {q(root)}/*/; do [ -d \"$d\" ] || continue; a=${{d%/}}; echo \"@@A ${{a##*/}}\"",
        *_listing('"${d%/}"'),
        "done",
    ])
    res = transport.run(script, timeout=_TIMEOUT)
    if not res.ok:
        raise SpecopsError(f"reading the arms' leases failed: {res.tail(3)}", where=f"host {transport.name}")
    here = this_host()
    views = _parse_views(res.stdout, transport.name)
    return {arm: live for arm, view in views.items() if arm and (live := view.live(here))}


def unlock(transport: Transport, workdir: str, arm: str, owner: str) -> None:
    """Release the arm's claim lock if `owner` holds it: a lock broken as stale and taken
    by another run since is that run's, and stays."""
    lock = q(posixpath.join(paths.leases_dir(workdir, arm), ".lock"))
    transport.run(f"[ \"$(readlink {lock} 2>/dev/null)\" = {q(owner)} ] && rm -f -- {lock}; true", timeout=_TIMEOUT)


def _write_script(workdir: str, leases: Sequence[Lease]) -> str:
    """Replace each lease file atomically (temp + mv), unless its revoked marker exists:
    a taken-over lease is never written back by a late heartbeat."""
    lines = []
    for lease in leases:
        d = paths.leases_dir(workdir, lease.arm)
        f = paths.lease_file(workdir, lease.arm, lease.key)
        tmp = posixpath.join(d, f".{lease.key}.tmp")
        blob = base64.b64encode(lease.to_json()).decode()
        lines.append(f"mkdir -p {q(d)} || exit 12; if [ -e {q(paths.lease_revoked(workdir, lease.arm, lease.key))} ]; "
                     f"then echo {q('@@REVOKED ' + lease.arm)}; else (umask 077; rm -f -- {q(tmp)}; "
                     f"printf %s {q(blob)} | base64 -d > {q(tmp)}) "
                     f"&& mv -f {q(tmp)} {q(f)} || exit 13; fi")
    # a lease holds the run's argv: its file is created 0600 (the umask, before the first byte)
    return "\n".join(lines)


def write_leases(transport: Transport, workdir: str, leases: Sequence[Lease]) -> set[str]:
    """Write (or refresh) leases; returns the arms whose lease had been revoked."""
    if not leases:
        return set()
    res = transport.run(_write_script(workdir, leases), timeout=_TIMEOUT)
    if not res.ok:
        raise SpecopsError(f"writing the lease of arm(s) {', '.join(sorted({x.arm for x in leases}))} failed: "
                           f"{res.tail(3)}", where=f"host {transport.name}")
    return {ln.split(" ", 1)[1] for ln in res.stdout.splitlines() if ln.startswith("@@REVOKED ")}


def revoke(transport: Transport, workdir: str, leases: Sequence[Lease], *, by: Lease, reason: str) -> None:
    """Tell each holder its arm is no longer its own (`<key>.revoked`), and drop its lease."""
    for lease in leases:
        marker = json.dumps({"by": by.run_id, "user": by.user, "cli_host": by.cli_host, "at": time.time(),
                             "reason": reason}).encode()
        transport.put(marker, paths.lease_revoked(workdir, lease.arm, lease.key), mode=0o600)
    remove(transport, workdir, leases)


def remove(transport: Transport, workdir: str, leases: Sequence[Lease], *, markers: bool = False) -> None:
    files = [paths.lease_file(workdir, x.arm, x.key) for x in leases]
    if markers:
        files += [paths.lease_revoked(workdir, x.arm, x.key) for x in leases]
    if files:
        transport.run(["rm", "-f", "--", *files], timeout=_TIMEOUT)


def argv_difference(mine: Sequence[str], theirs: Sequence[str], limit: int = 3) -> str:
    """`--max-running-requests 64 -> 32` for the flags whose values differ (first few)."""
    def flags(argv: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for i, a in enumerate(argv):
            if a.startswith("--"):
                nxt = argv[i + 1] if i + 1 < len(argv) else ""
                out[a] = "" if nxt.startswith("--") else nxt
        return out
    a, b = flags(theirs), flags(mine)
    diffs = []
    for name in sorted(set(a) | set(b)):
        if a.get(name) != b.get(name):
            was = "(absent)" if name not in a else a[name] or "(set)"
            now = "(absent)" if name not in b else b[name] or "(set)"
            diffs.append(f"{name} {was} -> {now}")
    if not diffs:
        return "other launch arguments"
    return ", ".join(diffs[:limit]) + (f" and {len(diffs) - limit} more" if len(diffs) > limit else "")


# ---------------------------------------------------------------- one run's leases

@dataclass
class _Held:
    transport: Transport
    workdir: str
    lease: Lease


class LeaseBook:
    """The leases one run holds, on every host. A daemon thread refreshes their heartbeats
    every HEARTBEAT_S; it also notes leases found revoked (the sweep checks for itself
    around each point all the same)."""

    def __init__(self, run_id: str, command: str = "", policy: LeasePolicy | None = None):
        self.run_id = run_id
        self.command = command
        self.policy = policy or LeasePolicy()
        self.pid = os.getpid()
        self.pid_start = _proc_start(self.pid)
        self.cli_host = this_host()
        try:
            self.user = getpass.getuser()
        except (KeyError, OSError):
            self.user = str(os.getuid())
        self._held: dict[tuple[str, str], _Held] = {}
        self._lock = threading.Lock()
        #: a heartbeat's write and a release's removal never overlap: a late beat would write back
        #: a lease just released, and the run still using the arm would not stop its server
        self._io = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.revoked: set[tuple[str, str]] = set()

    @property
    def key(self) -> str:
        raw = f"{self.run_id}.{self.cli_host}.{self.pid}"
        return "".join(c if c.isalnum() or c in "-_." else "-" for c in raw)

    def held(self, host: str, arm: str) -> Lease | None:
        with self._lock:
            h = self._held.get((host, arm))
            return h.lease if h else None

    def _lease(self, arm: str, args_hash: str, argv: Sequence[str]) -> Lease:
        now = time.time()
        return Lease(run_id=self.run_id, arm=arm, key=self.key, args_hash=args_hash, pid=self.pid,
                     pid_start=self.pid_start, user=self.user, cli_host=self.cli_host, since=now, heartbeat=now,
                     command=self.command, argv=list(argv))

    def claim(self, transport: Transport, host: str, workdir: str, arm: str, args_hash: str,
              argv: Sequence[str] = (), *, on_wait: Callable[[str], None] | None = None) -> Claim:
        """Lease `arm` for this run (see the module's docstring). Raises LeaseHeld when
        another run holds it with other arguments (policy `refuse`, or `wait` past its
        timeout); with `take_over`, revokes that run's lease first."""
        held = self.held(host, arm)
        if held is not None and held.args_hash == args_hash:
            return Claim(arm, True, [])
        where = f"host {host}, arm '{arm}'"
        deadline = time.monotonic() + self.policy.wait_timeout_s
        waited_for: str | None = None
        while True:
            mine = self._lease(arm, args_hash, argv)
            token = f"{mine.key}.{uuid.uuid4().hex[:12]}"
            view = read_arm(transport, workdir, arm, lock=token)
            try:
                self._bury(transport, workdir, view)
                others = [x for x in view.live(self.cli_host) if x.key != mine.key]
                conflicts = [x for x in others if x.args_hash != args_hash]
                if conflicts and self.policy.mode == "take_over":
                    revoke(transport, workdir, conflicts, by=mine, reason="take-over")
                    others = [x for x in others if x not in conflicts]
                    conflicts = []
                if not conflicts:
                    write_leases(transport, workdir, [mine])
            finally:
                unlock(transport, workdir, arm, token)
            if not conflicts:
                with self._lock:
                    self._held[(host, arm)] = _Held(transport, workdir, mine)
                self._start_heartbeat()
                same = sorted({x.run_id for x in others})
                return Claim(arm, lead=not others, shared_with=same)
            holder = min(conflicts, key=lambda x: (x.since, x.key))
            differs = argv_difference(argv, holder.argv)
            if self.policy.mode == "refuse":
                raise LeaseHeld(f"arm {arm} is in use by {holder.who()} with other launch arguments ({differs}); "
                                "--wait waits until that run is done, --take-over restarts the arm with yours "
                                "(that run's next point then fails)", where=where)
            if time.monotonic() >= deadline:
                raise LeaseHeld(f"gave up after waiting {self.policy.wait_timeout_s:.0f}s for arm {arm}, still in use "
                                f"by {holder.who()} with other launch arguments ({differs}); raise --wait-timeout, "
                                "or --take-over", where=where)
            line = f"waiting for arm {arm}: in use by {holder.who()}"
            if on_wait is not None and line != waited_for:
                on_wait(line)
            waited_for = line
            time.sleep(WAIT_POLL_S)

    def guard_tree(self, transport: Transport, host: str, workdir: str, what: str, *,
                   on_wait: Callable[[str], None] | None = None) -> None:
        """Before a step changes the host's SGLang (checkout, wheel tree, patches, install):
        another run's live lease means its servers were launched from what this step is
        about to change, and its next relaunch would measure this run's code. Refused
        naming that run (policy `refuse`), waited for (`wait`), or let through (`take_over`:
        the arms' own claims then take them over)."""
        if self.policy.mode == "take_over":
            return
        where = f"host {host}"
        deadline = time.monotonic() + self.policy.wait_timeout_s
        waited_for: str | None = None
        while True:
            users = [x for leases in holders(transport, workdir).values() for x in leases if x.run_id != self.run_id]
            if not users:
                return
            holder = min(users, key=lambda x: (x.since, x.key))
            arms = ", ".join(sorted({x.arm for x in users if x.run_id == holder.run_id}))
            if self.policy.mode == "refuse":
                raise LeaseHeld(f"{what} would change the SGLang that {holder.who()} is measuring (arm {arms}); "
                                "--wait waits until that run is done, --take-over goes ahead", where=where)
            if time.monotonic() >= deadline:
                raise LeaseHeld(f"gave up after waiting {self.policy.wait_timeout_s:.0f}s to change SGLang: "
                                f"still in use by {holder.who()} (arm {arms}); raise --wait-timeout, or --take-over",
                                where=where)
            line = f"waiting to change SGLang: in use by {holder.who()} (arm {arms})"
            if on_wait is not None and line != waited_for:
                on_wait(line)
            waited_for = line
            time.sleep(WAIT_POLL_S)

    def _bury(self, transport: Transport, workdir: str, view: ArmView) -> None:
        """Remove dead leases; a dead held one gets a revoked marker (its holder may only be slow)."""
        dead = [x for x in view.leases if not is_live(x, self.cli_host) and x.key != self.key]
        held = [x for x in dead if x.key not in view.revoked]
        if held:
            revoke(transport, workdir, held, by=self._lease("", "", ()), reason="expired")
        rest = [x for x in dead if x not in held]
        remove(transport, workdir, rest)

    def check(self, transport: Transport, host: str, arm: str) -> ArmView:
        """The arm as the host has it now; raises TakenOver when this run's lease was revoked."""
        with self._lock:
            h = self._held.get((host, arm))
        assert h is not None, f"arm {arm} not leased on {host}"
        view = read_arm(transport, h.workdir, arm)
        marker = view.revoked.get(self.key)
        if marker is not None:
            raise TakenOver(taken_over_text(arm, marker), where=f"host {host}, arm '{arm}'")
        return view

    def release(self, host: str, arm: str) -> list[Lease]:
        """Drop this run's lease of `arm` (and any revoked marker for it); returns the other
        live holders, so the caller stops the server only when none is left."""
        with self._io:
            with self._lock:
                h = self._held.pop((host, arm), None)
            if h is None:
                return []
            remove(h.transport, h.workdir, [h.lease], markers=True)
        view = read_arm(h.transport, h.workdir, arm)
        return [x for x in view.live(self.cli_host) if x.key != self.key]

    def release_all(self) -> None:
        """At the end of the run (normally, on failure, after Ctrl-C): every lease left."""
        self._stop.set()
        with self._lock:
            keys = list(self._held)
        for host, arm in keys:
            try:
                self.release(host, arm)
            except SpecopsError:
                pass  # the host is gone: the lease expires by itself

    # ----- heartbeat ------------------------------------------------------------------

    def _start_heartbeat(self) -> None:
        with self._lock:
            if self._thread is not None or self._stop.is_set():
                return
            self._thread = threading.Thread(target=self._beat, name=f"lease-{self.run_id}", daemon=True)
            self._thread.start()

    def beat(self) -> None:
        """Refresh every held lease now, one round trip per host."""
        with self._io:
            with self._lock:
                groups: dict[str, list[_Held]] = {}
                for (host, _arm), h in self._held.items():
                    groups.setdefault(host, []).append(h)
            for host, items in groups.items():
                now = time.time()
                for h in items:
                    h.lease.heartbeat = now
                revoked = write_leases(items[0].transport, items[0].workdir, [h.lease for h in items])
                self.revoked |= {(host, arm) for arm in revoked}

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                self.beat()
            except Exception:  # noqa: BLE001 - a missed beat is retried; the lease expires only after several
                continue


def join(book: LeaseBook, transport: Transport, host: str, arm: str, args_hash: str, *, timeout_s: float,
         avoid: tuple[int, str] | None = None) -> ServerState | None:
    """A run sharing an arm waits for the server the leading run (same arguments) starts,
    until it is alive (its readiness is the caller's to wait for); `avoid`: a dead
    server's (pid, start) that does not count. None when no other live run with these
    arguments is left to start one: then the caller launches it itself."""
    deadline = time.monotonic() + timeout_s
    while True:
        view = book.check(transport, host, arm)
        st = view.state
        if st is not None and st.args_hash == args_hash and (st.pid, st.proc_start) != avoid:
            (p,) = probe(transport, [st], POLL_HEALTH_S)  # alive is all it waits for
            if p.alive:
                return st
        leaders = [x for x in view.live(book.cli_host) if x.args_hash == args_hash and x.key != book.key]
        if not leaders:
            return None
        if time.monotonic() >= deadline:
            raise SpecopsError(f"arm {arm}: {leaders[0].who()}, which shares it, started no server in "
                               f"{timeout_s:.0f}s", where=f"host {host}, arm '{arm}'")
        time.sleep(0.5)


def taken_over_text(arm: str, marker: dict[str, Any]) -> str:
    by = marker.get("by") or "another run"
    who = f" (user {marker['user']} on {marker['cli_host']})" if marker.get("user") and marker.get("cli_host") else ""
    if marker.get("reason") == "expired":
        return (f"arm {arm} taken over by run {by}{who}: this run's lease had expired "
                f"(no heartbeat for {EXPIRE_S:.0f}s)")
    return f"arm {arm} taken over by run {by}{who}"
