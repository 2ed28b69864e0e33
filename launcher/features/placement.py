"""Feature placement: the job's geometry on the nodes: how many CPUs the job asks for and
how srun shares them among its tasks, the node count and the task count.

Where it sits: spec -> modes (plans) -> **placement** (the job plan's #SBATCH --exclusive and
the first lines of its geometry paragraph) -> text. Pure. Sites bind every task to the CPUs
Slurm gave it (task/affinity, task/cgroup, psslurm), and a task's workers inherit that mask:
a one-agent-per-node launcher (torchrun_jsc, accelerate, ...) that got one CPU runs all its
workers, and their DataLoader workers, on one hardware thread, with no error anywhere. So:

- the job asks for CPUs: ``job.cpus_per_task`` if set, else whole nodes (``--exclusive``,
  what JSC allocates anyway), unless the spec sets ``job.sbatch.exclusive`` itself;
- every srun the kit writes asks for its CPUs on its own command line, ``--cpus-per-task``:
  the job's CPUs on a node (the smallest node's, when they differ) for a per-node agent, an
  MPI daemon, the set-up and the doctor, that divided by the tasks per node for one task per
  GPU (``cpus_per_node`` and ``cpus_per_task`` in the script). srun does not inherit
  ``--cpus-per-task`` from sbatch, and the variable that carried it changed: Slurm 22.05 and
  23.02 read ``SRUN_CPUS_PER_TASK``, 23.11 and later ``SLURM_CPUS_PER_TASK`` only (CHANGELOG
  23.11); the command line works on every version, psslurm included. Only submitit, which
  writes its own srun line, gets both variables instead (``export_names``);
- one thread per core (``--hint=nomultithread``, ``--threads-per-core=1``, in the spec's
  ``job.sbatch`` or in SLURM_HINT / SLURM_THREADS_PER_CORE): SLURM_JOB_CPUS_PER_NODE counts
  hardware threads, but such a step may use one per core, and srun refuses a count above that
  ("More processors requested than permitted"): the script divides by the node's
  ThreadsPerCore, as Slurm's own node record states it (``scontrol show node``).
"""

from __future__ import annotations

from typing import List, Optional, Tuple

from launcher.features.base import Context, Feature, SbatchOption
from launcher.model import JobSpec
from launcher.modes import LaunchMode
from launcher.shell import Raw, Statement

# submitit writes its own srun line and quotes its srun_args, so a count known only at run
# time cannot go on it: srun's input variables carry it, SLURM_CPUS_PER_TASK (Slurm >= 23.11,
# and before 22.05) and SRUN_CPUS_PER_TASK (22.05, 23.02). No mpirun runs there, which would
# read SLURM_CPUS_PER_TASK as well (Open MPI divides its slots by it).
SUBMITIT_CPU_NAMES = ("SLURM_CPUS_PER_TASK", "SRUN_CPUS_PER_TASK")


def exclusive_default(spec: JobSpec) -> Optional[Tuple[str, Optional[str]]]:
    """The ``#SBATCH --exclusive`` the composer adds, or None (CPUs requested another way)."""
    job = spec.job
    if job.cpus_per_task is not None or "exclusive" in dict(job.sbatch) \
            or "exclusive" in job.sbatch_off:
        return None
    return ("exclusive", None)


def one_thread_per_core(spec: JobSpec) -> List[Statement]:
    """The spec's own --hint=nomultithread / --threads-per-core=1, passed to every srun
    through srun's input variables (unless the environment already says otherwise)."""
    sbatch = dict(spec.job.sbatch)
    out: List[Statement] = []
    if "nomultithread" in (sbatch.get("hint") or ""):
        out.append(Raw('export SLURM_HINT="${SLURM_HINT:-nomultithread}"  # job.sbatch.hint'))
    if sbatch.get("threads-per-core") == "1":
        out.append(Raw('export SLURM_THREADS_PER_CORE="${SLURM_THREADS_PER_CORE:-1}"'
                       "  # job.sbatch.threads-per-core"))
    return out


