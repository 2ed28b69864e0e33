"""Hangs in the jobscript: the stack hook on every rank, flight recorder, the last word.

Where it sits: spec -> modes (plans) -> **hangs_script** (lines for jobscript) -> text. Pure:
the shipped texts are the kit's own files (launcher/stacks_hook.py, launcher/stacks.py),
read, never generated. docs/guide/hangs.md for users.

- The per-job directory ``$PWD/.hangs/JOBID`` (shared storage: the submit directory, bound
  into every container with runtime.bind_cwd) holds ``hook/sitecustomize.py``, ``stacks/``
  (one dump file per armed rank) and ``fr/`` (torch's flight recorder dumps, with
  TORCH_FR_* / TORCH_NCCL_* unless the user set them).
- Every task of the launch starts through a short sh prelude (:data:`HOOK_PRELUDE`, put in
  front by launcher.runtimes.base ``ContainerRuntime.wrap``) that runs where the task runs,
  inside the container: it puts ``hook/`` first on the PYTHONPATH it finds there (the
  image's own, else what the runtime passed on), keeping that value after it. One rule for
  every runtime: the batch shell never sets PYTHONPATH for the hook.
- ``jsc-compose stacks JOBID`` (launcher/cli.py) signals the ranks through one
  ``srun --overlap`` step per node (:func:`stacks_srun`) and prints them grouped.
- Before the job is killed (time limit, scancel): Slurm sends SIGTERM to the batch shell
  (scancel; at the time limit KillWait seconds before SIGKILL) and the signal asked for with
  ``--signal=B:URG@60``; the trap runs the same step and prints the groups into the job log.
- launch.hang_timeout (optional): the hook marks each rank's progress in ``progress/``; a
  watcher (launcher.stacks ``watch``) runs beside the launch in the batch shell and, once no
  rank made progress for that long, prints the stacks, ends the job's steps and leaves one
  line in ``no-progress``, which the script prints last before it exits 124.
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from launcher import stacks
from launcher.model import JobSpec
from launcher.requeue_script import WAIT_FOR_LAUNCH

from launcher.shell import Assign, Raw, Statement, Token, Var, join, quote, word

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
    """A literal constant of launcher/stacks_hook.py, read from its source (importing the hook
    would run it: it arms the process it is imported into)."""
    for node in ast.parse((HERE / "stacks_hook.py").read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id == name:
            return ast.literal_eval(node.value)
    raise LookupError(f"launcher/stacks_hook.py has no constant {name}")


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
# What must reach the ranks inside a container that forwards by name only (Enroot). Not
# PYTHONPATH: forwarded, it would replace the image's own; the prelude below edits it inside.
NAMES: Tuple[str, ...] = (DIR_ENV, RANK_VARS_ENV) + tuple(n for n, _ in FLIGHT_RECORDER)
# The prelude every task of the launch starts through: ``sh -c "$stacks_hook_sh" jsc-hook
# ARGV...`` (:func:`hook_argv`), run by the container's sh after the runtime has set the
# image's environment, so PYTHONPATH there is the image's, else what the runtime passed on
# (Apptainer, pyxis: the task's; Enroot: only a PYTHONPATH the spec exports). POSIX sh only;
# ARGV is exec'd as given (no shell stays between, so signals reach the task as before).
HOOK_SH = Var("stacks_hook_sh")
HOOK_PRELUDE = f"""\
export PYTHONPATH="${DIR_ENV}/hook${{PYTHONPATH:+:$PYTHONPATH}}"
exec "$@"
"""
# The kit's helpers (collector, report, watcher): isolated (-I), so that neither the job's
# PYTHONPATH (the hook itself: under an MPI rank variable it could arm them) nor a user's
# module beside the submit directory is imported.
ISOLATED = ("python3", "-I", "-c")


def hook_argv(argv: Sequence[Token]) -> List[Token]:
    """``argv`` started through the stack hook's prelude (HOOK_PRELUDE)."""
    return ["sh", "-c", HOOK_SH, "jsc-hook", *argv]


