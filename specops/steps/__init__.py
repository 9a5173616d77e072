"""Step kinds by name. Each module holds one kind (or two closely related ones)."""

from __future__ import annotations

from specops.steps.base import StepKind
from specops.steps.bench import Bench
from specops.steps.files import Copy, Fetch
from specops.steps.git import Git
from specops.steps.gpus import GPUPreflight
from specops.steps.patch import Patch
from specops.steps.server import Server, Stop
from specops.steps.sglang_install import SGLangInstall
from specops.steps.sglang_wheel import SGLangWheel
from specops.steps.shell import Shell
from specops.steps.vllm_install import VLLMInstall
from specops.steps.vllm_wheel import VLLMWheel
from specops.steps.wait import Wait
from specops.steps.weights import Weights

KINDS: dict[str, StepKind] = {k.name: k for k in (Shell(), Git(), Copy(), Fetch(), Wait(), SGLangWheel(), Patch(),
                                                 SGLangInstall(), Server(), Stop(), Bench(), Weights(), GPUPreflight(),
                                                 VLLMWheel(), VLLMInstall())}

