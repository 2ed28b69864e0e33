"""Feature requeue: ``job.requeue``: checkpoint on a signal before the time limit (or a
preemption), then requeue. ``job.requeue: true`` takes every default; a mapping sets
``signal`` (USR2), ``before`` (seconds before the time limit, 120) and ``max`` (requeues at
most, 3).

Where it sits: spec (:meth:`RequeueFeature.load_job`) -> **requeue** -> the job plan (the
signal, the requeue paragraph, the verdict after the launch) -> text. Pure. The training
program's side is torchrun_jsc_kit.requeue (launcher/task/hook/torchrun_jsc_kit).
How a checkpoint request travels (one path for the time limit and for a preemption):

1. Slurm sends SIG to the batch shell only (``--signal=B:SIG@BEFORE``; a preemption is
   ``scancel -b --signal=SIG JOBID``). B: because the shell must outlive it and see it.
2. The trap passes it to every rank: ``scancel --signal=SIG JOBID`` signals every process
   of every step (Slurm's proctrack), whatever the runtime; torchrun_jsc's agent survives it
   and forwards it too (TORCHRUN_JSC_FORWARD_SIGNALS). mpirun is a child of this shell, not
   a step: it gets ``kill -s SIG`` and passes SIGUSR1/2 on to its ranks itself.
3. The program checkpoints, rank 0 writes $REQUEUE_MARKER, all exit 0 (launcher.requeue).
4. The script requeues (``scontrol requeue``) while the restart count < max (Slurm's
   SLURM_RESTART_COUNT, else psslurm's SLURM_JOB_RESTART_COUNT, else 0), with
   ``--open-mode=append`` so every attempt's output stays in the log; a preemption where the
   partition requeues (PreemptMode=REQUEUE) is left to Slurm. Exit 0 without a
   marker: finished. Non-zero: failed, never requeued. Marker at the maximum, or a requeue
   the site refuses: exit 75 with one line that says how to resume.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, List, Mapping, Optional, Tuple

from launcher.features.base import Context, Feature, SbatchOption
from launcher.model import Job, JobSpec, Requeue
from launcher.shell import Raw, Statement
from launcher.slurm import TIME, time_seconds
from launcher.task.hook.torchrun_jsc_kit.requeue import MARKER_ENV, SIGNAL_ENV
from launcher.task.torchrun_jsc.forward import ENV as FORWARD_ENV
from launcher.yamlread import Key, Reader, key_names

KEYS = (
    Key(('job.requeue',),
        '`true` or `{signal, before, max}`',
        'checkpoint and requeue before the time limit ([requeue](../guide/requeue.md)): `signal` '
        'USR2 (default) or USR1, `before` seconds (default 120, < `job.time`, which it needs), '
        '`max` requeues (default 3); writes `--signal=B:SIG@before --requeue --open-mode=append`'),
    Key(('job.requeue.signal',),
        '`USR2` (default) or `USR1`',
        'the signal Slurm sends to the batch shell before the limit '
        '([requeue](../guide/requeue.md))'),
    Key(('job.requeue.before',),
        'seconds, 120',
        'how long before the time limit; less than `job.time`, which it needs'),
    Key(('job.requeue.max',),
        'int, 3',
        'requeues at most; after that the job ends with exit 75'),
)
# USR1 is NCCL's and TERM/INT are what torch's agent and Slurm use to end things, so only
# these: their default action (terminate) is what the forwarder and the program replace.
SIGNALS = ("USR2", "USR1")
# Options the requeue section writes itself; job.sbatch must not contradict them.
OWNED = ("signal", "requeue", "no-requeue", "open-mode")
def _before(r: Reader, value: Any) -> int:
    """Seconds, or a Slurm time such as 5:00 (M:S) or 1:00:00 (H:M:S) turned into seconds."""
    if isinstance(value, str):
        if not TIME.match(value):
            raise r.fail("job.requeue.before", "must be seconds (e.g. 300) or a Slurm time "
                         "such as 5:00 or 1:00:00", value)
        value = time_seconds(value)
    return r.integer("job.requeue.before", value, 1, 65535)


def load_requeue(r: Reader, value: Any, time: Optional[str],
                 sbatch: Tuple[Tuple[str, Optional[str]], ...]) -> Optional[Requeue]:
    """Validate job.requeue against job.time and job.sbatch (None when absent or false)."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    m = r.mapping("job.requeue", value, key_names(KEYS, "job.requeue"))
    signal = m.get("signal", Requeue.signal)
    name = signal.upper() if isinstance(signal, str) else ""
    name = name[3:] if name.startswith("SIG") else name  # no str.removeprefix: Python 3.8
    if name not in SIGNALS:
        raise r.fail("job.requeue.signal", "must be USR2 or USR1 (USR2 is the default; NCCL "
                     "uses USR1; TERM is Slurm's and torchrun's own stop signal)", signal)
    out = Requeue(signal=name, before=_before(r, m.get("before", Requeue.before)),
                  max=r.integer("job.requeue.max", m.get("max", Requeue.max), 0, 1000))
    if time is None:
        raise r.fail("job.requeue", "needs job.time: the signal is sent job.requeue.before "
                     "seconds before the time limit")
    if out.before >= time_seconds(time):
        raise r.fail("job.requeue.before", f"must be less than job.time ({time} = "
                     f"{time_seconds(time)} s), or the signal would come at the start", out.before)
    for key, _ in sbatch:
        if key in OWNED:
            raise r.fail(f"job.sbatch.{key}", "is written by job.requeue; remove it here")
    return out


