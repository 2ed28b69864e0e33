"""Slurm facts that the login node and the compute nodes both need: standard library only.

Where it sits: on the ground floor. The composer (launcher.preview, launcher.jobscript,
launcher.submitit) and the node agents (launcher.node.ray) import it; it imports nothing of
the kit's (docs/development/index.md#where-code-runs).

- :func:`expand_nodelist`: a Slurm hostlist (``jwb[0001-0003,0007],login1``) as node names.
- The rendezvous port rule: ``29500 + job id % 1000`` unless ``launch.rdzv_port`` fixes it.
  :func:`rdzv_port` is the rule in Python (the preview), :data:`RDZV_PORT_SH` the same rule
  as a bash arithmetic expansion (the batch scripts), both built from the two numbers below.
"""

from __future__ import annotations

import re
from typing import List

PORT_BASE = 29500  # below Linux's ephemeral ports (32768-60999): the node's own connections
PORT_SPAN = 1000  # never take one; jobs whose ids differ by a multiple of this share a port
RDZV_PORT_SH = f"$(({PORT_BASE} + SLURM_JOB_ID % {PORT_SPAN}))"


def rdzv_port(job_id: int) -> int:
    """The default rendezvous port of job ``job_id`` (what :data:`RDZV_PORT_SH` computes)."""
    return PORT_BASE + job_id % PORT_SPAN


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


__all__ = ["PORT_BASE", "PORT_SPAN", "RDZV_PORT_SH", "expand_nodelist", "rdzv_port"]
