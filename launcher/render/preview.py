"""``preview``: what each node of a hypothetical allocation would run, for any launch mode.

Where it sits: spec -> plan (launcher.plan, purpose ``preview``) -> **preview** text. Pure:
the plan's tokens are resolved in Python (launcher.shell.resolve), so preview and jobscript
cannot disagree.
"""

from __future__ import annotations

from typing import Optional

from launcher.features.site import preview_endpoint
from launcher.model import JobSpec
from launcher.modes.common import rdzv_timeouts
from launcher.plan import build_plan
from launcher.shell import resolve
from launcher.slurm import expand_nodelist, nodelist_size, rdzv_port


def render_preview(spec: JobSpec, nodelist: str, job_id: int = 12345, cwd: str = "$PWD",
                   system: Optional[str] = None) -> str:
    """What each node of a hypothetical allocation would run, with node rank and is_host.

    ``system``: the $SYSTEMNAME to show the inter-node name for, where the site's rule
    picks it per system (launcher.features.site); None, or one the rule does not list: every
    system's name is listed and the node lines show ${rdzv_host}."""
    job = build_plan(spec, "preview")
    plan, mode = job.launch, job.mode
    want = spec.job.nodes + spec.job.spare_nodes
    size = nodelist_size(nodelist)
    if size != want:
        spares = f" + job.spare_nodes {spec.job.spare_nodes}" if spec.job.spare_nodes else ""
        raise ValueError(f"names {size} node{'s' if size != 1 else ''}, the spec's job has "
                         f"{want} (job.nodes {spec.job.nodes}{spares}): name {want}, e.g. "
                         + (f"'jwb[0001-{want:04d}]'" if want > 1 else "'jwb0001'"))
    nodes = expand_nodelist(nodelist)
    port = spec.launch.rdzv_port or rdzv_port(job_id)
    host, endpoint = preview_endpoint(spec.site, nodes[0], port, job_id, system)
    values = {"nnodes": str(len(nodes)), "ntasks": str(len(nodes) * plan.tasks_per_node),
              "rdzv_port": str(port), "SLURM_JOB_ID": str(job_id),
              "PWD": cwd, "rdzv_conf_user": ""}
    if host is not None:  # else only the job can tell: the lines show ${rdzv_host}
        values["rdzv_host"], values["host_suffix"] = host, host[len(nodes[0]):]
    values["rdzv_join_timeout"], values["rdzv_read_timeout"] = \
        (str(t) for t in rdzv_timeouts(len(nodes)))
    lines = [f"# preview of {spec.source}: {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
             f"({nodelist}), job id {job_id}, "
             f"mode {spec.launch.mode}, {plan.tasks_per_node} task(s) per node",
             *endpoint]
    if not spec.launch.rdzv_port:
        lines.append(f"# (or the next port up that nothing on {nodes[0]} listens on yet, "
                     "checked when the job starts)")
    lines.append("# started by: " + " ".join(resolve(plan.starter, values)))
    setup = job.setup
    if setup:
        lines.append("# once per node first: " + " ".join(resolve(setup, values)))
    spare = spec.job.spare_nodes if len(nodes) > spec.job.spare_nodes else 0
    train = nodes[:len(nodes) - spare]
    values["ntrain"] = str(len(train))
    if spare:
        lines.append(f"# job.spare_nodes: {len(train)} train, {spare} wait as spares (one "
                     "takes the place of a training node whose heartbeat stops)")
    for node_rank, node in enumerate(train):
        is_host = "yes" if node_rank == 0 else "no"
        lines.append(f"node {node_rank} {node}: node_rank={node_rank} is_host={is_host}")
        lines += mode.preview_node(spec, plan, node_rank, len(train), values)
    for node in nodes[len(train):]:
        lines.append(f"spare {node}: waits; runs the per-node line above when it takes a "
                     "lost node's place")
    return "\n".join(lines) + "\n"


__all__ = ["render_preview"]
