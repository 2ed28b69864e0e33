"""Hangs in the jobscript: the stack hook on every rank, flight recorder, the last word.

Where it sits: spec -> modes (plans) -> **hangs_script** (lines for jobscript) -> text. Pure:
the lines call the kit's own code (launcher/node/job.sh ``jsc_hangs_setup``, ``jsc_watch``,
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
  ``srun --overlap`` step per node (:func:`stacks_srun`) and prints them grouped.
- Before the job is killed (time limit, scancel): Slurm sends SIGTERM to the batch shell
  (scancel; at the time limit KillWait seconds before SIGKILL) and the signal asked for with
  ``--signal=B:URG@60``; the trap runs the same step and prints the groups into the job log.
- launch.hang_timeout (optional): the hook marks each rank's progress in ``progress/``; a
  watcher (launcher.node.stacks ``watch``) runs beside the launch in the batch shell and, once no
  rank made progress for that long, prints the stacks, ends the job's steps and leaves one
  line in ``no-progress``, which the script prints last before it exits 124.
"""

from __future__ import annotations

import ast
import math
import posixpath
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from launcher.model import JobSpec

from launcher import kit
from launcher.shell import Raw, Statement, Token, join, word

HERE = Path(__file__).resolve().parent
HANGS_DIR = ".hangs"  # under the submit directory, one directory per job id
DIR_ENV = "TORCHRUN_JSC_STACKS"
WARN_BEFORE_S = 60  # #SBATCH --signal=B:URG@60: the stacks a minute before the time limit
NODE_WAIT_S = 10  # how long each node waits for its ranks' dumps
EXIT_NO_PROGRESS = 124  # as timeout(1): ended by launch.hang_timeout
KILL_AFTER_S = 30  # the watcher's SIGTERM to every step, then SIGKILL (Slurm's KillWait)
# Flight recorder (NCCL's, and gloo's where torch has one): entries kept per rank, and where
# a rank writes them on a watchdog timeout. ${NAME:-...}: the user's value wins.
FLIGHT_RECORDER = (("TORCH_FR_BUFFER_SIZE", "2000"), ("TORCH_NCCL_TRACE_BUFFER_SIZE", "2000"),
                   ("TORCH_NCCL_DUMP_ON_TIMEOUT", "1"),
                   ("TORCH_FR_DUMP_TEMP_FILE", "$hangs_dir/fr/rank-"),
                   ("TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "$hangs_dir/fr/rank-"))


def hook_constant(name: str):
    """A literal constant of launcher/task/hook/sitecustomize.py, read from its source (importing the hook
    would run it: it arms the process it is imported into)."""
    for node in ast.parse((HERE / "task" / "hook" / "sitecustomize.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise LookupError(f"launcher/task/hook/sitecustomize.py has no constant {name}")


def fr_exports() -> str:
    """The flight recorder's variables, the user's values kept. A renamed one (the hook's
    FR_RENAMED: torch < 2.8 reads the old name, >= 2.8 the new) takes the value of its other
    name when only that one is set, so the user's value reaches torch whichever name it reads:
    the new names first (from the old, else the default), then the old from the new."""
    old_of = dict(tuple(pair) for pair in hook_constant("FR_RENAMED"))
    deprecated = set(old_of.values())
    first = [f'{name}="${{{name}:-' + (f"${{{old_of[name]}:-{value}}}" if name in old_of
                                       else value) + '}"'
             for name, value in FLIGHT_RECORDER if name not in deprecated]
    then = [f'{old}="${{{old}:-${new}}}"' for new, old in old_of.items()]
    return " \\\n    ".join(first) + "\nexport " + " \\\n    ".join(then)


# The hook's variable naming the mode's rank variables (launcher.modes: LaunchMode.rank_vars).
RANK_VARS_ENV = hook_constant("RANK_VARS_ENV")
# What must reach the ranks inside a container that forwards by name only (Enroot): the hook's
# folders (the stacks', the start-up timeline's, docs/guide/timeline.md) and the rest. Not
# PYTHONPATH: forwarded, it would replace the image's own; the prelude below edits it inside.
NAMES: Tuple[str, ...] = (DIR_ENV, RANK_VARS_ENV, hook_constant("TIMELINE_ENV")) + tuple(
    n for n, _ in FLIGHT_RECORDER)
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


def sbatch_options(spec: JobSpec) -> List[Tuple[str, Optional[str]]]:
    """--signal=B:URG@60, unless the job asks for a signal itself (job.requeue, or --signal in
    job.sbatch: sbatch keeps one)."""
    if spec.job.requeue is not None or any(k == "signal" for k, _ in spec.job.sbatch):
        return []
    return [("signal", f"B:URG@{WARN_BEFORE_S}")]


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
    """Before the launch: the watcher in the background (none without launch.hang_timeout)."""
    timeout = spec.launch.hang_timeout
    if timeout is None:
        return []
    return [f"jsc_watch {timeout} {progress_period(timeout)} {KILL_AFTER_S}"]


def launch_lines(launch: str) -> List[str]:
    """The launch in the background and waited for (launcher/node/job.sh ``jsc_wait_launch``,
    then ``jsc_after_launch``: the flight recorder's dumps named; with launch.hang_timeout the
    watcher stopped and, if it ended the job, its line last and exit 124), so that the traps
    above run while it runs; its exit status is the job's, as in the foreground."""
    return [launch + " &", "jsc_wait_launch", 'exit "$launch_rc"']


__all__ = ["EXIT_NO_PROGRESS", "HOOK_SCRIPT", "NAMES", "hook_argv",
           "launch_lines", "progress_period", "sbatch_options", "seconds_text",
           "setup_lines", "stacks_srun", "watch_lines"]
