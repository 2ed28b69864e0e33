"""The requeue signal reaches the program's own handler, and never kills a rank still starting.

Where it sits: the stack hook (launcher/task/hook/sitecustomize.py) calls ``arm`` at start-up in
every rank of a job with job.requeue (REQUEUE_SIGNAL is set), before the program's first line.
How a stop request travels: the batch shell's trap passes the signal on with ``scancel
--signal`` (launcher/features/requeue.py), which signals every process of every step; in torchrun
mode the agent forwards it to its workers too (launcher/task/torchrun_jsc/forward.py).

Why a hold: a rank still importing torch has no handler yet, and the signal's default action
would end it (the step fails). So the signal is blocked from start-up (a torchrun worker
inherits the block from its agent; an srun task is blocked here), and one that comes early
stays pending. When the program installs a handler for it with ``signal.signal`` (its own, as
Lightning's SLURM auto-requeue or submitit do, or ``torchrun_jsc_kit.StopRequest``), the signal
is unblocked in the main thread and a held one is delivered to that handler at once. The hold
installs no handler of its own: Lightning registers its requeue handler only where the signal
has none (SignalConnector._has_already_handler). A daemon thread takes the signals that come
while no handler exists (sigwait) and says so in one line; one that comes after goes to the
handler (the kernel prefers the main thread, which no longer blocks it; the thread passes on any
it still takes). A program that never installs a handler keeps running: the signal cannot stop
it, and the line says why (the job runs into its time limit).

Standard library only, Python >= 3.8; the hook calls it inside a try: never fails start-up.
"""

import signal
import sys
import threading

from .requeue import SIGNAL_ENV, signal_named


class Hold(object):
    """The signals held for the program, and what became of them."""

    def __init__(self, signals, rank, say):
        self.signals = tuple(signals)
        self.rank = rank
        self.say = say
        self.lock = threading.RLock()  # a handler may install one again while it is held
        self.handled = set()  # signals the program installed a handler for
        self.pending = set()  # signals taken by the thread before that
        self.main = threading.main_thread().ident

    def installed(self, sig, handler):
        """signal.signal(sig, handler) just ran in the main thread."""
        if sig not in self.signals or not callable(handler):
            return
        with self.lock:
            self.handled.add(sig)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
            held = sig in self.pending
            self.pending.discard(sig)
        if held:  # outside the lock: the handler may run at once and install another
            self.say("torchrun_jsc_kit: rank %s: %s handed to the program's handler, which "
                     "it installed after the signal came" % (self.rank, sig.name))
            signal.pthread_kill(self.main, sig)

    def took(self, sig):
        """The waiting thread took ``sig``: pass it on, or hold it and say so."""
        with self.lock:
            handled = sig in self.handled
            first = not handled and sig not in self.pending
            if not handled:
                self.pending.add(sig)
        if handled:
            signal.pthread_kill(self.main, sig)
        elif first:
            self.say("torchrun_jsc_kit: rank %s: %s came before the program installed a "
                     "handler for it: held until it does (a program without one is not "
                     "stopped by it and runs to its time limit; docs/guide/requeue.md)"
                     % (self.rank, sig.name))

    def wait(self):
        while True:
            try:
                self.took(signal.Signals(signal.sigwait(self.signals)))
            except Exception:  # never end silently: a dead thread would lose a request
                pass


def _stderr(line):
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def arm(env, rank, say=_stderr):
    """Hold the requeue signal for the program (see above); the Hold, or None where the job has
    no job.requeue or this is not the main thread. Replaces ``signal.signal`` by a wrapper that
    tells the hold, and starts the waiting thread."""
    name = env.get(SIGNAL_ENV, "")
    if not name or threading.current_thread() is not threading.main_thread():
        return None
    sig = signal_named(name)
    hold = Hold([sig], rank, say)
    signal.pthread_sigmask(signal.SIG_BLOCK, hold.signals)
    original = signal.signal

    def handed_over(signalnum, handler):
        previous = original(signalnum, handler)
        try:
            hold.installed(signal.Signals(signalnum), handler)
        except Exception:
            pass
        return previous

    handed_over.__doc__ = original.__doc__
    handed_over.__wrapped__ = original
    signal.signal = handed_over
    threading.Thread(target=hold.wait, name="jsc_stop", daemon=True).start()
    return hold


__all__ = ["Hold", "arm"]
