"""CPU placement: how many CPUs the job asks for and how srun shares them among its tasks.

Where it sits: spec -> modes (plans) -> **placement** (lines and #SBATCH options for jobscript) ->
text. Pure. Sites bind every task to the CPUs Slurm gave it (task/affinity, task/cgroup), and
a task's workers inherit that mask: a one-agent-per-node launcher (torchrun_jsc, accelerate,
...) that got one CPU runs all its workers, and their DataLoader workers, on one core, with
no error anywhere. So:

- the job asks for CPUs: ``job.cpus_per_task`` if set, else whole nodes (``--exclusive``,
  what JSC allocates anyway), unless the spec sets ``job.sbatch.exclusive`` itself;
- every srun step gets, per task, the job's CPUs on a node (the smallest node's, when they
  differ) divided by the tasks srun starts per node: all of them for a per-node agent or an
  MPI daemon, a share each for one task per GPU. srun does not inherit ``--cpus-per-task``
  from sbatch (Slurm >= 22.05), so the script exports ``SRUN_CPUS_PER_TASK`` explicitly.
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from launcher.model import JobSpec
from launcher.modes import mode_for
from launcher.shell import Raw, Statement



def exclusive_default(spec: JobSpec) -> Optional[Tuple[str, Optional[str]]]:
    """The ``#SBATCH --exclusive`` the composer adds, or None (CPUs requested another way)."""
    job = spec.job
    if job.cpus_per_task is not None or "exclusive" in dict(job.sbatch) \
            or "exclusive" in job.sbatch_off:
        return None
    return ("exclusive", None)


def cpu_lines(srun_tasks_per_node: int) -> List[Statement]:
    """Batch-scope lines that export SRUN_CPUS_PER_TASK for every srun of the script."""
    share = "$cpus_per_node" if srun_tasks_per_node == 1 else \
        f"$((cpus_per_node >= {srun_tasks_per_node} ? cpus_per_node / {srun_tasks_per_node} : 1))"
    return [Raw(f"""\
# CPUs: each srun task gets the job's CPUs on a node (the smallest node's, if they differ)
# divided by the {srun_tasks_per_node} task(s) srun starts per node. srun does not inherit --cpus-per-task
# (Slurm >= 22.05), and every worker of a bound task shares that task's CPUs.
cpus_per_node=''
IFS=, read -ra counts <<<"$SLURM_JOB_CPUS_PER_NODE"  # e.g. 48(x2),32
for count in "${{counts[@]}}"; do
    count=${{count%%(*}}
    if [ -z "$cpus_per_node" ] || [ "$count" -lt "$cpus_per_node" ]; then cpus_per_node=$count; fi
done
export SRUN_CPUS_PER_TASK="{share}"
""".rstrip("\n"))]


def placement_warnings(spec: JobSpec) -> List[str]:
    """Specs that would put several workers on one core: one line each, for `check`."""
    job, launch = spec.job, spec.launch
    # One agent per node starts procs_per_node workers (torchrun_jsc, accelerate, ...).
    if not mode_for(launch.mode).one_agent or launch.procs_per_node < 2:
        return []
    per_node = launch.procs_per_node
    if job.cpus_per_task is not None and job.cpus_per_task < per_node:
        return [f"{spec.source}: job.cpus_per_task: warning: {per_node} worker processes per "
                f"node would share {job.cpus_per_task} CPU(s) (the per-node agent's task); "
                f"ask for at least {per_node}"]
    if job.cpus_per_task is None and "exclusive" in job.sbatch_off:
        return [f"{spec.source}: job.sbatch.exclusive: warning: without whole nodes or "
                f"job.cpus_per_task the job gets 1 CPU per node, and all {per_node} worker "
                "processes of a node would run on that one core; set job.cpus_per_task"]
    return []


__all__ = ["cpu_lines", "exclusive_default", "placement_warnings"]
