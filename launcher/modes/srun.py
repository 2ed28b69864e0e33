"""Mode srun: srun starts procs_per_node tasks per node; ranks from Slurm's per-task variables."""

from __future__ import annotations

import shlex
from typing import List

from launcher.model import JobSpec
from launcher.modes.base import TASK_SCRIPT_WORDS, LaunchMode, Plan, Step
from launcher.modes.common import PER_TASK_NAMES, gpu_layout, scripted_task, srun_argv
from launcher.runtimes import ContainerRuntime
from launcher.shell import Values, resolve


class Srun(LaunchMode):
    name = "srun"

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        per_node = spec.launch.procs_per_node
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, per_node)),
                    tuple(scripted_task(spec, rt, PER_TASK_NAMES, "srun")))
        return Plan(tasks_per_node=per_node, step=step, master_env=True, task_kind="srun")

    def comment(self, spec: JobSpec) -> str:
        n = spec.launch.procs_per_node
        per_gpu = ", one per GPU" if n == spec.job.gpus_per_node else ""
        layout = ", socket by socket" if gpu_layout(spec, n) else ""
        return f"{n} task{'s' if n != 1 else ''} per node{per_gpu}{layout}, ranks from " \
            "Slurm's per-task variables"

    def preview_node(self, spec: JobSpec, plan: Plan, node_rank: int, nnodes: int,
                     values: Values) -> List[str]:
        per_node, world = plan.tasks_per_node, nnodes * plan.tasks_per_node
        text = " ".join(shlex.quote(a) for a in resolve(plan.task[TASK_SCRIPT_WORDS:], values))
        out = []
        for local in range(per_node):
            rank = node_rank * per_node + local
            out.append(f"  rank {rank}: RANK={rank} LOCAL_RANK={local} WORLD_SIZE={world} "
                       f"NODE_RANK={node_rank} {text}")
        return out
