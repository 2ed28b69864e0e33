"""What a launch mode is: the launch plan it makes and the class to subclass.

Where it sits: spec -> **modes** (asking the runtime object) -> the job plan (launcher.plan)
-> text. A mode is one module in launcher/modes/ with one ``LaunchMode`` subclass,
registered in launcher/modes/__init__.py. It owns everything about itself: the launch keys
it takes (each declared once, with what it is for the error when another mode is given it),
its typed options, its checks (run when the spec is loaded), its launch plan, the
jobscript's launch comment, the preview's node lines, and the world size its ranks report
(the lab's checks compare it). It never names a runtime nor a feature: it asks the runtime
object (launcher/runtimes/), which the job plan made with the features' prelude and names.

A launch plan (``Plan``) is data, built by keyword: the launch step (``starter + task``: srun
or mpirun, and what each task runs; its exit status is the job's), the batch-scope values it
needs, and the kind of task script each task runs first. Per-task values (SLURM_PROCID,
SLURM_NODEID, ...) are never expanded at batch scope: only inside the task script
(``bash "$kit/node/task.sh" KIND``, launcher/node/task.sh) that each task runs. The runtime's
per-node set-up step and the preflight are not the mode's: the job plan asks the runtime
(``ContainerRuntime.setup_step``) and the features (features.preflight).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, ClassVar, List, Mapping, Sequence, Tuple

from launcher.model import JobSpec, Site
from launcher.runtimes import ContainerRuntime
from launcher.shell import Statement, Token, Values, resolve
from launcher.yamlread import Key, Reader

TASK_SCRIPT_WORDS = 3  # bash "$kit/node/task.sh" KIND, before the argv it runs


@dataclass(frozen=True)
class Step:
    """The launch: ``starter + task`` (srun/mpirun, and what each task runs)."""

    comment: str  # written as "# Launch: COMMENT."
    starter: Tuple[Token, ...]
    task: Tuple[Token, ...]

    @property
    def argv(self) -> Tuple[Token, ...]:
        return self.starter + self.task


@dataclass(frozen=True, init=False)
class Plan:
    """What a mode renders; keyword arguments only (see __init__)."""

    tasks_per_node: int  # #SBATCH --ntasks-per-node, and the preview's tasks per node
    step: Step  # the launch; its exit status is the job's
    master_env: bool  # exports MASTER_ADDR/MASTER_PORT (env://) at batch scope
    ntasks: bool  # needs ntasks=nnodes*tasks_per_node at batch scope
    via_mpirun: bool  # mpirun starts the tasks (one srun task per node: Open MPI's daemons)
    # The kind of launcher/node/task.sh each task runs first (modes.common.TASK_KINDS: its
    # argv starts bash "$kit/node/task.sh" KIND), "" where the tasks run none.
    task_kind: str
    batch: Tuple[Statement, ...]  # job-global batch-scope lines (e.g. a per-job file)

    def __init__(self, *, tasks_per_node: int, step: Step, master_env: bool = False,
                 ntasks: bool = False, via_mpirun: bool = False,
                 task_kind: str = "",
                 batch: Tuple[Statement, ...] = ()) -> None:
        # Python 3.8 has no dataclass(kw_only=True): the same, written out.
        for name, value in (("tasks_per_node", tasks_per_node), ("step", step),
                            ("master_env", master_env), ("ntasks", ntasks),
                            ("via_mpirun", via_mpirun), ("task_kind", task_kind), ("batch", batch)):
            object.__setattr__(self, name, value)

    @property
    def starter(self) -> Tuple[Token, ...]:
        return self.step.starter

    @property
    def task(self) -> Tuple[Token, ...]:
        return self.step.task

    @property
    def launch(self) -> Tuple[Token, ...]:
        return self.step.argv

    @property
    def srun_tasks_per_node(self) -> int:
        """Tasks the kit's srun starts per node (CPU placement): under mpirun one per node
        (Open MPI's daemon), else the launch's tasks."""
        return 1 if self.via_mpirun else self.tasks_per_node

    @property
    def node_logs(self) -> bool:
        """One log file per node (job.node_output): srun's --output; mpirun has none."""
        return not self.via_mpirun


class LaunchMode:
    """Subclass per mode; the defaults fit a mode that starts its tasks with one srun."""

    name: ClassVar[str] = ""
    # Launch keys beyond mode/procs_per_node/rdzv_port that this mode takes, by name, each
    # declared once (launcher.yamlread.Key: its reference row, and ``why``, what it is, for
    # the error another mode reports when it is given the key; "{modes}" becomes "modes a and
    # b", those that take it). modes.common.by_name builds the mapping.
    keys: ClassVar[Mapping[str, Key]] = {}
    default_command: ClassVar[Tuple[str, ...]] = ()  # launch.command when the spec has none
    one_agent: ClassVar[bool] = False  # one launcher per node starts procs_per_node workers
    # Why the stack hook sees no progress in this mode's ranks ("" where it does: ranks
    # whose collectives are torch.distributed's): launch.hang_timeout is refused with it.
    no_progress_hook: ClassVar[str] = ""
    # The variables that only the processes running the user's program as ranks carry (the
    # stack hook arms those, launcher/task/hook/sitecustomize.py): RANK, set by torch's elastic agent for
    # its workers (torchrun, mpirun_torchrun, accelerate), by deepspeed's launcher and by srun
    # mode's task script. Not the MPI ones: the per-node agent carries those too.
    rank_vars: ClassVar[Tuple[str, ...]] = ("RANK",)

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> Any:
        """Validate this mode's own keys (beyond the shared Launch fields) into its typed
        options (a frozen dataclass, kept in Launch.options; None for a mode without
        options); also cross-checks of the launch mapping. r.fail for errors. ``site``: the
        spec's site profile, for the defaults it sets (e.g. srun --mpi)."""
        return None

    def check(self, spec: JobSpec) -> None:
        """Refuse, with a SpecError, a spec this mode cannot run (called by the spec loader,
        so that `check` and every other command fail before anything is rendered)."""

    def via_mpirun(self, spec: JobSpec) -> bool:
        """True when mpirun starts this spec's tasks."""
        return False

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        raise NotImplementedError

    def comment(self, spec: JobSpec) -> str:
        """The jobscript's '# Launch: ...' text for the foreground step."""
        raise NotImplementedError

    def world_size(self, spec: JobSpec, nnodes: int) -> int:
        """The world size the program must report (the demo checker's expectation)."""
        return nnodes * spec.launch.procs_per_node

    def preview_node(self, spec: JobSpec, plan: Plan, node_rank: int, nnodes: int,
                     values: Values) -> List[str]:
        """Preview lines under 'node N HOST: ...': what each task of that node runs."""
        step = plan.step
        task = resolve(step.task[TASK_SCRIPT_WORDS:] if plan.task_kind else step.task, values)
        text = " ".join(shlex.quote(a) for a in task)
        if self.one_agent:
            return [f"  per node: {text}"]
        per_node = plan.tasks_per_node
        return [f"  rank {node_rank * per_node + local}: {text}" for local in range(per_node)]



def modes_phrase(names: Sequence[str]) -> str:
    """'mode a', 'modes a and b', 'modes a, b and c'."""
    if len(names) == 1:
        return f"mode {names[0]}"
    return f"modes {', '.join(names[:-1])} and {names[-1]}"
