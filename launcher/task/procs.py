"""Child processes of the Ray node agent (launcher/task/ray.py): start, stop, leave nothing.

Where it sits: spec -> mode ray -> jobscript -> srun -> node.ray -> **procs** (``ray start
--block`` and the driver). Each child gets a session of its own and dies with the agent
(PR_SET_PDEATHSIG); stopping one sends SIGTERM, waits, then SIGKILLs its process group and
every process still in its session.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from typing import List, Mapping, Optional, Sequence

PROG = "ray_node"
STOP_TIMEOUT_S = 20.0  # ray start's SIGTERM handler stops its processes; then SIGKILL


def _die_with_parent() -> None:
    """Child side of Popen: SIGKILL when the agent dies, and a process group of its own."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Stop(Exception):
    """SIGTERM/SIGINT (scancel, srun's kill): tear down and exit 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stop(signum: int, _frame: object) -> None:
    # Once: a second SIGTERM (Slurm sends one per process) must not cut the teardown short.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise Stop(signum)


def start(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen:
    return subprocess.Popen(list(argv), env=dict(env), preexec_fn=_die_with_parent,
                            start_new_session=True)


def stop(proc: Optional[subprocess.Popen], what: str, graceful: bool = True) -> None:
    """SIGTERM the process and wait (graceful), then SIGKILL its whole process group and
    session (stragglers too). Not graceful after a signal: Slurm SIGKILLs the step KillWait
    seconds after its SIGTERM (2 s on the lab, 30 s by default), and the agent must be done."""
    if proc is None:
        return
    if graceful and proc.poll() is None:
        try:
            proc.send_signal(signal.SIGTERM)
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print(f"{PROG}: {what} did not stop within {STOP_TIMEOUT_S:g} s: killed",
                  file=sys.stderr, flush=True)
        except Stop:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    kill_session(proc.pid)


def session_members(sid: int, proc_root: str = "/proc") -> List[int]:
    """PIDs whose session is ``sid``. Ray's workers take process groups of their own, and
    when their raylet dies first they are re-parented outside the Slurm step's process tree
    (proctrack/linuxproc then no longer sees them): the session still holds them."""
    out = []
    for entry in os.listdir(proc_root):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc_root}/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[3] == str(sid):
            out.append(int(entry))
    return out


def kill_session(sid: int) -> None:
    for pid in session_members(sid):
        if pid != os.getpid():
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
