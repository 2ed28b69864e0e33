"""What a launch mode is: the plan it renders (steps, not one line) and the class to subclass.

Where it sits: spec -> runtimes + **modes** -> jobscript text. A mode is one module in
launcher/modes/ with one ``LaunchMode`` subclass, registered in launcher/modes/__init__.py.
It owns everything about itself: the launch keys it takes (and what they mean, for the
error when another mode is given them), its checks, its plan, the jobscript's launch
comment, the preview, and the world size the demo checker expects.

A plan is data. Its ``steps`` run in order in the batch shell: background steps (``&``, pid
kept in a variable, e.g. a Ray head and its workers), plain script steps (constant shell
text, e.g. waiting until every node joined), exactly one foreground step whose exit status
is the job's, and an optional ``teardown`` (shell text run by an EXIT trap: on success,
failure and cancel). Per-task values (SLURM_PROCID, SLURM_NODEID, ...) are never expanded at
batch scope: only inside a task script (``scripts``) that each task runs with ``bash -c``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.model import JobSpec
from launcher.runtimes import ContainerRuntime
from launcher.shell import Statement, Token, Values, resolve
from launcher.yamlread import Reader

TASK_ENV_NAME = "task_env"  # the script variable of a mode's (first) task script


@dataclass(frozen=True)
class Step:
    """One command of the launch: ``starter + task`` (srun/mpirun and what each task runs),
    or ``script``, constant shell text the mode writes (no spec value in it)."""

    comment: str  # written as "# Launch: COMMENT." (foreground) or "# COMMENT." (others)
    starter: Tuple[Token, ...] = ()
    task: Tuple[Token, ...] = ()
    script: str = ""
    background: bool = False  # `ARGV &`, then `PID_VAR=$!`
    pid_var: Optional[str] = None

    @property
    def argv(self) -> Tuple[Token, ...]:
        return self.starter + self.task

    def __post_init__(self) -> None:
        if bool(self.script) == bool(self.argv):
            raise ValueError("a step is either an argv or a script")
        if self.background and (self.script or not self.pid_var):
            raise ValueError("a background step is an argv with a pid_var")


@dataclass(frozen=True)
class Plan:
    mode: str
    tasks_per_node: int  # #SBATCH --ntasks-per-node, and the preview's tasks per node
    rendezvous: bool  # needs rdzv_host/rdzv_port at batch scope
    master_env: bool  # exports MASTER_ADDR/MASTER_PORT (env://) at batch scope
    ntasks: bool  # needs ntasks=nnodes*tasks_per_node at batch scope
    setup: Tuple[Token, ...]  # run once per node before the launch; () for none
    steps: Tuple[Step, ...]  # exactly one without background/script: the foreground step
    node_logs: bool
    # (variable, text): scripts assigned at batch scope, run by tasks (bash -c "$VAR" ...).
    scripts: Tuple[Tuple[str, str], ...] = ()
    batch: Tuple[Statement, ...] = ()  # job-global batch-scope lines (e.g. a per-job file)
    teardown: str = ""  # shell text of an EXIT trap; "" for none
    srun_tasks: Optional[int] = None  # tasks srun starts per node; None: tasks_per_node

    def __post_init__(self) -> None:
        if len([s for s in self.steps if not s.background and not s.script]) != 1:
            raise ValueError("a plan has exactly one foreground step")

    @property
    def main(self) -> Step:
        """The foreground step: its exit status is the job's."""
        return next(s for s in self.steps if not s.background and not s.script)

    @property
    def starter(self) -> Tuple[Token, ...]:
        return self.main.starter

    @property
    def task(self) -> Tuple[Token, ...]:
        return self.main.task

    @property
    def launch(self) -> Tuple[Token, ...]:
        return self.main.argv

    @property
    def task_env(self) -> str:
        return dict(self.scripts).get(TASK_ENV_NAME, "")

    @property
    def srun_tasks_per_node(self) -> int:
        """Tasks srun starts per node (CPU placement): one for a per-node agent or daemon."""
        return self.tasks_per_node if self.srun_tasks is None else self.srun_tasks


class LaunchMode:
    """Subclass per mode; the defaults fit a mode that starts its tasks with one srun."""

    name: ClassVar[str] = ""
    # Launch keys beyond mode/procs_per_node/rdzv_port that this mode takes, each with what
    # it is ("{modes}" becomes "modes a and b": those that take it), for the error that
    # another mode reports when it is given the key.
    keys: ClassVar[Mapping[str, str]] = {}
    default_command: ClassVar[Tuple[str, ...]] = ()  # launch.command when the spec has none
    one_agent: ClassVar[bool] = False  # one launcher per node starts procs_per_node workers

    def options(self, r: Reader, m: Mapping[str, Any]) -> Dict[str, Any]:
        """Validate this mode's own keys (beyond the shared Launch fields) into values kept
        in Launch.options; also cross-checks of the launch mapping. r.fail for errors."""
        return {}

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
        step = plan.main
        task = resolve(step.task[4:] if plan.task_env else step.task, values)
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
