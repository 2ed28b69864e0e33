"""torchrun_jsc's marks on the job's start-up timeline (docs/guide/timeline.md).

Where it sits: the per-node agent (launcher.task.torchrun_jsc ``main``) marks ``decided`` once
its rendezvous decision is made, and ``rendezvous_done`` each time torch's elastic agent has
completed a rendezvous (its ``SimpleElasticAgent._rendezvous``, wrapped). The line is written by
the kit's stack hook (launcher/task/hook/sitecustomize.py ``phase``), which every task of a kit
job loads at start-up, the agent too; outside a kit job (no hook, no timeline folder) nothing
happens and nothing is wrapped.
"""

from __future__ import annotations

import functools
import os
import sys
from types import ModuleType
from typing import Optional

HOOK_MODULE = "jsc_stacks_hook"  # the hook in sys.modules (sitecustomize.py MODULE)
TIMELINE_ENV = "TORCHRUN_JSC_TIMELINE"  # set by the jobscript (launcher/node/job.sh)


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


def mark_rendezvous(api: ModuleType) -> bool:
    """Wrap ``api.SimpleElasticAgent._rendezvous`` (torch's elastic agent, torch >= 1.9) so
    that each completed rendezvous is marked; False where there is nothing to wrap (another
    torch) or no timeline."""
    cls = getattr(api, "SimpleElasticAgent", None)
    original = getattr(cls, "_rendezvous", None)
    if _hook() is None or original is None or getattr(original, "jsc_marks", False):
        return False

    @functools.wraps(original)
    def _rendezvous(self, *args, **kwargs):
        result = original(self, *args, **kwargs)
        mark("rendezvous_done")
        return result

    _rendezvous.jsc_marks = True  # type: ignore[attr-defined]
    setattr(cls, "_rendezvous", _rendezvous)
    return True


def install() -> None:
    """Before torch's run: the rendezvous mark (never fails the launch)."""
    if _hook() is None:
        return
    try:
        from torch.distributed.elastic.agent.server import api
    except Exception:  # noqa: BLE001 - a torch without it: no mark
        return
    mark_rendezvous(api)
