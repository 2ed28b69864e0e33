"""Container runtimes, one module each; this registry is the only list of them.

Adding a runtime: write launcher/runtimes/NAME.py with a ``ContainerRuntime`` subclass
(launcher/runtimes/base.py says what it owns), add it to ``RUNTIMES`` below and NAME to
launcher.model.RuntimeKind, and add its tests and a checked-in job (docs/development/index.md).
Nothing else names runtimes: the spec loader, the modes, the doctor and submitit ask the
runtime object.
"""

from __future__ import annotations

from typing import Dict, Type

from launcher.model import JobSpec
from launcher.runtimes.apptainer import Apptainer
from launcher.runtimes.bare import Bare
from launcher.runtimes.base import ContainerRuntime, node_srun
from launcher.runtimes.enroot import Enroot
from launcher.runtimes.pyxis import Pyxis

RUNTIMES: Dict[str, Type[ContainerRuntime]] = {r.kind: r for r in (Bare, Apptainer, Enroot,
                                                                     Pyxis)}


def runtime_for(spec: JobSpec, hook: bool = False) -> ContainerRuntime:
    """The runtime object the spec names; ``hook``: its tasks start through the stack hook's
    prelude (ContainerRuntime.hook)."""
    return RUNTIMES[spec.runtime.kind](spec, hook=hook)


__all__ = ["RUNTIMES", "ContainerRuntime", "node_srun", "runtime_for"]
