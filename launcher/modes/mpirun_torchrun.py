"""Mode mpirun_torchrun: mpirun starts one torchrun_jsc per node (Open MPI's daemons via srun)."""

from __future__ import annotations

from launcher.model import JobSpec
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import NNODES, TORCHRUN_KEYS, check_mpirun, mpirun_argv, processes, \
    rdzv_timeout_lines, torchrun_argv
from launcher.runtimes import ContainerRuntime


class MpirunTorchrun(LaunchMode):
    name = "mpirun_torchrun"
    keys = TORCHRUN_KEYS
    default_command = ("torchrun_jsc",)
    one_agent = True

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        check_mpirun(spec, rt)
        step = Step(self.comment(spec), tuple(mpirun_argv(1, NNODES)),
                    tuple(rt.wrap(torchrun_argv(spec))))
        return Plan(self.name, 1, True, False, False, rt.setup_step(), (step,), False,
                    batch=tuple(rdzv_timeout_lines(spec)), srun_tasks=1)

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return (f"mpirun starts one {' '.join(launch.command)} per node, "
                f"{processes(launch.procs_per_node)} each")
