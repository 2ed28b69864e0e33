"""Mode torchrun: one torchrun_jsc (launch.command) per node via srun, procs_per_node each."""

from __future__ import annotations

from typing import Any, Mapping

from launcher.model import JobSpec, Site
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import TORCHRUN_KEYS, TorchrunOptions, processes, \
    rdzv_timeout_lines, srun_argv, torchrun_argv, torchrun_options
from launcher.runtimes import ContainerRuntime
from launcher.yamlread import Reader


class Torchrun(LaunchMode):
    name = "torchrun"
    keys = TORCHRUN_KEYS
    default_command = ("torchrun_jsc",)
    one_agent = True

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> TorchrunOptions:
        return torchrun_options(r, m)

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(rt.wrap(torchrun_argv(spec))))
        return Plan(tasks_per_node=1, step=step, batch=tuple(rdzv_timeout_lines(spec)))

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return f"one {' '.join(launch.command)} per node, {processes(launch.procs_per_node)} each"
