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
from typing import List

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


def expand_nodelist(text: str) -> List[str]:
    """Expand a Slurm hostlist like ``jwb[0001-0003,0007],login1`` (zero padding kept)."""
    hosts: List[str] = []
    items = re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text)
    if ",".join(items) != text:
        raise ValueError(f"not a Slurm node list: {text!r} (expected e.g. 'jwb[0001-0004]')")
    for item in items:
        names = [""]
        for literal, ranges in re.findall(r"([^\[]*)(?:\[([^\]]*)\])?", item):
            choices = [literal]
            if ranges:
                choices = [literal + n for n in _expand_ranges(ranges, text)]
            names = [a + b for a in names for b in choices]
        hosts += [n for n in names if n]
    if not hosts or any(c in "".join(hosts) for c in "[] "):
        raise ValueError(f"not a Slurm node list: {text!r} (expected e.g. 'jwb[0001-0004]')")
    return hosts


def _expand_ranges(ranges: str, text: str) -> List[str]:
    out: List[str] = []
    for part in ranges.split(","):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match or (match[2] and int(match[2]) < int(match[1])):
            raise ValueError(f"not a Slurm node list: {text!r} (bad range {part!r})")
        lo, hi = match[1], match[2] or match[1]
        out += [str(i).zfill(len(lo)) for i in range(int(lo), int(hi) + 1)]
    return out


__all__ = ["PORT_BASE", "PORT_SPAN", "PORT_TRIES", "RDZV_PORT_SH", "TIME", "expand_nodelist",
           "rdzv_port", "rdzv_port_lines", "time_seconds"]