MPIRUN_NOTE = Raw("""\
# CPUs: mpirun starts the ranks through Open MPI's own srun, which sets SLURM_CPU_BIND=none
# (plm/slurm): its daemons, and the ranks under them, may use every CPU of the job on a node.""")


def cpu_lines(spec: JobSpec, srun_tasks_per_node: int, launch_srun: bool = True,
              node_sruns: bool = True, export_names: Tuple[str, ...] = ()) -> List[Statement]:
    """Batch-scope lines that set cpus_per_node (one task per node: ``node_sruns``, the set-up
    and the doctor; launcher/node/job.sh ``jsc_cpus_per_node``) and cpus_per_task
    (``launch_srun``: the launch is an srun the kit writes) for ``--cpus-per-task=`` of the
    sruns below; export_names: variables that carry the share to an srun line the kit does
    not write (submitit's)."""
    if not launch_srun and not node_sruns:
        return [MPIRUN_NOTE]
    n = srun_tasks_per_node
    share = "$cpus_per_node" if n == 1 else \
        f"$((cpus_per_node >= {n} ? cpus_per_node / {n} : 1))"
    each = "" if not launch_srun else ", the launch's task the same" if n == 1 \
        else f", each of the launch's {n} a share"
    out: List[Statement] = one_thread_per_core(spec) + [
        Raw(f"jsc_cpus_per_node  # CPUs per srun: a task per node gets the node's{each}")]
    if launch_srun:
        out.append(Raw(f'cpus_per_task="{share}"'))
    out += [Raw(f'export {name}="$cpus_per_task"') for name in export_names]
    return out + ([] if launch_srun else [MPIRUN_NOTE])


def node_count_lines() -> List[Statement]:
    """Batch scope: $nnodes, which every per-node srun (launcher.runtimes.node_srun) uses."""
    return [Raw("# The allocation gives the node count (#SBATCH --nodes is its only source) and "
                "the first node."),
            Raw('nnodes="$SLURM_JOB_NUM_NODES"')]


def placement_warnings(spec: JobSpec, mode: LaunchMode) -> List[str]:
    """Specs that would put several workers on one core: one line each, for `check`."""
    job, launch = spec.job, spec.launch
    # One agent per node starts procs_per_node workers (torchrun_jsc, accelerate, ...).
    if not mode.one_agent or launch.procs_per_node < 2:
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


class PlacementFeature(Feature):
    name = "placement"

    def sbatch(self, ctx: Context) -> List[SbatchOption]:
        exclusive = exclusive_default(ctx.spec)
        return [exclusive] if exclusive is not None else []

    def geometry(self, ctx: Context) -> List[Statement]:
        """The CPUs of each srun, the node count, and the task count where the mode uses it."""
        launch = ctx.launch
        if ctx.purpose == "submitit":
            out = cpu_lines(ctx.spec, launch.srun_tasks_per_node,
                            export_names=SUBMITIT_CPU_NAMES)
        else:
            node_sruns = bool(ctx.runtime.setup_step()) or ctx.purpose == "doctor" \
                or ctx.spec.launch.preflight is not None
            out = cpu_lines(ctx.spec, launch.srun_tasks_per_node,
                            launch_srun=not launch.via_mpirun, node_sruns=node_sruns)
        out += node_count_lines()
        if launch.ntasks:
            out.append(Raw(f"ntasks=$((nnodes * {launch.tasks_per_node}))"))
        return out

    def warnings(self, spec: JobSpec, mode: LaunchMode) -> List[str]:
        return placement_warnings(spec, mode)


PLACEMENT = PlacementFeature()

__all__ = ["PLACEMENT", "SUBMITIT_CPU_NAMES", "cpu_lines", "exclusive_default",
           "node_count_lines", "one_thread_per_core", "placement_warnings"]
