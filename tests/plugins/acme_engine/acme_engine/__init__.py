"""A serving engine from outside specops: specops's simulator speaking SGLang's face, under its
own name (`engine: acme-sim` in hosts.yaml) and version label ("Acme"), with a step of its own.

Everything else is inherited: a plugin subclasses `specops.engines.ServingEngine` (here through
the simulated SGLang engine) and declares its `spec`: name, face and features. The face says
which server's lines, metrics and tree it shows (the playbooks lay out SGLang's tree for it);
the features say what it can do (the playbooks patch its tree because it has the patch route).
Its own step kind (`acme_stamp`, in `stamp.py`) runs where the deploy playbook's
`engine_steps` placeholder stands, on its hosts only (`deploy_steps`)."""

from __future__ import annotations

from typing import Any, Mapping

from specops.engines import EngineSpec, Feature
from specops.engines.sglang import Simulator

#: the marker file the plugin's own deploy step writes in the host's workdir
STAMP = ".acme-stamp"


class AcmeSim(Simulator):
    """The simulated SGLang server, registered by this package's entry point."""

    spec = EngineSpec("acme-sim", face="sglang",
                      features=frozenset({Feature.PATCH_ROUTE, Feature.NATIVE_TIERS, Feature.CPU, Feature.SIMULATED}))
    title = "Acme"

    def step_kinds(self) -> Mapping[str, Any]:
        from acme_engine.stamp import AcmeStamp  # steps sit above engines in specops: imported when asked

        return {AcmeStamp.name: AcmeStamp}

    def deploy_steps(self) -> list[dict[str, Any]]:
        return [{"name": "acme stamp", "acme_stamp": {"path": "{{ workdir }}/" + STAMP,
                                                       "text": "stamped by {{ engine }} for {{ arms | list | join(',') }}"}}]
