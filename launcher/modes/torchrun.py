"""Mode torchrun: one torchrun_jsc (launch.command) per node via srun, procs_per_node each."""

from __future__ import annotations

from launcher.model import JobSpec
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import TORCHRUN_KEYS, processes, rdzv_timeout_lines, \
    srun_argv, torchrun_argv
from launcher.runtimes import ContainerRuntime


class Torchrun(LaunchMode):
    name = "torchrun"
    keys = TORCHRUN_KEYS
    default_command = ("torchrun_jsc",)
    one_agent = True

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(rt.wrap(torchrun_argv(spec))))
        return Plan(self.name, 1, True, False, False, rt.setup_step(), (step,),
                    spec.job.node_output is not None, batch=tuple(rdzv_timeout_lines(spec)))

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return f"one {' '.join(launch.command)} per node, {processes(launch.procs_per_node)} each"
