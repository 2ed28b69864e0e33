"""Mode ray: one Ray node agent per node (launcher/task/ray.py) via srun; the program is the
Ray driver, run once on the first node after every node joined.

The agent starts ``ray start --block`` on its node (the head on node 0 at the first node's
inter-node name, rdzv_host:rdzv_port as the GCS address; the others join it), each with its
own inter-node address, a node-local per-job temp dir, the allocation's CPUs and GPUs and no
dashboard, and stops Ray on its node when the job ends for any reason (success, failure,
scancel). The job's exit status is the driver's. Every runtime can run it: the agent is an
ordinary srun task, and the image (or venv) must hold ray and this package.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, List, Mapping, Optional

from launcher.model import JobSpec, Site
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import command_argv, program_argv, suffix_token
from launcher.modes.common import PER_NODE_KEYS, by_name, RDZV_HOST, RDZV_PORT, no_requeue, \
    srun_argv
from launcher.task.ray import DEFAULT_JOIN_TIMEOUT_S, MIN_OBJECT_STORE_BYTES
from launcher.runtimes import ContainerRuntime
from launcher.shell import Token, Values, literal_or_word, resolve, word
from launcher.yamlread import Key, Reader

# The kit's Ray agent (launcher/task/ray.py), run from the kit by the image's python3
# (modes.common.KIT_PROGRAMS: python3 "$kit/task/run.py" ray-node).
AGENT = ("jsc-ray-node",)


@dataclass(frozen=True)
class RayOptions:
    object_store_memory: Optional[int] = None  # Ray's --object-store-memory per node, bytes
    join_timeout: int = int(DEFAULT_JOIN_TIMEOUT_S)  # seconds the head waits for every node


class Ray(LaunchMode):
    name = "ray"
    keys = by_name(
        *PER_NODE_KEYS.values(),
        Key(('launch.object_store_memory',),
            "Ray's (30% of the node's memory)",
            "`--object-store-memory` per node in bytes (at least 78643200, Ray's minimum)",
            why="it is Ray's --object-store-memory per node ({modes})"),
        Key(('launch.join_timeout',),
            '120',
            'seconds the head waits for every node to join before the job fails naming the '
            'missing nodes',
            why='it is how long the Ray head waits for every node to join ({modes})'),
    )
    default_command = AGENT
    one_agent = True
    no_progress_hook = "Ray's workers are not ranks the kit's hook can watch"

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> RayOptions:
        memory = m.get("object_store_memory")
        return RayOptions(
            object_store_memory=None if memory is None else r.integer(
                "launch.object_store_memory", memory, MIN_OBJECT_STORE_BYTES, 1 << 50),
            join_timeout=r.integer("launch.join_timeout",
                                   m.get("join_timeout", RayOptions.join_timeout), 1, 86400))

    def check(self, spec: JobSpec) -> None:
        no_requeue(spec, "Ray (the node agents and Ray's daemons)")

    def agent_argv(self, spec: JobSpec) -> List[Token]:
        launch = spec.launch
        options: RayOptions = launch.options
        out: List[Token] = [*command_argv(spec), word("--head=", RDZV_HOST, ":", RDZV_PORT)]
        suffix = suffix_token(spec.site)  # a fixed suffix, or the one the job picked
        if suffix:
            out.append(literal_or_word("--suffix=", suffix))
        out += [f"--procs-per-node={launch.procs_per_node}",
                f"--join-timeout={options.join_timeout}"]
        if options.object_store_memory is not None:
            out.append(f"--object-store-memory={options.object_store_memory}")
        return out + ["--", *program_argv(spec)]

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(rt.wrap(self.agent_argv(spec))))
        return Plan(tasks_per_node=1, step=step)

    def comment(self, spec: JobSpec) -> str:
        n = spec.launch.procs_per_node
        agent = "the kit's, python3 $kit/task/run.py ray-node" \
            if spec.launch.command == AGENT else " ".join(spec.launch.command)
        return (f"one Ray node agent per node ({agent}), head on the "
                f"first node;\n# the program is the Ray driver ({n} slot{'s' if n != 1 else ''} "
                "per node), run once there after every node joined;\n# Ray stops on every "
                "node when the job ends")

    def preview_node(self, spec: JobSpec, plan: Plan, node_rank: int, nnodes: int,
                     values: Values) -> List[str]:
        text = " ".join(shlex.quote(a) for a in resolve(plan.task, values))
        role = "Ray head, then the driver once all nodes joined" if node_rank == 0 \
            else "Ray worker, joins the head"
        return [f"  per node ({role}): {text}"]
