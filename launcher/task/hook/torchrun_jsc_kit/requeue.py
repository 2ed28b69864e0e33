"""The program's side of job.requeue: notice the signal, agree on stopping, leave a marker.

Where it sits: imported by the training program (``torchrun_jsc_kit.StopRequest``,
examples/ddp_train.py) inside the job; the jobscript (launcher.features.requeue) exports what it
reads:

    REQUEUE_SIGNAL  the signal to catch (USR2): a handler sets a flag, nothing more;
    REQUEUE_MARKER  the file rank 0 writes after its last checkpoint: "stopped, requeue me".

The contract: at the next step boundary all ranks agree (an all_reduce MAX of the flag, so
no rank leaves a collective hanging), rank 0 saves the checkpoint atomically, calls
``mark_stopped``, and every rank exits 0. The script requeues when the marker is there,
finishes when it is not, and fails without requeueing on any non-zero exit. Standard library
only (torch is imported lazily by ``agree``), Python >= 3.8, and nothing happens at import.
A program with its own handler for the signal needs none of this (docs/guide/requeue.md).
"""

from __future__ import annotations

import os
import signal
from typing import Mapping, Optional

SIGNAL_ENV = "REQUEUE_SIGNAL"
MARKER_ENV = "REQUEUE_MARKER"


def signal_named(name: str) -> signal.Signals:
    """'USR2', 'SIGUSR2' or 'usr2' -> signal.SIGUSR2 (KeyError for a name that is none)."""
    name = name.strip().upper()
    return signal.Signals[name if name.startswith("SIG") else "SIG" + name]


class StopRequest:
    """A flag set by REQUEUE_SIGNAL. Create it first thing in the program: a signal that
    arrives before the handler exists terminates the process (its default action)."""

    def __init__(self, env: Optional[Mapping[str, str]] = None) -> None:
        env = os.environ if env is None else env
        self.requested = False
        self.signal: Optional[signal.Signals] = None
        self.marker = env.get(MARKER_ENV) or None
        name = env.get(SIGNAL_ENV, "")
        if name:
            self.signal = signal_named(name)
            signal.signal(self.signal, self._handle)
            # The kit's hook holds the signal blocked until a handler exists (torchrun_jsc_kit.
            # stop), so one that came while this process was starting is still pending: the
            # hook hands it over when signal.signal() installs a handler; unblocking here too
            # covers a process started without the hook.
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [self.signal])

    def _handle(self, _signum: int, _frame: object) -> None:
        self.requested = True

    def agree(self) -> bool:
        """True on every rank when any rank was asked to stop (a collective: call it on all
        ranks at the same step)."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([1 if self.requested else 0], dtype=torch.int32)
        if dist.is_available() and dist.is_initialized():
            if dist.get_backend() == "nccl":
                flag = flag.cuda()
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def mark_stopped(self, text: str) -> None:
        """Rank 0, after the checkpoint is on disk: tell the jobscript to requeue."""
        if self.marker is None:
            return  # not started by a requeueing jobscript: nothing to tell
        tmp = f"{self.marker}.tmp.{os.getpid()}"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text.rstrip("\n") + "\n")
        os.replace(tmp, self.marker)


__all__ = ["MARKER_ENV", "SIGNAL_ENV", "StopRequest", "signal_named"]
