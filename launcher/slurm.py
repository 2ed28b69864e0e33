"""Slurm facts that the login node and the compute nodes both need: standard library only.

Where it sits: on the ground floor. The composer (launcher.features: the rendezvous port and
Slurm times; launcher.render.preview, launcher.submitit) and the node agents
(launcher.task.ray) import it; it imports nothing of the kit's
(docs/development/index.md#where-code-runs).

- :func:`expand_nodelist`: a Slurm hostlist (``jwb[0001-0003,0007],login1``) as node names.
- :func:`time_seconds`: a Slurm time (``30``, ``5:00``, ``1-12:00:00``) in seconds.
- The rendezvous port rule: ``29500 + job id % 1000`` unless ``launch.rdzv_port`` fixes it,
  moved up to the next port nothing listens on when another job on the first node holds it
  (job ids a multiple of 1000 apart). :func:`rdzv_port` is the rule in Python (the preview),
  :func:`rdzv_port_lines` the same rule in bash (the batch scripts), both built from the
  numbers below.

Why a probe, and not a port from Slurm: the batch script runs on the first node of the
allocation (sbatch(1)), where the rendezvous listens, so it can ask that node which port is
in use; Slurm's reserved ports (``SLURM_STEP_RESV_PORTS``) exist only for steps, only where
the site configured ``MpiParams=ports=``, and not in the batch script that writes the port
into every step's command line. The probe connects to the rendezvous name itself, with bash's
``/dev/tcp`` (no host python3 needed; a bash without it finds every port free, as before).
It cannot see a port that another job, started in the same seconds with the same rule's
port, has not opened yet: ids a multiple of 1000 apart and the same start second on one
shared node. ``launch.rdzv_port`` fixes the port where even that must not happen.
"""

import re
from typing import List, Tuple

PORT_BASE = 29500  # below Linux's ephemeral ports (32768-60999): the node's own connections
PORT_SPAN = 1000  # never take one; jobs whose ids differ by a multiple of this share a port
PORT_TRIES = 100  # ports tried upwards from the rule's, wrapping inside the span
RDZV_PORT_SH = f"$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))"


def rdzv_port(job_id: int) -> int:
    """The default rendezvous port of job ``job_id`` (what :data:`RDZV_PORT_SH` computes)."""
    return PORT_BASE + job_id % PORT_SPAN


def rdzv_port_lines(port: str, host: str, export: bool = False) -> List[str]:
    """Bash lines that set variable ``port`` to the rule's port, or to the next one up (in
    the span) when a process on ``host`` already listens there. ``port`` and ``host`` are
    variable names (``host`` holds the rendezvous name); the batch script runs on the
    rendezvous node, so a connection that succeeds means the port is taken."""
    assert port == "rdzv_port", port  # the variable launcher/node/job.sh sets
    return [f'jsc_rdzv_port "${{{host}}}" {PORT_BASE} {PORT_SPAN} {PORT_TRIES}'
            + (f"\nexport {port}" if export else "")]


# Slurm's time forms: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S (sbatch(1) --time).
TIME = re.compile(r"(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?\Z")


def time_seconds(text: str) -> int:
    """Seconds of a Slurm time (validated by the caller, :data:`TIME`)."""
    m = TIME.match(text)
    assert m is not None
    days, a, b, c = (int(g) if g else None for g in m.groups())
    if days is None:
        parts = [x for x in (a, b, c) if x is not None]
        h, mi, s = ([0] * (3 - len(parts)) + parts) if len(parts) == 3 else \
            (0, parts[0], parts[1] if len(parts) == 2 else 0)
        return h * 3600 + mi * 60 + s
    return days * 86400 + (a or 0) * 3600 + (b or 0) * 60 + (c or 0)


# The most nodes a job may have (job.nodes + job.spare_nodes) and a node list may name: ten
# times the largest Slurm systems' node counts (about 10,000), so that only a typo reaches it,
# and a node list past it is refused before it is expanded (jwb[0001-9999999]).
MAX_NODES = 100_000
_BAD = "not a Slurm node list: {text} (expected e.g. 'jwb[0001-0004]')"


def expand_nodelist(text: str, limit: int = MAX_NODES) -> List[str]:
    """Expand a Slurm hostlist like ``jwb[0001-0003,0007],login1`` (zero padding kept).
    ValueError for a malformed one, or one naming more than ``limit`` nodes (counted before
    anything is expanded: :func:`nodelist_size`)."""
    nodelist_size(text, limit)
    hosts: List[str] = []
    for item in _parse(text):
        names = [""]
        for literal, ranges in item:
            choices = [literal + str(i).zfill(width) for lo, hi, width in ranges
                       for i in range(lo, hi + 1)] if ranges else [literal]
            names = [a + b for a in names for b in choices]
        hosts += [n for n in names if n]
    if not hosts or any(c in "".join(hosts) for c in "[] "):
        raise ValueError(_BAD.format(text=_shown(text)))
    return hosts


def nodelist_size(text: str, limit: int = MAX_NODES) -> int:
    """How many nodes a Slurm hostlist names, without expanding it; ValueError for a
    malformed one or one over ``limit``."""
    count = 0
    for item in _parse(text):
        size = 1
        for _, ranges in item:
            size = min(size * (sum(hi - lo + 1 for lo, hi, _ in ranges) if ranges else 1),
                       limit + 1)
        count += size
        if count > limit:
            raise ValueError(f"{_shown(text)} names more than {limit} nodes (the limit)")
    return count


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:57]) + "..."


Item = List[Tuple[str, List[Tuple[int, int, int]]]]


def _parse(text: str) -> List[Item]:
    """Each comma-separated item as (literal, its [ranges]) pairs."""
    items = re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text) if len(text) <= 65536 else []
    if not items or ",".join(items) != text:
        raise ValueError(_BAD.format(text=_shown(text)))
    return [[(literal, _ranges(bracket[1:-1], _shown(text)) if bracket else [])
             for literal, bracket in re.findall(r"([^\[]*)(\[[^\]]*\])?", item)]
            for item in items]


def _ranges(ranges: str, shown: str) -> List[Tuple[int, int, int]]:
    """``0001-0003,0007`` as (first, last, zero-padded width) triples; ``[]`` names no range
    and is refused like any other bad one."""
    out = []
    for part in ranges.split(","):
        match = re.fullmatch(r"(\d{1,18})(?:-(\d{1,18}))?", part)
        if not match or (match[2] and int(match[2]) < int(match[1])):
            bad = repr(part) if len(part) <= 30 else repr(part[:27]) + "..."
            raise ValueError(f"not a Slurm node list: {shown} (bad range {bad})")
        out.append((int(match[1]), int(match[2] or match[1]), len(match[1])))
    return out


__all__ = ["MAX_NODES", "PORT_BASE", "PORT_SPAN", "PORT_TRIES", "RDZV_PORT_SH", "TIME",
           "expand_nodelist", "nodelist_size", "rdzv_port", "rdzv_port_lines", "time_seconds"]
