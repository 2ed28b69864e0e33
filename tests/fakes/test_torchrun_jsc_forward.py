"""Ring 2: torchrun_jsc's signal forwarding (launcher/task/torchrun_jsc/forward.py) with
launcher.requeue: a worker signalled while it is still starting (no handler yet) must neither
die nor lose the request. Real processes and signals, no torch."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

AGENT = r'''
import os, signal, subprocess, sys, time
from launcher.task.torchrun_jsc import forward
forward.install({"TORCHRUN_JSC_FORWARD_SIGNALS": "USR2"})
child = """
import time
time.sleep(1.0)  # still importing torch: no handler yet
from launcher.requeue import StopRequest
print("worker requested:", StopRequest({"REQUEUE_SIGNAL": "USR2"}).requested, flush=True)
"""
p = subprocess.Popen([sys.executable, "-c", child], start_new_session=True)
time.sleep(0.3)
os.kill(p.pid, signal.SIGUSR2)       # Slurm signals every process of the step itself
os.kill(os.getpid(), signal.SIGUSR2)  # and the agent, which forwards it
print("worker rc", p.wait(), flush=True)
'''


def test_early_signal_is_held_until_the_handler_exists():
    p = subprocess.run([sys.executable, "-c", AGENT], capture_output=True, text=True,
                       timeout=30, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    assert "worker requested: True" in p.stdout and "worker rc 0" in p.stdout, p.stdout
    assert "torchrun_jsc: SIGUSR2 received, forwarded to workers [" in p.stderr, p.stderr


def test_no_signals_named_installs_nothing():
    from launcher.task.torchrun_jsc import forward

    assert forward.install({}) == ()
