"""Mode mpirun_torchrun: mpirun starts one torchrun_jsc per node (Open MPI's daemons via srun)."""

from __future__ import annotations

from typing import Any, Mapping

from launcher.model import JobSpec, Site
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import NNODES, TORCHRUN_KEYS, TorchrunOptions, check_mpirun, \
    mpirun_argv, processes, rdzv_timeout_lines, torchrun_argv, torchrun_options
from launcher.runtimes import ContainerRuntime
from launcher.yamlread import Reader


class MpirunTorchrun(LaunchMode):
    name = "mpirun_torchrun"
    keys = TORCHRUN_KEYS
    default_command = ("torchrun_jsc",)
    one_agent = True

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> TorchrunOptions:
        return torchrun_options(r, m)

    def check(self, spec: JobSpec) -> None:
        check_mpirun(spec, "launch.mode: torchrun (srun starts one torchrun_jsc per node)")

    def via_mpirun(self, spec: JobSpec) -> bool:
        return True

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        step = Step(self.comment(spec), tuple(mpirun_argv(1, NNODES)),
                    tuple(rt.wrap(torchrun_argv(spec))))
        return Plan(tasks_per_node=1, step=step, via_mpirun=True,
                    batch=tuple(rdzv_timeout_lines(spec)))

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return (f"mpirun starts one {' '.join(launch.command)} per node, "
                f"{processes(launch.procs_per_node)} each")
