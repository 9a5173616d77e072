"""A serving engine from outside specops: specops's simulator speaking SGLang's face, under its
own name (`engine: acme-sim` in hosts.yaml) and version label ("Acme").

Everything else is inherited: a plugin subclasses `specops.engines.ServingEngine` (here through
the simulated SGLang engine) and declares its `spec`: name, face and features. The face says
which server's lines, metrics and tree it shows (the playbooks lay out SGLang's tree for it);
the features say what it can do (the playbooks patch its tree because it has the patch route)."""

from __future__ import annotations

from specops.engines import EngineSpec, Feature
from specops.engines.sglang import Simulator


class AcmeSim(Simulator):
    """The simulated SGLang server, registered by this package's entry point."""

    spec = EngineSpec("acme-sim", face="sglang",
                      features=frozenset({Feature.PATCH_ROUTE, Feature.NATIVE_TIERS, Feature.CPU, Feature.SIMULATED}))
    title = "Acme"
