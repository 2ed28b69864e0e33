"""``preview``: what each node of a hypothetical allocation would run, for any launch mode.

Where it sits: spec -> modes (plan) -> **preview** text. Pure: the plan's tokens are
resolved in Python (launcher.shell.resolve), so preview and jobscript cannot disagree.
"""

from __future__ import annotations

import re
from typing import List

from launcher.model import JobSpec
from launcher.modes import mode_for, plan_launch
from launcher.modes.common import DEFAULT_PORT_BASE, rdzv_timeouts
from launcher.shell import resolve


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


def render_preview(spec: JobSpec, nodelist: str, job_id: int = 12345, cwd: str = "$PWD") -> str:
    """What each node of a hypothetical allocation would run, with node rank and is_host."""
    runtime, plan = plan_launch(spec)
    mode = mode_for(spec.launch.mode)
    nodes = expand_nodelist(nodelist)
    port = spec.launch.rdzv_port or DEFAULT_PORT_BASE + job_id % 1000
    host = nodes[0] + spec.site.hostname_suffix
    values = {"nnodes": str(len(nodes)), "ntasks": str(len(nodes) * plan.tasks_per_node),
              "rdzv_host": host, "rdzv_port": str(port), "SLURM_JOB_ID": str(job_id),
              "PWD": cwd, "rdzv_conf_user": ""}
    values["rdzv_join_timeout"], values["rdzv_read_timeout"] = \
        (str(t) for t in rdzv_timeouts(len(nodes)))
    lines = [f"# preview of {spec.source}: {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
             f"({nodelist}), job id {job_id}, "
             f"mode {spec.launch.mode}, {plan.tasks_per_node} task(s) per node",
             f"# rendezvous endpoint {host}:{port} (first node + site suffix "
             f"{spec.site.hostname_suffix!r}), rdzv_id {job_id}"]
    lines.append("# started by: " + " ".join(resolve(plan.starter, values)))
    setup = runtime.setup_step()
    if setup:
        lines.append("# once per node first: " + " ".join(resolve(setup, values)))
    for node_rank, node in enumerate(nodes):
        is_host = "yes" if node_rank == 0 else "no"
        lines.append(f"node {node_rank} {node}: node_rank={node_rank} is_host={is_host}")
        lines += mode.preview_node(spec, plan, node_rank, len(nodes), values)
    return "\n".join(lines) + "\n"


__all__ = ["expand_nodelist", "render_preview"]
