"""The ``job.requeue`` section of a spec: checkpoint on a signal, then requeue.

Where it sits: **spec** (called by launcher.spec) -> requeue_script -> jobscript text.
``job.requeue: true`` takes every default; a mapping sets ``signal`` (USR2), ``before``
(seconds before the time limit, 120) and ``max`` (requeues at most, 3).
"""

from __future__ import annotations

import re
from typing import Any, Optional, Tuple

from launcher.model import Requeue
from launcher.yamlread import Reader

_KEYS = ("signal", "before", "max")
# USR1 is NCCL's and TERM/INT are what torch's agent and Slurm use to end things, so only
# these: their default action (terminate) is what the forwarder and the program replace.
SIGNALS = ("USR2", "USR1")
# Options the requeue section writes itself; job.sbatch must not contradict them.
OWNED = ("signal", "requeue", "no-requeue", "open-mode")
_TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")


def time_seconds(text: str) -> int:
    """Seconds of a Slurm time (validated by the caller): M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    m = _TIME.match(text)
    assert m is not None
    days, a, b, c = (int(g) if g else None for g in m.groups())
    if days is None:
        parts = [x for x in (a, b, c) if x is not None]
        h, mi, s = ([0] * (3 - len(parts)) + parts) if len(parts) == 3 else \
            (0, parts[0], parts[1] if len(parts) == 2 else 0)
        return h * 3600 + mi * 60 + s
    return days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)


def _before(r: Reader, value: Any) -> int:
    """Seconds, or a Slurm time such as 5:00 (M:S) or 1:00:00 (H:M:S) turned into seconds."""
    if isinstance(value, str):
        if not _TIME.match(value):
            raise r.fail("job.requeue.before", "must be seconds (e.g. 300) or a Slurm time "
                         "such as 5:00 or 1:00:00", value)
        value = time_seconds(value)
    return r.integer("job.requeue.before", value, 1, 65535)


def load_requeue(r: Reader, value: Any, time: Optional[str],
                 sbatch: Tuple[Tuple[str, Optional[str]], ...]) -> Optional[Requeue]:
    """Validate job.requeue against job.time and job.sbatch (None when absent or false)."""
    if value is None or value is False:
        return None
    if value is True:
        value = {}
    m = r.mapping("job.requeue", value, _KEYS)
    signal = m.get("signal", Requeue.signal)
    name = signal.upper() if isinstance(signal, str) else ""
    name = name[3:] if name.startswith("SIG") else name  # no str.removeprefix: Python 3.8
    if name not in SIGNALS:
        raise r.fail("job.requeue.signal", "must be USR2 or USR1 (USR2 is the default; NCCL "
                     "uses USR1; TERM is Slurm's and torchrun's own stop signal)", signal)
    out = Requeue(signal=name, before=_before(r, m.get("before", Requeue.before)),
                  max=r.integer("job.requeue.max", m.get("max", Requeue.max), 0, 1000))
    if time is None:
        raise r.fail("job.requeue", "needs job.time: the signal is sent job.requeue.before "
                     "seconds before the time limit")
    if out.before >= time_seconds(time):
        raise r.fail("job.requeue.before", f"must be less than job.time ({time} = "
                     f"{time_seconds(time)} s), or the signal would come at the start", out.before)
    for key, _ in sbatch:
        if key in OWNED:
            raise r.fail(f"job.sbatch.{key}", "is written by job.requeue; remove it here")
    return out
