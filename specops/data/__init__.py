"""What ships with specops: the playbooks, the patch sets and the starter hosts.yaml.

Read through importlib.resources so an installed specops (pip, pipx) finds them; a
`./playbooks` folder or `./hosts.yaml` in the working directory still wins.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path


def _shipped(*parts: str) -> Path:
    # The package is always a plain directory (setuptools installs data files beside
    # the modules), so the traversable is a real path.
    return Path(str(files(__name__).joinpath(*parts)))


def shipped_inventory() -> Path:
    """The starter hosts.yaml with the simulated `local` host."""
    return _shipped("hosts.yaml")


def shipped_playbooks() -> Path:
    return _shipped("playbooks")


def shipped_patches() -> Path:
    return _shipped("playbooks", "patches")


def is_shipped(path: Path) -> bool:
    """True for a file inside the installed package's data (never a place to write beside)."""
    try:
        path.resolve().relative_to(_shipped().resolve())
    except ValueError:
        return False
    return True


def default_playbook(name: str) -> Path:
    """./playbooks/NAME.yaml, else the one shipped with the package."""
    local = Path("playbooks") / f"{name}.yaml"
    if local.exists():
        return local
    return shipped_playbooks() / f"{name}.yaml"
