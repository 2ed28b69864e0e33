"""torchrun_jsc's marks on the job's start-up timeline (docs/guide/timeline.md).

Where it sits: the per-node agent (launcher.task.torchrun_jsc ``main``) marks ``decided`` once
its rendezvous decision is made, and ``rendezvous_done`` each time torch's elastic agent has
completed a rendezvous (its ``SimpleElasticAgent._rendezvous``, wrapped). A rendezvous that
takes long (other nodes' agents missing: a node whose step did not start, a slow container, a
network rule; torch's own limits at scale, pytorch/pytorch#144856) is not a silent wait: after
WAIT_FIRST_S the store host (node rank 0's agent) says so in one line on stderr, once per job,
with how many nodes' agents got to the rendezvous (their ``decided`` marks on the timeline);
the other agents say nothing (at 1,000 nodes, 1,000 lines where a 60 s rendezvous is normal). The line is written by
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
WAIT_FIRST_S = 60.0  # a rendezvous not done after this long gets one line, from the store host


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


def agents_seen(folder: str) -> int:
    """How many nodes' agents marked ``decided`` on the timeline (one file per node while the
    job runs): the nodes that got as far as the rendezvous."""
    try:
        names = os.listdir(folder)
    except OSError:
        return 0
    seen = 0
    for name in names:
        try:
            with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
                seen += any(line.split()[1:2] == ["decided"] for line in f)
        except OSError:
            continue
    return seen


def waiting_line(endpoint: str, done: threading.Event, out: TextIO, nnodes: str,
                 first: float = WAIT_FIRST_S, clock: Callable[[], float] = time.monotonic,
                 seen: Optional[Callable[[], int]] = None) -> bool:
    """Unless ``done`` is set within ``first`` s: one line on ``out`` that the rendezvous at
    ``endpoint`` still waits, with how many of the ``nnodes`` nodes' agents got to it; True
    when it said so."""
    start = clock()
    if done.wait(first):
        return False
    job = os.environ.get("SLURM_JOB_ID", "JOBID")
    count = (seen or (lambda: agents_seen(os.environ.get(TIMELINE_ENV, ""))))()
    out.write(f"torchrun_jsc: rendezvous at {endpoint} not done after {clock() - start:.0f} s: "
              f"{count} of {nnodes} nodes' agents got to it (`jsc-compose timeline {job}` "
              "shows which nodes got to \"torchrun_jsc decided\" and which did not)\n")
    out.flush()
    return True


def mark_rendezvous(api: ModuleType, endpoint: str = "", out: Optional[TextIO] = None,
                    first: float = WAIT_FIRST_S, is_host: bool = True, nnodes: str = "?",
                    seen: Optional[Callable[[], int]] = None) -> bool:
    """Wrap ``api.SimpleElasticAgent._rendezvous`` (torch's elastic agent, torch >= 1.9) so
    that each completed rendezvous is marked and, on the store host only (``is_host``), the
    first that takes long is said once (``waiting_line``): one line per job, not one per node
    and every few minutes. False where there is nothing to wrap (another torch) or no
    timeline."""
    cls = getattr(api, "SimpleElasticAgent", None)
    original = getattr(cls, "_rendezvous", None)
    if _hook() is None or original is None or getattr(original, "jsc_marks", False):
        return False
    said = threading.Event()  # once said, a later rendezvous (a restart) says nothing

    def watch(done: threading.Event) -> None:
        if waiting_line(endpoint or "the rendezvous endpoint", done, out or sys.stderr, nnodes,
                        first, seen=seen):
            said.set()

    @functools.wraps(original)
    def _rendezvous(self, *args, **kwargs):
        done = threading.Event()
        if is_host and not said.is_set():
            threading.Thread(target=watch, name="torchrun_jsc-rdzv-wait", args=(done,),
                             daemon=True).start()
        try:
            result = original(self, *args, **kwargs)
        finally:
            done.set()
        mark("rendezvous_done")
        return result

    _rendezvous.jsc_marks = True  # type: ignore[attr-defined]
    setattr(cls, "_rendezvous", _rendezvous)
    return True


def install(endpoint: str = "", is_host: bool = True, nnodes: str = "?") -> None:
    """Before torch's run: the rendezvous mark and, on the store host, its waiting line
    (never fails the launch)."""
    if _hook() is None:
        return
    try:
        from torch.distributed.elastic.agent.server import api
    except Exception:  # noqa: BLE001 - a torch without it: no mark
        return
    mark_rendezvous(api, endpoint, is_host=is_host, nnodes=nnodes)
