"""torchrun_jsc's marks on the job's start-up timeline (docs/guide/timeline.md).

Where it sits: the per-node agent (launcher.task.torchrun_jsc ``main``) marks ``decided`` once
its rendezvous decision is made, and ``rendezvous_done`` each time torch's elastic agent has
completed a rendezvous (its ``SimpleElasticAgent._rendezvous``, wrapped). A rendezvous that
takes long (other nodes' agents missing: a node whose step did not start, a slow container, a
network rule; torch's own limits at scale, pytorch/pytorch#144856) is not a silent wait: after
WAIT_FIRST_S, and every WAIT_EVERY_S after that, one line on stderr says so. The line is written by
the kit's stack hook (launcher/task/hook/sitecustomize.py ``phase``), which every task of a kit
job loads at start-up, the agent too; outside a kit job (no hook, no timeline folder) nothing
happens and nothing is wrapped.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from types import ModuleType
from typing import Callable, Optional, TextIO

HOOK_MODULE = "jsc_stacks_hook"  # the hook in sys.modules (sitecustomize.py MODULE)
TIMELINE_ENV = "TORCHRUN_JSC_TIMELINE"  # set by the jobscript (launcher/node/job.sh)
WAIT_FIRST_S = 60.0  # a rendezvous not done after this long gets a line, then every
WAIT_EVERY_S = 300.0


def _hook() -> Optional[ModuleType]:
    if not os.environ.get(TIMELINE_ENV):
        return None
    hook = sys.modules.get(HOOK_MODULE)
    return hook if hook is not None and hasattr(hook, "phase") else None


def mark(name: str) -> None:
    """One line on this node's timeline, if this agent runs in a kit job."""
    hook = _hook()
    if hook is not None:
        hook.phase(name)


def waiting_lines(endpoint: str, done: threading.Event, out: TextIO,
                  first: float = WAIT_FIRST_S, every: float = WAIT_EVERY_S,
                  clock: Callable[[], float] = time.monotonic) -> None:
    """Until ``done`` is set: after ``first`` s and then every ``every`` s, one line on
    ``out`` that this node's agent still waits for the rendezvous at ``endpoint``."""
    start, wait = clock(), first
    job = os.environ.get("SLURM_JOB_ID", "JOBID")
    while not done.wait(wait):
        out.write(f"torchrun_jsc: rendezvous at {endpoint} not done after "
                  f"{clock() - start:.0f} s: waiting for the other nodes' agents "
                  f"(`jsc-compose timeline {job}` shows which nodes got to \"torchrun_jsc "
                  "decided\" and which did not)\n")
        out.flush()
        wait = every


def mark_rendezvous(api: ModuleType, endpoint: str = "", out: Optional[TextIO] = None,
                    first: float = WAIT_FIRST_S, every: float = WAIT_EVERY_S) -> bool:
    """Wrap ``api.SimpleElasticAgent._rendezvous`` (torch's elastic agent, torch >= 1.9) so
    that each completed rendezvous is marked, and a long one said (``waiting_lines``); False
    where there is nothing to wrap (another torch) or no timeline."""
    cls = getattr(api, "SimpleElasticAgent", None)
    original = getattr(cls, "_rendezvous", None)
    if _hook() is None or original is None or getattr(original, "jsc_marks", False):
        return False

    @functools.wraps(original)
    def _rendezvous(self, *args, **kwargs):
        done = threading.Event()
        waiter = threading.Thread(target=waiting_lines, name="torchrun_jsc-rdzv-wait",
                                  args=(endpoint or "the rendezvous endpoint", done,
                                        out or sys.stderr, first, every), daemon=True)
        waiter.start()
        try:
            result = original(self, *args, **kwargs)
        finally:
            done.set()
        mark("rendezvous_done")
        return result

    _rendezvous.jsc_marks = True  # type: ignore[attr-defined]
    setattr(cls, "_rendezvous", _rendezvous)
    return True


def install(endpoint: str = "") -> None:
    """Before torch's run: the rendezvous mark and its waiting line (never fails the
    launch)."""
    if _hook() is None:
        return
    try:
        from torch.distributed.elastic.agent.server import api
    except Exception:  # noqa: BLE001 - a torch without it: no mark
        return
    mark_rendezvous(api, endpoint)
