"""Mode horovod: MPI ranks, procs_per_node per node, via srun --mpi=PLUGIN or mpirun."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping

from launcher.model import JobSpec, Site
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import MPI_TASK_NAMES, by_name, NTASKS, check_mpirun, gpu_layout, \
    mpirun_argv, scripted_task, srun_argv
from launcher.runtimes import ContainerRuntime
from launcher.yamlread import Key, Reader

_PLUGIN = re.compile(r"[a-z][a-z0-9_]*\Z")


@dataclass(frozen=True)
class HorovodOptions:
    mpi: str = "srun"  # who starts the ranks: "srun" (srun --mpi=PLUGIN) or "mpirun"
    mpi_plugin: str = "pmix"  # srun --mpi=PLUGIN (mpi: srun); the site profile's default


class Horovod(LaunchMode):
    name = "horovod"
    keys = by_name(
        Key(('launch.mpi',),
            '`srun`',
            'start the ranks with `srun --mpi=PLUGIN` or `mpirun`',
            why="it chooses how horovod's MPI ranks start"),
        Key(('launch.mpi_plugin',),
            '`pmix`; `pspmix` under site `jsc`',
            "with `mpi: srun`: srun's `--mpi` plugin (`pmix`, `pmix_v4`, `pmi2`, `none`, "
            '...: lower-case letters, digits, `_`)',
            why="it is srun's --mpi=PLUGIN for horovod's MPI ranks"),
    )
    no_progress_hook = "horovod's collectives are not torch.distributed's"
    # MPI starts the program itself, one process per rank (mpirun, or srun with PMIx/PMI)
    rank_vars = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> HorovodOptions:
        mpi = r.choice("launch.mpi", m.get("mpi", "srun"), ("srun", "mpirun"))
        if "mpi_plugin" in m and mpi == "mpirun":
            raise r.fail("launch.mpi_plugin", "is srun's --mpi=PLUGIN; with launch.mpi: mpirun "
                         "Open MPI starts the ranks itself", m["mpi_plugin"])
        return HorovodOptions(mpi=mpi, mpi_plugin=r.matching(
            "launch.mpi_plugin", m.get("mpi_plugin", site.mpi_plugin), _PLUGIN,
            "an srun --mpi plugin name such as pmix, pmix_v4, pmi2 or none"))

    def check(self, spec: JobSpec) -> None:
        if self.via_mpirun(spec):
            check_mpirun(spec, "launch.mpi: srun")

    def via_mpirun(self, spec: JobSpec) -> bool:
        options: HorovodOptions = spec.launch.options
        return options.mpi == "mpirun"

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        # MPI gives each rank its rank; the task script only picks the socket interfaces,
        # towards the first node (MASTER_ADDR).
        per_node = spec.launch.procs_per_node
        task = tuple(scripted_task(spec, rt, MPI_TASK_NAMES, "mpi"))
        if not self.via_mpirun(spec):
            mpi = (f"--mpi={spec.launch.options.mpi_plugin}",)
            step = Step(self.comment(spec), tuple(srun_argv(spec, rt, per_node, mpi)), task)
            return Plan(tasks_per_node=per_node, step=step, master_env=True, task_kind="mpi")
        step = Step(self.comment(spec), tuple(mpirun_argv(per_node, NTASKS)), task)
        return Plan(tasks_per_node=per_node, step=step, master_env=True, ntasks=True,
                    via_mpirun=True, task_kind="mpi")

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        n = launch.procs_per_node
        per_gpu = ", one per GPU" if n == spec.job.gpus_per_node else ""
        via = "mpirun" if self.via_mpirun(spec) else f"srun --mpi={launch.options.mpi_plugin}"
        if not self.via_mpirun(spec) and gpu_layout(spec, n):
            per_gpu += ", socket by socket"
        return f"{n} MPI rank{'s' if n != 1 else ''} per node{per_gpu} via {via}"
