"""Ring 2: the requeue signal reaches the program's own handler (torchrun_jsc_kit/stop.py,
armed by the kit's hook in every rank of a job with job.requeue), under real Pythons 3.8, this
one and 3.13. Real processes and signals, no torch, no sleeps: the parent and the rank go step by
step over pipes.

A rank signalled before it has a handler (still importing torch) neither dies nor loses the
request: the hook holds it, says so in one line, and hands it to the handler the program
installs later with a plain ``signal.signal`` (Lightning's, submitit's, the user's own), whether
the rank inherited the block from torchrun_jsc's agent or started unblocked (srun mode). The hook
installs no handler of its own (Lightning registers its requeue handler only where the signal has
none). A handler installed first gets the signal at once; a program without one survives it and
the line says why; a process that is not a rank, or a job without job.requeue, is left alone."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Dict, List

import pytest

from tests.helpers import need

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "launcher" / "task" / "hook"
HELD = "came before the program installed a handler for it: held until it does"


# The oldest the images may have, this one, and the newest torch supports; looked up when a
# test runs (tests/helpers/need.py: skipped with the reason where pyenv's is missing).
PYTHONS = ("3.8", "this", "3.13")


def python(version: str) -> str:
    return sys.executable if version == "this" else need.pyenv_python(version)

# The rank: says it started (and whether the signal has a handler, as Lightning asks), waits
# for the parent's word, installs its handler (or not), and reports what its handler saw.
RANK = r'''
import os, signal, sys
sig = signal.SIGUSR2
mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
print("started", signal.getsignal(sig) == signal.SIG_DFL, sig in mask, flush=True)
got = []
def handler(s, f):
    got.append(s)
    if sys.argv[1] == "reinstall":  # an old idiom: the handler installs itself again
        signal.signal(sig, handler)
if sys.argv[1] in ("early", "reinstall"):
    sys.stdin.readline()
if sys.argv[1] != "none":
    signal.signal(sig, handler)
print("installed", flush=True)
sys.stdin.readline()
n = 0
while not got and n < 10**7:  # the handler runs between two bytecodes of the main thread
    n += 1
print("handled", [signal.Signals(s).name for s in got], flush=True)
'''


def env(**extra: str) -> Dict[str, str]:
    out = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(HOOK), "REQUEUE_SIGNAL": "USR2",
           "RANK": "3"}
    out.update(extra)
    return {k: v for k, v in out.items() if v}


def start(python: str, how: str, environ: Dict[str, str], blocked: bool) -> subprocess.Popen:
    """The rank, started with SIGUSR2 blocked (as torchrun_jsc's workers inherit it from their
    agent) or not (an srun task)."""
    if blocked:
        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR2])
    try:
        return subprocess.Popen([python, "-c", RANK, how], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=environ)
    finally:
        if blocked:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGUSR2])


def say(p: subprocess.Popen, word: str = "go") -> None:
    p.stdin.write(word + "\n")
    p.stdin.flush()


def finish(p: subprocess.Popen) -> List[str]:
    out, err = p.communicate(timeout=60)
    return [p.returncode, out, err]


@pytest.mark.parametrize("version", PYTHONS, ids=[f"python-{k}" for k in PYTHONS])
@pytest.mark.parametrize("blocked", [True, False], ids=["torchrun-worker", "srun-task"])
@pytest.mark.parametrize("how", ["early", "reinstall"])
def test_early_signal_is_held_then_handed_to_the_programs_own_handler(version, blocked, how):
    p = start(python(version), how, env(), blocked)
    assert p.stdout.readline().split() == ["started", "True", "True"]  # held, no handler
    os.kill(p.pid, signal.SIGUSR2)  # Slurm signals every process of the step
    line = p.stderr.readline()
    assert f"torchrun_jsc_kit: rank 3: SIGUSR2 {HELD}" in line, line
    say(p)
    assert p.stdout.readline() == "installed\n"
    say(p)
    rc, out, err = finish(p)
    assert rc == 0, err
    assert out == "handled ['SIGUSR2']\n", (out, err)
    assert "handed to the program's handler" in err, err


@pytest.mark.parametrize("version", PYTHONS, ids=[f"python-{k}" for k in PYTHONS])
def test_a_handler_installed_first_gets_the_signal_at_once(version):
    p = start(python(version), "first", env(), blocked=True)
    assert p.stdout.readline().split() == ["started", "True", "True"]
    assert p.stdout.readline() == "installed\n"
    os.kill(p.pid, signal.SIGUSR2)
    say(p)
    rc, out, err = finish(p)
    assert rc == 0 and out == "handled ['SIGUSR2']\n", (out, err)
    assert HELD not in err, err


def test_a_program_without_a_handler_survives_and_the_line_says_why():
    p = start(sys.executable, "none", env(), blocked=False)
    assert p.stdout.readline().split() == ["started", "True", "True"]
    assert p.stdout.readline() == "installed\n"
    os.kill(p.pid, signal.SIGUSR2)
    line = p.stderr.readline()
    assert HELD in line and "runs to its time limit; docs/guide/requeue.md" in line, line
    say(p)
    rc, out, err = finish(p)
    assert rc == 0 and out.startswith("handled []"), (rc, out, err)


@pytest.mark.parametrize("case", ["not-a-rank", "no-requeue"])
def test_left_alone_outside_a_requeueing_rank(case):
    """torchrun_jsc's agent (no RANK) and a job without job.requeue: nothing is held, so the
    signal has its default action (the agent installs its own forwarding)."""
    environ = env(RANK="") if case == "not-a-rank" else env(REQUEUE_SIGNAL="")
    p = start(sys.executable, "none", environ, blocked=False)
    assert p.stdout.readline().split() == ["started", "True", "False"]
    assert p.stdout.readline() == "installed\n"
    os.kill(p.pid, signal.SIGUSR2)
    rc, out, err = finish(p)
    assert rc == -signal.SIGUSR2, (rc, out, err)
