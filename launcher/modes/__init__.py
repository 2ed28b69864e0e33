"""Launch modes, one module each; this registry is the only list of them.

Adding a mode: write launcher/modes/NAME.py with a ``LaunchMode`` subclass (launcher/modes/
base.py says what to implement), add an instance to ``_ALL`` below, and add its tests and a
checked-in job (docs/development/index.md: "Adding a launch mode or a container runtime").
Nothing else names modes: the spec loader, the job plan, the preview and the features ask the
mode object.
"""

from __future__ import annotations

from typing import Dict, Optional, Tuple

from launcher.model import JobSpec
from launcher.modes.accelerate import Accelerate
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.deepspeed import Deepspeed
from launcher.modes.horovod import Horovod
from launcher.modes.mpirun_torchrun import MpirunTorchrun
from launcher.modes.ray import Ray
from launcher.modes.srun import Srun
from launcher.modes.torchrun import Torchrun
from launcher.runtimes import ContainerRuntime, runtime_for

_ALL: Tuple[LaunchMode, ...] = (Torchrun(), Srun(), Horovod(), MpirunTorchrun(), Accelerate(),
                                  Deepspeed(), Ray())
MODES: Dict[str, LaunchMode] = {m.name: m for m in _ALL}
MODE_NAMES: Tuple[str, ...] = tuple(MODES)


def mode_for(name: str) -> LaunchMode:
    return MODES[name]


def plan_launch(spec: JobSpec, runtime: Optional[ContainerRuntime] = None
                ) -> Tuple[ContainerRuntime, Plan]:
    """The runtime object and the mode's launch plan for a validated spec; ``runtime``: the
    one the job plan made (launcher.plan.build_plan: with the prelude and the names the
    features hand it), by default a plain one (what the preview shows)."""
    runtime = runtime or runtime_for(spec)
    return runtime, mode_for(spec.launch.mode).plan(spec, runtime)


__all__ = ["MODES", "MODE_NAMES", "LaunchMode", "Plan", "Step", "mode_for", "plan_launch"]
