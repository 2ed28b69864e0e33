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

import signal
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
    """Batch-scope lines before the launch: exports, the attempt line and the trap.
    via_mpirun: the launch is mpirun, a child of this shell rather than a Slurm step."""
    q = spec.job.requeue
    if q is None:
        return []
    sig = q.signal
    pass_on = f'kill -s {sig} "$launch_pid" 2>/dev/null || true' if via_mpirun else \
        f'scancel --signal={sig} "$SLURM_JOB_ID" || true'
    return [Raw(f"""\
# Requeue (job.requeue): SIG{sig} comes {q.before} s before the time limit, or with a
# preemption (scancel -b --signal={sig} JOBID). Every rank gets it, saves at the next step
# boundary, rank 0 writes $REQUEUE_MARKER, all exit 0; then the job is requeued.
export REQUEUE_SIGNAL={sig} TORCHRUN_JSC_FORWARD_SIGNALS={sig}
export REQUEUE_MARKER="$PWD/{MARKER_DIR}/$SLURM_JOB_ID.stopped"
mkdir -p -- "$PWD/{MARKER_DIR}"
rm -f -- "$REQUEUE_MARKER"
# Slurm counts requeues in SLURM_RESTART_COUNT, psslurm (JSC) in SLURM_JOB_RESTART_COUNT only.
restart_count="${{SLURM_RESTART_COUNT:-${{SLURM_JOB_RESTART_COUNT:-0}}}}"
echo "job ${{SLURM_JOB_ID}}: attempt $((restart_count + 1)), requeued at most {q.max} times"
launch_pid=""
signalled=0
on_requeue_signal() {{
    signalled=1
    echo "job ${{SLURM_JOB_ID}}: SIG{sig} at $(date +%s.%N), passed on to every rank"
    if [ -n "$launch_pid" ]; then {pass_on}; fi
}}
trap on_requeue_signal {sig}""")]


# Wait for the launch started with `&` (bash runs a trap only between commands, so a launch in
# the foreground would hold every trap until it ends); launch_rc is its exit status. A wait
# that a trap interrupted returns > 128 while the launch still runs: wait again.
WAIT_FOR_LAUNCH = """\
launch_pid=$!
launch_rc=0
wait "$launch_pid" || launch_rc=$?
while [ "$launch_rc" -gt 128 ] && kill -0 "$launch_pid" 2>/dev/null; do
    launch_rc=0  # wait was interrupted by a trap: the launch still runs
    wait "$launch_pid" || launch_rc=$?
done"""


def launch_lines(spec: JobSpec, launch: str, after_wait: str = "") -> List[str]:
    """The launch in the background (a trap runs only between commands), then the verdict.
    ``after_wait``: lines right after the wait (launcher.hangs_script.after_launch)."""
    q = spec.job.requeue
    if q is None:
        return [launch]
    return [launch + " &", WAIT_FOR_LAUNCH + after_wait + f"""
# A preemption (PreemptTime set) on a partition that requeues preempted jobs: Slurm requeues
# this job when the script ends, whatever its exit (a site that preempts with SIGTERM ends
# the ranks: they resume from the last periodic checkpoint). A requeue of our own on top
# made Slurm 24.11 requeue it once more after the next attempt had finished (lab job 12).
job_info=$(scontrol show job "$SLURM_JOB_ID" 2>/dev/null) || job_info=""
slurm_requeues=""
case $job_info in
    *" PreemptTime=None"*|"") ;;
    *" PreemptTime="*)
        preempt_mode=$(scontrol show partition "${{SLURM_JOB_PARTITION:-}}" 2>/dev/null |
            sed -n 's/.*PreemptMode=\\([^ ]*\\).*/\\1/p') || preempt_mode=""
        case $preempt_mode in *REQUEUE*) slurm_requeues="PreemptMode=$preempt_mode" ;; esac ;;
esac
if [ "$signalled" = 1 ] && [ "$launch_rc" -eq {128 + signal.Signals["SIG" + q.signal].value} ]; then
    # Ranks that had no handler yet (still starting) died of the signal itself: nothing
    # was lost since the last periodic checkpoint, so resume from there.
    echo "no new checkpoint: ranks ended by SIG{q.signal} before their handler was set" \\
        >"$REQUEUE_MARKER"
    launch_rc=0
fi
if [ "$launch_rc" -ne 0 ] && [ -n "$slurm_requeues" ]; then
    echo "job ${{SLURM_JOB_ID}}: preempted, the program ended with exit $launch_rc: Slurm" \\
        "requeues it ($slurm_requeues), from the last periodic checkpoint"
    exit "$launch_rc"
fi
if [ "$launch_rc" -ne 0 ]; then
    echo "job ${{SLURM_JOB_ID}}: the program failed (exit $launch_rc): not requeued" >&2
    exit "$launch_rc"
fi
if [ ! -e "$REQUEUE_MARKER" ]; then
    echo "job ${{SLURM_JOB_ID}}: finished"
    exit 0
fi
echo "job ${{SLURM_JOB_ID}}: checkpointed: $(cat -- "$REQUEUE_MARKER")"
rm -f -- "$REQUEUE_MARKER"
if [ -n "$slurm_requeues" ]; then
    echo "job ${{SLURM_JOB_ID}}: preempted: Slurm requeues it ($slurm_requeues)"
    exit 0
fi
if [ "$restart_count" -ge {q.max} ]; then
    echo "job ${{SLURM_JOB_ID}}: requeued {q.max} times already (job.requeue.max): not again;" \\
        "resubmit to go on from the checkpoint" >&2
    exit {EXIT_MAX_REACHED}
fi
if scontrol requeue "$SLURM_JOB_ID"; then
    echo "job ${{SLURM_JOB_ID}}: requeued at $(date +%s.%N)"
else
    # A site may refuse requeues (JobRequeue/partition policy, psslurm settings): the
    # checkpoint is saved, so say how to go on rather than end as if the work were done.
    jobscript=$(sed -n 's/^ *Command=//p' <<<"$job_info")
    echo "job ${{SLURM_JOB_ID}}: scontrol requeue was refused: the checkpoint is saved; resume" \\
        "with: sbatch ${{jobscript:-this jobscript}}" >&2
    exit {EXIT_MAX_REACHED}
fi"""]


__all__ = ["EXIT_MAX_REACHED", "launch_lines", "setup_lines", "sbatch_options"]
