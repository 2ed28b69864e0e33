"""Mode horovod: MPI ranks, procs_per_node per node, via srun --mpi=PLUGIN or mpirun."""

from __future__ import annotations

from typing import Any, Dict, Mapping

from launcher.model import JobSpec
from launcher.modes.base import TASK_ENV_NAME, LaunchMode, Plan, Step
from launcher.modes.common import MPI_TASK_NAMES, NTASKS, mpi_task_env, mpirun_argv, \
    no_pyxis, scripted_task, setup_argv, srun_argv
from launcher.runtimes import ContainerRuntime
from launcher.yamlread import Reader


class Horovod(LaunchMode):
    name = "horovod"
    keys = {
        "mpi": "it chooses how horovod's MPI ranks start",
        "mpi_plugin": "it is srun's --mpi=PLUGIN for horovod's MPI ranks",
    }

    def options(self, r: Reader, m: Mapping[str, Any]) -> Dict[str, Any]:
        if "mpi_plugin" in m and m.get("mpi", "srun") == "mpirun":
            raise r.fail("launch.mpi_plugin", "is srun's --mpi=PLUGIN; with launch.mpi: mpirun "
                         "Open MPI starts the ranks itself", m["mpi_plugin"])
        return {}

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        # MPI gives each rank its rank; the task script only picks the socket interfaces,
        # towards the first node (MASTER_ADDR).
        per_node = spec.launch.procs_per_node
        task = tuple(scripted_task(spec, rt, MPI_TASK_NAMES))
        if spec.launch.mpi == "srun":
            mpi = (f"--mpi={spec.launch.mpi_plugin}",)
            step = Step(self.comment(spec), tuple(srun_argv(spec, rt, per_node, mpi)), task)
            return Plan(self.name, per_node, True, True, False, setup_argv(spec, rt), (step,),
                        spec.job.node_output is not None,
                        scripts=((TASK_ENV_NAME, mpi_task_env()),))
        no_pyxis(spec, rt)
        step = Step(self.comment(spec), tuple(mpirun_argv(per_node, NTASKS)), task)
        return Plan(self.name, per_node, True, True, True, setup_argv(spec, rt), (step,), False,
                    scripts=((TASK_ENV_NAME, mpi_task_env()),), srun_tasks=1)

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        n = launch.procs_per_node
        per_gpu = ", one per GPU" if n == spec.job.gpus_per_node else ""
        via = f"srun --mpi={launch.mpi_plugin}" if launch.mpi == "srun" else "mpirun"
        return f"{n} MPI rank{'s' if n != 1 else ''} per node{per_gpu} via {via}"
