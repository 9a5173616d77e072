"""`python -m specops.sim --sglang-tree TREE <launch_server flags>`: the simulator program
(specops/sim/program.py says its options). It serves plain HTTP only, so `ssl` is kept out
of the process before asyncio and aiohttp are imported (specops/plainhttp.py)."""

import sys

from specops.plainhttp import without_tls

if __name__ == "__main__":
    without_tls()
    from specops.sim.program import main

    sys.exit(main())
