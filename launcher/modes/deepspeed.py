"""Mode deepspeed: one ``deepspeed --no_ssh --node_rank N`` per node via srun.

What the composer fixes compared with the usual recipe (docs/guide/launch-modes.md):
- never ssh or pdsh: the launcher runs on every node by srun with --no_ssh and this node's
  --node_rank (SLURM_NODEID, expanded on the node, not at batch scope);
- a per-job hostfile (every node of the allocation by its inter-node name, slots =
  procs_per_node), written on each node to a node-local temporary file in the container and
  removed at the end, never ~/hostfile or /job/hostfile;
- --master_addr is the first node's inter-node name (without it deepspeed runs
  `ssh FIRST_HOST hostname -I`), --master_port the job's port;
- GLOO/NCCL_SOCKET_IFNAME: the interface that routes to the first node, like torchrun_jsc;
- --no_local_rank unless launch.local_rank_arg: true: the program gets its argv unchanged
  (LOCAL_RANK is in its environment either way); programs written for deepspeed that parse
  --local_rank set local_rank_arg: true.
The program runs as written (--no_python): [python3, train.py, ...].
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, List, Mapping

from launcher.model import JobSpec, Site
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import command_argv, suffix_token
from launcher.modes.common import PER_NODE_KEYS, by_name, RDZV_HOST, RDZV_PORT, \
    no_requeue, node_argv, processes, srun_argv
from launcher.runtimes import ContainerRuntime
from launcher.shell import Assign, Raw, Values, Var, resolve, word
from launcher.yamlread import Key, Reader

HOSTS = Var("ds_hosts")
SCRIPT = "task/deepspeed-node.sh"  # in the container (or bare) on each node: launcher/task/
# The hostfile's text, one line per node of the allocation: "NAME slots=N".
HOSTS_LINES = """\
ds_hosts=""
while read -r host; do
    ds_hosts+="${host}${ds_suffix} slots=${ds_slots}"$'\\n'
done <<<"$hostnames"
"""


@dataclass(frozen=True)
class DeepspeedOptions:
    local_rank_arg: bool = False  # let deepspeed append --local_rank=N to the program's argv


class Deepspeed(LaunchMode):
    name = "deepspeed"
    keys = by_name(
        *PER_NODE_KEYS.values(),
        Key(('launch.local_rank_arg',),
            'false',
            "let deepspeed append `--local_rank=N` to the program's arguments (for "
            'programs that parse it; `LOCAL_RANK` is in the environment either way)',
            why="it makes deepspeed append --local_rank=N to the program's arguments ({modes})"),
    )
    default_command = ("deepspeed",)
    one_agent = True

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> DeepspeedOptions:
        return DeepspeedOptions(local_rank_arg=r.boolean("launch.local_rank_arg",
                                                         m.get("local_rank_arg", False)))

    def check(self, spec: JobSpec) -> None:
        no_requeue(spec, "the deepspeed launcher")

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        launch = spec.launch
        options: DeepspeedOptions = launch.options
        launcher = [*command_argv(spec), "--no_ssh", word("--master_addr=", RDZV_HOST),
                    word("--master_port=", RDZV_PORT), "--no_python"]
        if not options.local_rank_arg:
            launcher.append("--no_local_rank")
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(node_argv(rt, spec, SCRIPT, [HOSTS], launcher)))
        batch = (Raw("# The per-job hostfile's text (each node writes it to a temporary file)."),
                 Assign("ds_suffix", suffix_token(spec.site)),
                 Assign("ds_slots", str(launch.procs_per_node)),
                 Raw(HOSTS_LINES.rstrip("\n")))
        return Plan(tasks_per_node=1, step=step, master_env=True,
                    task_kind="ifname",
                    batch=batch)

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return (f"one {' '.join(launch.command)} --no_ssh per node, "
                f"{processes(launch.procs_per_node)} each, --node_rank from the node")

    def preview_node(self, spec: JobSpec, plan: Plan, node_rank: int, nnodes: int,
                     values: Values) -> List[str]:
        argv = resolve(plan.task, dict(values, ds_hosts="<per-job hostfile>"))
        argv = argv[next(i for i, a in enumerate(argv) if a.endswith(SCRIPT)) + 1:]
        n, rest = int(argv[1]), argv[2:]
        shown = rest[:n] + ["--hostfile", "<per-job hostfile>", "--node_rank",
                            str(node_rank)] + rest[n:]
        return [f"  per node: {' '.join(shlex.quote(a) for a in shown)}"]
