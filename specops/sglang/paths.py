"""Names inside an SGLang checkout that every layer agrees on (patching, steps, the simulator).
specops's own state, under a host's work directory and inside a tree, is hostfiles/paths.py's.
Every path is POSIX: the host may not be this machine.
"""

from __future__ import annotations

# ---------------------------------------------------------------- inside an SGLang checkout
# Repository shape. A wheel's `sglang/X` is the repository's `python/sglang/X`.

PKG = "python/sglang"
SRT = f"{PKG}/srt"
SERVER_ARGS = f"{SRT}/server_args.py"
#: Files that may declare `__version__`, in the order they are believed: `version.py` holds
#: the literal up to 0.4.x; from 0.5 it imports it from the build-generated `_version.py`.
VERSION_FILES = (f"{PKG}/version.py", f"{PKG}/_version.py")
SPECULATIVE_DIR = f"{SRT}/speculative"
EAGLE_WORKERS = (f"{SPECULATIVE_DIR}/eagle_worker.py", f"{SPECULATIVE_DIR}/eagle_worker_v2.py")
ADAPTIVE_PARAMS = f"{SPECULATIVE_DIR}/adaptive_spec_params.py"
ARG_GROUPS_DIR = f"{SRT}/arg_groups"
FIELDS_DIR = f"{ARG_GROUPS_DIR}/fields"
ARG_GROUP_FIELDS = (f"{FIELDS_DIR}/__init__.py", f"{FIELDS_DIR}/spec.py")
LAUNCH_SERVER = f"{PKG}/launch_server.py"

#: Members of a wheel that belong to the tree (`sglang/...`, unpacked under `python/`).
WHEEL_PACKAGE_PREFIX = "sglang/"
#: Written last when a tree is unpacked from a wheel: which version and wheel it came from.
WHEEL_MARKER = ".specops-wheel.json"
