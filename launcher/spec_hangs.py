"""The ``launch.hang_timeout`` key of a spec: end a job in which no rank made progress.

Where it sits: **spec** (called by launcher.spec) -> hangs_script -> jobscript text.
Seconds (``1800``) or a Slurm time (``"30:00"``: minutes and seconds). Progress is what the
stack hook sees in each rank: a collective issued in any process group, or a call of
``launcher.progress()`` (docs/guide/hangs.md). Refused: a value below the rendezvous store's
read timeout (the kit's own allowance for one wait on the store), not below the join timeout
when torchrun restarts workers (the agents meet again while no rank runs), not below the time
limit, and in the modes whose ranks do not use torch.distributed (the mode's
``no_progress_hook`` says why).
"""

from __future__ import annotations

from typing import Any, Optional

from launcher.model import Job, Launch
from launcher.modes import mode_for
from launcher.modes.common import rdzv_timeouts
from launcher.spec_requeue import _TIME, time_seconds
from launcher.yamlread import Reader

KEY = "launch.hang_timeout"
_ACCEPTED = "seconds (e.g. 1800) or a Slurm time such as 30:00"


def load_hang_timeout(r: Reader, value: Any, job: Job, launch: Launch) -> Optional[int]:
    """Validated seconds, or None when absent or false."""
    if value is None or value is False:
        return None
    unwatched = mode_for(launch.mode).no_progress_hook
    if unwatched:
        raise r.fail(KEY, f"means nothing in mode {launch.mode!r}: progress is observed "
                     f"through torch.distributed's collectives, and {unwatched}", value)
    if isinstance(value, str):
        if not _TIME.match(value):
            raise r.fail(KEY, f"must be {_ACCEPTED}", value)
        value = time_seconds(value)
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise r.fail(KEY, f"must be {_ACCEPTED}", value)
    join, read = rdzv_timeouts(job.nodes)
    if value < read:
        raise r.fail(KEY, f"must be at least the rendezvous store's read timeout ({read} s for "
                     f"{job.nodes} node{'s' if job.nodes != 1 else ''}: 120 + 1 per 2 nodes), "
                     "which the kit allows one wait on the store", value)
    if getattr(launch.options, "max_restarts", 0) and value <= join:
        raise r.fail(KEY, f"must be more than the rendezvous join timeout ({join} s for "
                     f"{job.nodes} node{'s' if job.nodes != 1 else ''}) with "
                     "launch.max_restarts: after a restart the agents meet again that long "
                     "while no rank runs", value)
    if job.time is not None and value >= time_seconds(job.time):
        raise r.fail(KEY, f"must be less than job.time ({job.time} = {time_seconds(job.time)} "
                     "s), or the time limit comes first", value)
    return value
