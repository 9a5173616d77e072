"""Per-step overhead: a 20-step no-op playbook on one loopback host (or N, in parallel).

Compares, on the same freshly started sshd: specops (`deploy`), a plain fabric
`Connection.run` loop (the floor for "one command per step over one connection"; one
host only), `ansible-playbook` (ansible-core, pipelining + ControlPersist) and `pyinfra`
(v3, 20 `server.shell` operations over its SSH connector), the last two when installed
(`pip install -e '.[bench]'`; a missing tool is skipped with a message). Each tool is
timed as a whole process (wall time, imports included, for all alike); prints the
median per tool and the ratios specops/other. Beside them, the CLI's own start
(`specops --help`, median of 5: what every command pays before it does anything) and a
one-step specops playbook (median of the repeats: the cheapest real deploy).

`--string` writes each step as a shell string (`shell: "true"`, Ansible's `shell:`)
instead of an argv list (`shell: [true]`, Ansible's `command:`). `--hosts N` runs the
playbook on N loopback hosts of the one sshd at once, every tool with N forks.

    python bench/overhead.py [--steps 20] [--repeats 3] [--string] [--hosts N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: The checkout this script is in: every specops process runs its code (`python -m specops`
#: from here), so an older checkout with this script measures that code the same way.
REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from tests.support.sshd import start_sshd, stop_sshd  # noqa: E402


def time_specops(server, root: Path, steps: int, string: bool = False, hosts: int = 1) -> float:
    inv = root / "hosts.yaml"
    names = [f"h{i}" for i in range(hosts)]
    inv.write_text(yaml.safe_dump({"hosts": {n: server.host_entry(i, workdir=str(root / "w" / n))
                                             for i, n in enumerate(names)}}))
    pb = root / "noop.yaml"
    cmd: str | list[str] = "true" if string else ["true"]
    pb.write_text(yaml.safe_dump({"name": "noop", "steps": [{"name": f"s{i}", "shell": cmd} for i in range(steps)]}))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "specops", "deploy", "--host", ",".join(names), "-p", str(pb),
                    "-i", str(inv), "--runs-dir", str(root / "runs"), "--forks", str(hosts)],
                   check=True, stdout=subprocess.DEVNULL, cwd=REPO)
    return time.perf_counter() - t0


def time_cli_start(repeats: int = 5) -> float:
    """`specops --help` (as `python -m specops`, like the deploys here): what every command
    pays before it does anything; median wall time of `repeats`."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "specops", "--help"], check=True, stdout=subprocess.DEVNULL, cwd=REPO)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_fabric(server, steps: int) -> float:
    code = (
        "import sys,time,fabric\n"
        "t0=time.perf_counter()\n"
        "c=fabric.Connection(sys.argv[1],port=int(sys.argv[2]),user=sys.argv[3],connect_kwargs={'key_filename':sys.argv[4]})\n"
        "c.client.load_system_host_keys()\n"
        "import paramiko; c.client.set_missing_host_key_policy(paramiko.AutoAddPolicy())\n"
        f"[c.run('true',hide=True) for _ in range({steps})]\n"
        "print(time.perf_counter()-t0)\n"
    )
    # Measured in its own interpreter, like the other two, so import time counts for all.
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, server.address(0), str(server.port), server.user, server.key_path],
                   check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def _tool(name: str) -> str | None:
    """A tool installed beside this interpreter (a venv's bin), else on PATH."""
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def time_ansible(server, root: Path, steps: int, string: bool = False, hosts: int = 1) -> float | None:
    exe = _tool("ansible-playbook")
    if not exe:
        return None
    inv = root / "ansible_hosts"
    inv.write_text("".join(
        f"h{i} ansible_host={server.address(i)} ansible_port={server.port} ansible_user={server.user} "
        f"ansible_ssh_private_key_file={server.key_path} ansible_python_interpreter={sys.executable}\n"
        for i in range(hosts)))
    pb = root / "noop.yml"
    module = "shell" if string else "command"
    pb.write_text(yaml.safe_dump([{"hosts": "all", "gather_facts": False,
                                   "tasks": [{"name": f"s{i}", module: "true"} for i in range(steps)]}]))
    env = dict(os.environ, ANSIBLE_PIPELINING="True", ANSIBLE_HOST_KEY_CHECKING="False",
               ANSIBLE_SSH_ARGS="-o ControlMaster=auto -o ControlPersist=60s -o UserKnownHostsFile=/dev/null",
               ANSIBLE_CONTROL_PATH_DIR=str(root / "cp"), ANSIBLE_LOCAL_TEMP=str(root / "tmp"))
    t0 = time.perf_counter()
    subprocess.run([exe, "-i", str(inv), "-f", str(hosts), str(pb)], check=True, env=env, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def time_pyinfra(server, root: Path, steps: int, hosts: int = 1) -> float | None:
    """pyinfra's CLI with an inventory.py naming the hosts' connection data and a deploy
    file of `steps` separate `server.shell` operations; -y skips the confirmation."""
    exe = _tool("pyinfra")
    if not exe:
        return None
    inv = root / "pyinfra_inventory.py"
    data = {"ssh_port": server.port, "ssh_user": server.user, "ssh_key": server.key_path,
            "ssh_strict_host_key_checking": "no", "ssh_known_hosts_file": str(root / "pyinfra_known_hosts")}
    inv.write_text(f"hosts = {[(server.address(i), data) for i in range(hosts)]!r}\n")
    deploy = root / "pyinfra_deploy.py"
    deploy.write_text("from pyinfra.operations import server\n" + "".join(
        f"server.shell(name='s{i}', commands=['true'])\n" for i in range(steps)))
    t0 = time.perf_counter()
    subprocess.run([exe, "-y", "--parallel", str(hosts), str(inv), str(deploy)], check=True, cwd=root,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--string", action="store_true", help="steps as shell strings, not argv lists")
    ap.add_argument("--hosts", type=int, default=1, help="loopback hosts, run at once (forks = hosts)")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specops-overhead-"))
    cli_start = time_cli_start()
    server, proc = start_sshd(root / "sshd", hosts=max(args.hosts, 1))
    one_step: list[float] = []
    try:
        results: dict[str, list[float]] = {"specops": [], "fabric loop": [], "ansible-playbook": [],
                                           "pyinfra": []}
        for r in range(args.repeats):
            work = root / f"r{r}"
            work.mkdir()
            results["specops"].append(time_specops(server, work, args.steps, args.string, args.hosts))
            (work / "one").mkdir()
            one_step.append(time_specops(server, work / "one", 1, args.string, args.hosts))
            if args.hosts == 1:
                results["fabric loop"].append(time_fabric(server, args.steps))
            a = time_ansible(server, work, args.steps, args.string, args.hosts)
            if a is not None:
                results["ansible-playbook"].append(a)
            pi = time_pyinfra(server, work, args.steps, args.hosts)
            if pi is not None:
                results["pyinfra"].append(pi)
    finally:
        stop_sshd(proc)
        shutil.rmtree(root, ignore_errors=True)
    form = "shell strings" if args.string else "argv lists"
    where = "one loopback host" if args.hosts == 1 else f"{args.hosts} loopback hosts, forks {args.hosts}"
    print(f"{args.steps}-step no-op playbook ({form}), {where}, median of {args.repeats} (whole process, wall s)")
    print(f"  specops --help     {cli_start:7.3f} s   (median of 5)")
    print(f"  specops, 1 step    {statistics.median(one_step):7.3f} s   (median of {args.repeats})")
    med = {k: statistics.median(v) for k, v in results.items() if v}
    for name, value in med.items():
        print(f"  {name:18s} {value:7.3f} s   {1000 * value / args.steps:6.1f} ms/step")
    if "ansible-playbook" in med:
        print(f"  specops / ansible  = {med['specops'] / med['ansible-playbook']:.2f}")
    else:
        print("  ansible-playbook not installed: pip install -e '.[bench]'")
    if "pyinfra" in med:
        print(f"  specops / pyinfra  = {med['specops'] / med['pyinfra']:.2f}")
    else:
        print("  pyinfra not installed: pip install -e '.[bench]'")
    if "fabric loop" in med:
        print(f"  specops / fabric   = {med['specops'] / med['fabric loop']:.2f}")


if __name__ == "__main__":
    main()