def compact(source: str) -> str:
    """The source without its docstrings, comment lines and blank lines: what runs, for the
    jobscript (the files themselves stay documented). Deterministic."""
    drop = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str) and len(node.body) > 1:
                drop.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    lines = [line for n, line in enumerate(source.splitlines(), 1)
             if n not in drop and line.strip() and not line.lstrip().startswith("#")]
    return "\n".join(lines) + "\n"


def hook_text() -> str:
    return compact((HERE / "stacks_hook.py").read_text(encoding="utf-8"))


def stacks_text() -> str:
    return compact((HERE / "stacks.py").read_text(encoding="utf-8"))


def seconds_text(seconds: float) -> str:
    """Seconds as an argument, nothing lost: 10 -> "10", 0.5 -> "0.5" (the shortest text that
    reads back as the same float). ValueError for a negative or non-finite number."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"seconds must be a finite number >= 0, got {seconds!r}")
    return str(int(seconds)) if seconds == int(seconds) else repr(float(seconds))


def stacks_srun(job: Token, nodes: Token, script: Token,
                wait_s: float = NODE_WAIT_S) -> List[Token]:
    """One task per node of job ``job`` beside its running steps (--overlap), outside any
    container: each signals its node's ranks, waits up to ``wait_s`` for their dumps and
    prints them as JSON lines."""
    return ["srun", "--overlap", word("--jobid=", job), word("--nodes=", nodes),
            word("--ntasks=", nodes), "--ntasks-per-node=1", "--cpus-per-task=1",
            "--kill-on-bad-exit=0", *ISOLATED, script, "node", job, seconds_text(wait_s)]


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
    """Batch scope, before any step: the directory, the hook, the variables, the trap.
    ``rank_vars``: the mode's (launcher.modes: LaunchMode.rank_vars)."""
    fr = fr_exports()
    report: List[Token] = [*ISOLATED, Var("stacks_py"), "report", Var("SLURM_JOB_ID")]
    step = join(stacks_srun(Var("SLURM_JOB_ID"), Var("nnodes"), Var("stacks_py"))) + " \\\n    | " + \
        join(report)
    return [
        Raw("# Hangs (docs/guide/hangs.md): every rank arms a stack dump at start-up (Python's\n"
            "# faulthandler on SIGURG, nothing runs until then); `jsc-compose stacks JOBID` and\n"
            "# this script before the job is killed print them grouped; flight recorder too."),
        Raw(f'hangs_dir="$PWD/{HANGS_DIR}/$SLURM_JOB_ID"'),
        Raw('mkdir -p -- "$hangs_dir/hook" "$hangs_dir/stacks" "$hangs_dir/fr"'),
        Raw("# shellcheck disable=SC2016  # python"),
        Assign("stacks_hook_py", hook_text()),
        Raw('printf \'%s\' "$stacks_hook_py" >"$hangs_dir/hook/sitecustomize.py"'),
        Raw("# shellcheck disable=SC2016  # python, run by python3 -c on each node"),
        Assign("stacks_py", stacks_text()),
        Raw(f'export {DIR_ENV}="$hangs_dir"'),
        Raw("# Every task of the launch starts through this (sh -c, where the task runs: in\n"
            "# its container): the hook first on the PYTHONPATH found there, which stays after\n"
            "# it (an image's own PYTHONPATH included)."),
        Raw("# shellcheck disable=SC2016  # expanded by sh in each task"),
        Assign(HOOK_SH.name, HOOK_PRELUDE),
        Raw("# Only processes with one of these run the program as a rank (never a per-node\n"
            "# launcher, which may carry PMIX_RANK/PMI_RANK/OMPI_COMM_WORLD_RANK too)."),
        Raw(f"export {RANK_VARS_ENV}={quote(' '.join(rank_vars))}"),
        Raw(f"export {fr}"),
        Raw(f"""\
# The stacks, once, into this log: at SIGURG ({WARN_BEFORE_S} s before the time limit, or
# `scancel --batch --signal=URG JOBID`) and at SIGTERM (scancel, the time limit: Slurm
# signals the ranks at the same time, so this one is a race). The launch runs in the
# background and is waited for: bash runs a trap only between commands.
stacks_done=0
print_stacks() {{
    if [ "$stacks_done" = 1 ]; then return; fi
    stacks_done=1
    echo "job ${{SLURM_JOB_ID}}: $1 at $(date +%s.%N): every rank's stack (jsc-compose stacks)"
    {step} || true
}}
trap 'print_stacks SIGURG' URG
trap 'print_stacks SIGTERM' TERM"""),
    ] + (_deadline_lines(spec) if spec is not None else [])


