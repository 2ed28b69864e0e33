"""Feature hangs: the stack hook on every rank, the flight recorder, the progress deadline
(``launch.hang_timeout``) and the last word.

Where it sits: spec (:meth:`HangsFeature.load_launch`) -> **hangs** -> the job plan (the
signal, the hangs paragraph, the prelude of every task, the watcher) -> text. Pure: the lines
call the kit's own code (launcher/node/job.sh ``jsc_hangs_setup``, ``jsc_watch``,
``jsc_wait_launch``; launcher/task/hook.sh and hook/sitecustomize.py; launcher/node/stacks.py),
never carry it. docs/guide/hangs.md for users.

- The per-job directory ``$PWD/.hangs/JOBID`` (shared storage: the submit directory, bound
  into every container with runtime.bind_cwd) holds ``fr/`` (torch's flight recorder dumps,
  with TORCH_FR_* / TORCH_NCCL_* unless the user set them) and, with launch.hang_timeout,
  ``progress/`` (one mark file per node); the ranks' stack dumps are node-local (the hook's
  memfd). It is removed after the launch unless it holds a hang report (issue 36).
- Every task of the launch starts through a short sh prelude (launcher/task/hook.sh, put in
  front by launcher.runtimes.base ``ContainerRuntime.wrap``) that runs where the task runs,
  inside the container: it puts the kit's ``task/hook/`` first on the PYTHONPATH it finds
  there (the image's own, else what the runtime passed on), keeping that value after it. One
  rule for every runtime: the batch shell never sets PYTHONPATH for the hook.
- ``jsc-compose stacks JOBID`` (launcher/cli.py) signals the ranks through one
  ``srun --overlap`` step per node (:func:`stacks_srun`, run by launcher.submit) and prints
  them grouped.
- Before the job is killed (time limit, scancel): Slurm sends SIGTERM to the batch shell
  (scancel; at the time limit KillWait seconds before SIGKILL) and the signal asked for with
  ``--signal=B:URG@60`` (unless the job asks for another signal: launcher.plan settles it);
  the trap runs the same step and prints the groups into the job log.
- launch.hang_timeout (optional): seconds (``1800``) or a Slurm time (``"30:00"``). Refused: a
  value below the rendezvous store's read timeout (the kit's own allowance for one wait on
  the store), not above the join timeout when torchrun restarts workers (the agents meet
  again while no rank runs), not below the time limit, and in the modes whose ranks do not
  use torch.distributed (the mode's ``no_progress_hook`` says why). The hook marks each
  rank's progress in ``progress/``; a watcher (launcher.node.stacks ``watch``) runs beside
  the launch in the batch shell and, once no rank made progress for that long, prints the
  stacks, ends the job's steps and leaves one line in ``no-progress``, which the script
  prints last before it exits 124.
- launch.hang_action (``end`` by default; ``replace`` with job.spare_nodes and the deadline):
  the spares' supervisor (launcher/node/spares.py) runs the same watcher in a thread (job.sh
  ``jsc_watch ... replace`` hands its arguments to ``jsc_spares_launch``) and replaces the
  nodes of the ranks behind by spares instead of ending the job, where it can; it starts the
  deadline again at each replacement, so the spares' own max_restarts does not raise the
  deadline's least value to the join timeout.
"""

from __future__ import annotations

import ast
import math
import posixpath
import re
from dataclasses import replace
from pathlib import Path
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from launcher import kit
from launcher.features.base import Context, Feature, SbatchOption
from launcher.model import Job, JobSpec, Launch
from launcher.modes import LaunchMode
from launcher.modes.common import rdzv_timeouts
from launcher.shell import Raw, Statement, Token, join, word
from launcher.slurm import TIME, time_seconds
from launcher.yamlread import Key, Reader

KIT_DIR = Path(__file__).resolve().parents[1]  # launcher/: the kit's files read here
HANGS_DIR = ".hangs"  # under the submit directory, one directory per job id
DIR_ENV = "TORCHRUN_JSC_STACKS"
WARN_BEFORE_S = 60  # #SBATCH --signal=B:URG@60: the stacks a minute before the time limit
NODE_WAIT_S = 10  # how long each node waits for its ranks' dumps
EXIT_NO_PROGRESS = 124  # as timeout(1): ended by launch.hang_timeout
KILL_AFTER_S = 30  # the watcher's SIGTERM to every step, then SIGKILL (Slurm's KillWait)