EXIT_MAX_REACHED = 75  # EX_TEMPFAIL: checkpointed, but no requeue left
MARKER_DIR = ".requeue"  # under the submit directory (shared), one file per job id


def sbatch_options(requeue: Optional[Requeue]) -> List[Tuple[str, Optional[str]]]:
    if requeue is None:
        return []
    return [("open-mode", "append"), ("requeue", None),
            ("signal", f"B:{requeue.signal}@{requeue.before}")]


def setup_lines(spec: JobSpec, via_mpirun: bool) -> List[Statement]:
    """Batch-scope lines before the launch: launcher/node/job.sh ``jsc_requeue_setup`` (the
    exports, the attempt line, the trap). via_mpirun: the launch is mpirun, a child of this
    shell rather than a Slurm step, so the trap passes the signal on with kill."""
    q = spec.job.requeue
    if q is None:
        return []
    return [Raw(f"jsc_requeue_setup {q.signal} {q.max} {'kill' if via_mpirun else 'scancel'}  "
                f"# job.requeue: SIG{q.signal} {q.before} s before the time limit or at a "
                "preemption")]


class RequeueFeature(Feature):
    name = "requeue"
    keys = KEYS

    def load_job(self, r: Reader, m: Mapping[str, Any], job: Job) -> Job:
        return replace(job, requeue=load_requeue(r, m.get("requeue"), job.time, job.sbatch))

    def exports(self, spec: JobSpec, purpose: str) -> Tuple[str, ...]:
        """Exported by jsc_requeue_setup; read by torchrun_jsc and torchrun_jsc_kit."""
        return () if spec.job.requeue is None else (MARKER_ENV, SIGNAL_ENV, FORWARD_ENV)

    def sbatch(self, ctx: Context) -> List[SbatchOption]:
        return sbatch_options(ctx.spec.job.requeue)

    def setup(self, ctx: Context) -> List[Statement]:
        return setup_lines(ctx.spec, via_mpirun=ctx.launch.via_mpirun)

    def verdict(self, ctx: Context) -> Optional[str]:
        """``jsc_requeue_verdict``: requeue, finish, or exit 75 (launcher/node/job.sh)."""
        q = ctx.spec.job.requeue
        return None if q is None else f"jsc_requeue_verdict {q.signal} {q.max}"


REQUEUE = RequeueFeature()

__all__ = ["EXIT_MAX_REACHED", "OWNED", "REQUEUE", "SIGNALS", "load_requeue", "sbatch_options",
           "setup_lines"]