def _deadline_lines(spec: JobSpec) -> List[Statement]:
    timeout = spec.launch.hang_timeout
    if timeout is None:
        return []
    period = progress_period(timeout)
    return [Raw(f"""\
# Progress deadline (launch.hang_timeout: {timeout} s): every {period} s each rank's hook notes
# the collectives it has issued (and launcher.progress() calls) in $hangs_dir/progress; the
# watcher started beside the launch ends the job once no rank made progress for {timeout} s,
# after printing every rank's stack.
mkdir -p -- "$hangs_dir/progress"
printf '%s\\n' {period} >"$hangs_dir/progress/period"
rm -f -- "$hangs_dir/{stacks.VERDICT}\"""")]


def watch_lines(spec: JobSpec) -> List[str]:
    """Before the launch: the watcher in the background (none without launch.hang_timeout)."""
    timeout = spec.launch.hang_timeout
    if timeout is None:
        return []
    collector = stacks_srun(Var("SLURM_JOB_ID"), Var("nnodes"), Var("stacks_py"))
    argv: List[Token] = [*ISOLATED, Var("stacks_py"), "watch", Var("SLURM_JOB_ID"),
                         Var("hangs_dir"), str(timeout), str(progress_period(timeout)),
                         str(KILL_AFTER_S), "--",
                         *collector]
    return ["# Beside it, the progress watcher (launch.hang_timeout; killed when the launch ends).",
            join(argv) + " &", "hang_watch_pid=$!"]


# After a failed launch whose ranks left flight-recorder dumps (a collective timed out): where
# they are and the command that says which rank never joined which collective. torch's
# analyser needs torch, which is in the image, not on the batch node: so the command, not its
# output (docs/guide/hangs.md; scripts/gpu-check.py ran it on NCCL's dumps).
FR_NOTICE = """
fr_dumps=("$hangs_dir"/fr/*)
if [ "$launch_rc" -ne 0 ] && [ -e "${fr_dumps[0]}" ]; then
    echo "job ${SLURM_JOB_ID}: flight recorder: ${#fr_dumps[@]} rank dumps in" \\
        "$hangs_dir/fr; which rank missed which collective: python3 -m" \\
        "torch.distributed.flight_recorder.fr_trace $hangs_dir/fr -p rank- (in the image)" >&2
fi"""


def after_launch(spec: JobSpec) -> str:
    """After the launch was waited for: the flight recorder's dumps named (FR_NOTICE); with
    launch.hang_timeout, stop the watcher and, if it ended the job, its line last and exit
    124."""
    if spec.launch.hang_timeout is None:
        return FR_NOTICE
    verdict = f'"$hangs_dir/{stacks.VERDICT}"'
    return FR_NOTICE + f"""
kill "$hang_watch_pid" 2>/dev/null || true
if [ -s {verdict} ]; then
    cat -- {verdict} >&2
    exit {EXIT_NO_PROGRESS}
fi"""



def launch_lines(launch: str, after_wait: str = "") -> List[str]:
    """The launch in the background and waited for, so that the traps above run while it
    runs; its exit status is the job's, as in the foreground. ``after_wait``: lines right
    after the wait (:func:`after_launch`)."""
    return [launch + " &", WAIT_FOR_LAUNCH + after_wait + """
if [ "$launch_rc" -ne 0 ]; then exit "$launch_rc"; fi"""]


__all__ = ["EXIT_NO_PROGRESS", "HOOK_PRELUDE", "NAMES", "after_launch", "hook_argv",
           "hook_text", "launch_lines", "progress_period", "sbatch_options", "seconds_text",
           "setup_lines", "stacks_srun", "stacks_text", "watch_lines"]
