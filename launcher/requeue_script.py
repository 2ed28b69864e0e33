"""job.requeue in the jobscript: the signal, the trap that passes it on, and the requeue.

Where it sits: spec -> modes (plans) -> **requeue_script** (lines for jobscript) -> text. Pure.
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

from typing import List, Optional, Tuple

from launcher.model import JobSpec, Requeue
from launcher.shell import Raw, Statement

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


def launch_lines(spec: JobSpec, launch: str) -> List[str]:
    """The launch in the background (a trap runs only between commands) and waited for
    (launcher/node/job.sh ``jsc_wait_launch``), then the verdict (``jsc_requeue_verdict``)."""
    q = spec.job.requeue
    if q is None:
        return [launch]
    return [launch + " &", "jsc_wait_launch", f"jsc_requeue_verdict {q.signal} {q.max}"]


__all__ = ["EXIT_MAX_REACHED", "launch_lines", "setup_lines", "sbatch_options"]