def hook_constant(name: str):
    """A literal constant of launcher/task/hook/sitecustomize.py, read from its source
    (importing the hook would run it: it arms the process it is imported into)."""
    hook = KIT_DIR / "task" / "hook" / "sitecustomize.py"
    for node in ast.parse(hook.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise LookupError(f"launcher/task/hook/sitecustomize.py has no constant {name}")


def flight_recorder_names() -> Tuple[str, ...]:
    """The flight recorder's variables (NCCL's, and gloo's where torch has one: entries kept
    per rank, and where a rank writes them on a watchdog timeout), read from their one rule,
    launcher/node/job.sh ``jsc_hangs_setup``, which exports them, the user's values kept."""
    text = (KIT_DIR / "node" / "job.sh").read_text(encoding="utf-8")
    body = text[text.index("\njsc_hangs_setup() {"):]
    body = body[:body.index("\n}\n")]
    return tuple(dict.fromkeys(re.findall(r"\b(TORCH_[A-Z0-9_]+)=", body)))


# The hook's variable naming the mode's rank variables (launcher.modes: LaunchMode.rank_vars).
RANK_VARS_ENV = hook_constant("RANK_VARS_ENV")
# What must reach the ranks inside a container that forwards by name only (Enroot): the hook's
# folders (the stacks', the start-up timeline's, docs/guide/timeline.md) and the rest. Not
# PYTHONPATH: forwarded, it would replace the image's own; the prelude below edits it inside.
NAMES: Tuple[str, ...] = (DIR_ENV, RANK_VARS_ENV, hook_constant("TIMELINE_ENV")) + (
    flight_recorder_names())
# The prelude every task of the launch starts through: ``sh "$kit/task/hook.sh" ARGV...``
# (:func:`hook_argv`, launcher/task/hook.sh), run by the container's sh after the runtime has
# set the image's environment, so PYTHONPATH there is the image's, else what the runtime
# passed on (Apptainer, pyxis: the task's; Enroot: only a PYTHONPATH the spec exports); it
# puts the kit's hook directory first. ARGV is exec'd as given (no shell stays between, so
# signals reach the task as before).
HOOK_SCRIPT = "task/hook.sh"


def hook_argv(argv: Sequence[Token]) -> List[Token]:
    """``argv`` started through the stack hook's prelude (launcher/task/hook.sh)."""
    return ["sh", kit.file(HOOK_SCRIPT), *argv]


def seconds_text(seconds: float) -> str:
    """Seconds as an argument, nothing lost: 10 -> "10", 0.5 -> "0.5" (the shortest text that
    reads back as the same float). ValueError for a negative or non-finite number."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    return str(int(seconds)) if seconds == int(seconds) else repr(float(seconds))


def stacks_srun(job: Token, nodes: Token, kit_dir: str,
                wait_s: float = NODE_WAIT_S) -> List[Token]:
    """One task per node of job ``job`` beside its running steps (--overlap), outside any
    container: each signals its node's ranks, waits up to ``wait_s`` for their dumps and
    prints them as JSON lines. The jobscript's own is launcher/node/job.sh
    ``jsc_stacks_srun``; this one is `jsc-compose stacks`' (``kit_dir``: the kit's package
    directory, which the nodes see)."""
    return ["srun", "--overlap", word("--jobid=", job), word("--nodes=", nodes),
            word("--ntasks=", nodes), "--ntasks-per-node=1", "--cpus-per-task=1",
            "--kill-on-bad-exit=0", "python3", "-I", posixpath.join(kit_dir, "node", "run.py"),
            "stacks", "node", job, seconds_text(wait_s)]


def progress_period(timeout: int) -> int:
    """Seconds between two looks at the progress, in each rank and in the watcher: a tenth of
    the deadline, 1 to 60 s (4096 ranks then rewrite about 70 marks a second at most)."""
    return max(1, min(60, timeout // 10))


def setup_lines(spec: Optional[JobSpec] = None,
                rank_vars: Tuple[str, ...] = ("RANK",)) -> List[Statement]:
    """Batch scope, before any step: launcher/node/job.sh ``jsc_hangs_setup`` (the directory,
    the variables, the flight recorder, the traps) for the mode's ``rank_vars``
    (launcher.modes: LaunchMode.rank_vars); with launch.hang_timeout the progress marks."""
    out: List[Statement] = [
        Raw(join(["jsc_hangs_setup", *rank_vars]) + "  # stacks, flight recorder "
            "(docs/guide/hangs.md) in processes with " + (" or ".join(rank_vars) or "none"))]
    timeout = None if spec is None else spec.launch.hang_timeout
    if timeout is not None:
        out += [Raw(f"jsc_deadline_setup {progress_period(timeout)}  # launch.hang_timeout "
                    f"{timeout} s: progress noted every {progress_period(timeout)} s")]
    return out


def watch_lines(spec: JobSpec) -> List[str]:
    """Before the launch: the watcher in the background (none without launch.hang_timeout);
    with launch.hang_action replace its arguments for the spares' supervisor, which runs it
    (launcher/node/job.sh jsc_watch, jsc_spares_launch)."""
    timeout = spec.launch.hang_timeout
    if timeout is None:
        return []
    line = f"jsc_watch {timeout} {progress_period(timeout)} {KILL_AFTER_S}"
    if replaces(spec):
        return [line + " replace  # launch.hang_action: the spares' supervisor runs it"]
    return [line]


KEYS = (
    Key(('launch.hang_timeout',),
        'unset (off); seconds (`1800`) or a Slurm time (`"30:00"`)',
        "end the job when no rank made progress for that long: every rank's stack and one line "
        "naming the rank that is behind go into the job's log, the job's steps are ended and the "
        'script exits 124 ([hangs](../guide/hangs.md#progress-deadline)). Progress: a collective '
        "issued by a rank in any process group (seen by the kit's hook, nothing in your program "
        "changes), or a call of `launcher.progress()`. At least the rendezvous store's read "
        'timeout (120 s + 1 per 2 nodes); more than the join timeout (600 s + 1 per node) with '
        '`launch.max_restarts`; less than `job.time`. Not in modes `horovod` (its collectives are '
        "not torch.distributed's) and `ray`"),
    Key(('launch.hang_action',),
        '`end`',
        "what `launch.hang_timeout` does once it names the node behind: `end` the job, or "
        "`replace` that node by a spare (`job.spare_nodes`, launch mode `torchrun`): its stacks "
        "are written, its step is ended, a spare takes its place and the job goes on from its "
        "last checkpoint; when no single node is behind (every rank waits in the same "
        "collective), no spare is left or the node is the batch host, the job ends as with "
        "`end` and one line says why ([spare nodes](../guide/spare-nodes.md#hung-nodes)). "
        "With `replace` the deadline starts again after each replacement, and the spares' own "
        "`launch.max_restarts` does not raise its least value to the join timeout"),
)
KEY = KEYS[0].paths[0]
ACTION_KEY = KEYS[1].paths[0]
ACTIONS = ("end", "replace")
_ACCEPTED = "seconds (e.g. 1800) or a Slurm time such as 30:00"


def load_hang_timeout(r: Reader, value: Any, job: Job, launch: Launch,
                      mode: LaunchMode, restarts: Optional[bool] = None) -> Optional[int]:
    """Validated seconds, or None when absent or false. ``restarts``: do the agents restart
    their workers behind the watcher's back (default: launch.max_restarts is set)?"""
    if value is None or value is False:
        return None
    unwatched = mode.no_progress_hook
    if unwatched:
        raise r.fail(KEY, f"means nothing in mode {launch.mode!r}: progress is observed "
                     f"through torch.distributed's collectives, and {unwatched}", value)
    if isinstance(value, str):
        if not TIME.match(value):
            raise r.fail(KEY, f"must be {_ACCEPTED}", value)
        value = time_seconds(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise r.fail(KEY, f"must be {_ACCEPTED}", value)
    join, read = rdzv_timeouts(job.nodes)
    if value < read:
        raise r.fail(KEY, f"must be at least the rendezvous store's read timeout ({read} s for "
                     f"{job.nodes} node{'s' if job.nodes != 1 else ''}: 120 + 1 per 2 nodes), "
                     "which the kit allows one wait on the store", value)
    if restarts is None:
        restarts = bool(getattr(launch.options, "max_restarts", 0))
    if restarts and value <= join:
        raise r.fail(KEY, f"must be more than the rendezvous join timeout ({join} s for "
                     f"{job.nodes} node{'s' if job.nodes != 1 else ''}) with "
                     "launch.max_restarts: after a restart the agents meet again that long "
                     "while no rank runs", value)
    if job.time is not None and value >= time_seconds(job.time):
        raise r.fail(KEY, f"must be less than job.time ({job.time} = {time_seconds(job.time)} "
                     "s), or the time limit comes first", value)
    return value


def load_hang_action(r: Reader, value: Any, job: Job, timeout: Optional[int]) -> str:
    """launch.hang_action: ``end`` (absent) or ``replace``, which needs a spare node
    (job.spare_nodes, whose own check keeps it to launch mode torchrun) and the deadline."""
    if value is None:
        return "end"
    action = r.choice(ACTION_KEY, value, ACTIONS)
    if action == "replace" and not job.spare_nodes:
        raise r.fail(ACTION_KEY, "needs job.spare_nodes >= 1 (a spare to take the hung node's "
                     "place) and launch.mode torchrun; without spares the deadline can only "
                     "end the job (hang_action end)", value)
    if action == "replace" and timeout is None:
        raise r.fail(ACTION_KEY, "needs launch.hang_timeout: the deadline is what finds the "
                     "node behind", value)
    return action


def replaces(spec: JobSpec) -> bool:
    """Does the deadline replace the node behind (the spares' supervisor runs the watcher)?"""
    return spec.launch.hang_timeout is not None and spec.launch.hang_action == "replace"


class HangsFeature(Feature):
    name = "hangs"
    keys = KEYS

    def load_launch(self, r: Reader, m: Mapping[str, Any], job: Job, launch: Launch,
                    mode: LaunchMode) -> Launch:
        # With hang_action replace the supervisor that replaces nodes (launcher/node/spares.py)
        # runs the watcher and starts its deadline again at every replacement: the restarts
        # the spares allow (their default launch.max_restarts) happen inside that window.
        # A launch.max_restarts of the user's own keeps the rule.
        raw_action = m.get(KEYS[1].names[0])
        if raw_action is not None:
            r.choice(ACTION_KEY, raw_action, ACTIONS)
        restarts = None
        if raw_action == "replace" and job.spare_nodes and "max_restarts" not in m:
            restarts = False
        timeout = load_hang_timeout(r, m.get(KEYS[0].names[0]), job, launch, mode, restarts)
        action = load_hang_action(r, raw_action, job, timeout)
        return replace(launch, hang_timeout=timeout, hang_action=action)

    def forwards(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        return NAMES

    def prelude(self, spec: JobSpec, purpose: str) -> Tuple[Token, ...]:
        """The stack hook's prelude, in the job's launch only (the doctor's checks and
        submitit's tasks are no ranks of a kit launch)."""
        return tuple(hook_argv([])) if purpose == "submit" else ()

    def sbatch(self, ctx: Context) -> List[SbatchOption]:
        """--signal=B:URG@60: the stacks a minute before the time limit (the plan keeps a
        signal the job asks for itself instead)."""
        if ctx.purpose not in ("submit", "doctor"):
            return []
        return [("signal", f"B:URG@{WARN_BEFORE_S}")]

    def setup(self, ctx: Context) -> List[Statement]:
        if ctx.purpose != "submit":
            return []
        return setup_lines(ctx.spec, ctx.mode.rank_vars)

    def before_launch(self, ctx: Context) -> List[str]:
        return watch_lines(ctx.spec)


HANGS = HangsFeature()

__all__ = ["ACTIONS", "ACTION_KEY", "EXIT_NO_PROGRESS", "HANGS", "HOOK_SCRIPT", "KEY", "NAMES",
           "flight_recorder_names", "hook_argv", "load_hang_action", "load_hang_timeout",
           "progress_period", "replaces", "seconds_text", "setup_lines", "stacks_srun",
           "watch_lines"]
