"""Pass a signal on from torchrun_jsc's agent to its workers (TORCHRUN_JSC_FORWARD_SIGNALS).

Why: torch's agent handles only SIGTERM, SIGINT, SIGHUP and SIGQUIT (TORCHELASTIC_SIGNALS_TO_
HANDLE, torch/distributed/elastic/multiprocessing/api.py: it raises SignalException and
closes the workers with SIGTERM). Any other signal has its default action: SIGUSR1/SIGUSR2
terminate the agent, its workers (started with start_new_session=True) lose their agent,
and the step fails before a worker could save. A job that asks for a checkpoint with
``--signal=B:USR2@T`` sets TORCHRUN_JSC_FORWARD_SIGNALS=USR2 (launcher.features.requeue); the
agent then survives the signal and sends it to each worker process that catches it.

Slurm signals every process of a step itself (``scancel --signal``, proctrack), workers
included, so a worker still importing torch (no handler yet) would die of it: the agent
fails the step (job 100: exit 143, job 104: exit 1 in the 4th attempt). So the agent blocks
the signals instead of only catching them: a thread waits for them with sigwait, and the
blocked mask is inherited by every worker (fork and exec keep it). A worker's early signal
stays pending until the program installs a handler for it (its own or torchrun_jsc_kit's
StopRequest: the kit's hook hands the signal over then, torchrun_jsc_kit/stop.py). A worker
may get the signal twice (from Slurm and forwarded). A worker that neither catches nor blocks
the signal is skipped, never killed by forwarding.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Callable, List, Mapping, Tuple

from launcher.task.hook.torchrun_jsc_kit.requeue import signal_named

ENV = "TORCHRUN_JSC_FORWARD_SIGNALS"
ALLOWED = ("USR1", "USR2")


class ForwardError(ValueError):
    """A bad TORCHRUN_JSC_FORWARD_SIGNALS value; str() is the one line to print."""


def parse(text: str) -> Tuple[signal.Signals, ...]:
    """'USR2' or 'SIGUSR1,USR2' -> signals; '' -> none."""
    out: List[signal.Signals] = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        try:
            sig = signal_named(item)
        except KeyError:
            sig = None
        if sig is None or sig.name[3:] not in ALLOWED:
            raise ForwardError(f"{ENV}: expected a comma-separated list of USR1, USR2, got "
                               f"{text!r} (TERM/INT/HUP/QUIT are torch's own: it stops the "
                               "workers on them)")
        out.append(sig)
    return tuple(dict.fromkeys(out))


def child_pids(parent: int, proc: str = "/proc") -> List[int]:
    """Direct children of ``parent``, from /proc/PID/stat (field 4 is the parent's pid)."""
    out = []
    for entry in os.listdir(proc):
        if not entry.isdigit():
            continue
        try:
            with open(f"{proc}/{entry}/stat", encoding="ascii", errors="replace") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:
            continue  # gone meanwhile
        if len(fields) > 1 and fields[1] == str(parent):
            out.append(int(entry))
    return sorted(out)


def catches(pid: int, sig: signal.Signals, proc: str = "/proc") -> bool:
    """True when ``pid`` has a handler for ``sig`` or blocks it (SigCgt, SigBlk in
    /proc/PID/status): either way the signal cannot kill it."""
    try:
        with open(f"{proc}/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("SigCgt:", "SigBlk:")) and \
                        int(line.split()[1], 16) >> (sig - 1) & 1:
                    return True
    except OSError:
        pass
    return False


def forward(sig: signal.Signals, parent: int, kill: Callable[[int, int], None] = os.kill,
            proc: str = "/proc") -> Tuple[List[int], List[int]]:
    """Send ``sig`` to each child of ``parent`` that catches it: (sent to, skipped)."""
    sent, skipped = [], []
    for pid in child_pids(parent, proc):
        if not catches(pid, sig, proc):
            skipped.append(pid)
            continue
        try:
            kill(pid, sig)
            sent.append(pid)
        except ProcessLookupError:
            pass
    return sent, skipped


def _forward_and_say(sig: signal.Signals) -> None:
    sent, skipped = forward(sig, os.getpid())
    note = f"; skipped {skipped} (no handler for it)" if skipped else ""
    print(f"torchrun_jsc: {sig.name} received, forwarded to workers {sent}{note}",
          file=sys.stderr, flush=True)


def install(env: Mapping[str, str]) -> Tuple[signal.Signals, ...]:
    """Block the signals ``env`` names (none unless ENV is set) in this thread, so in every
    worker started later, and forward them from a daemon thread that sigwaits for them.
    Call it before any worker starts. A handler stays installed as well, for a thread
    started earlier that has them unblocked."""
    signals = parse(env.get(ENV, ""))
    if not signals:
        return signals
    for sig in signals:
        signal.signal(sig, lambda signum, _frame: _forward_and_say(signal.Signals(signum)))
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)

    def wait_and_forward() -> None:
        while True:
            _forward_and_say(signal.Signals(signal.sigwait(signals)))

    threading.Thread(target=wait_and_forward, name="torchrun_jsc-forward", daemon=True).start()
    return signals
