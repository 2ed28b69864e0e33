"""Mode accelerate: one ``accelerate launch`` per node via srun, procs_per_node workers each.

What the composer fixes compared with the usual recipe (docs/guide/launch-modes.md):
- --num_processes is the TOTAL (nodes x procs_per_node), --num_machines the node count;
- --machine_rank is this node's SLURM_NODEID, expanded on the node (in the task), never at
  batch scope (where it would be 0 on every node: deadlock);
- --main_process_ip is the first node's inter-node name (first node + site suffix), with
  accelerate's default static rendezvous: workers get MASTER_ADDR from it, no hostname check;
- the user's config ($HF_HOME/accelerate/default_config.yaml, under $HOME, which Apptainer
  mounts) is never read: each node passes --config_file with a per-job file (a node-local
  temporary file written in the container, removed at the end) or launch.config_file;
- --multi_gpu, and on CPU (job.gpus_per_node 0) ACCELERATE_USE_CPU=1, so that accelerate
  starts distributed processes and Accelerator picks the CPU;
- GLOO/NCCL_SOCKET_IFNAME: the interface that routes to the first node, like torchrun_jsc.
The program runs as written (--no_python): [python3, train.py, ...].
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, List, Mapping

from launcher.model import JobSpec, Site, SpecError
from launcher.modes.base import LaunchMode, Plan, Step
from launcher.modes.common import command_argv
from launcher.modes.common import NNODES, PER_NODE_KEYS, by_name, RDZV_HOST, \
    RDZV_PORT, no_requeue, node_argv, processes, srun_argv
from launcher.runtimes import ContainerRuntime
from launcher.shell import Raw, Values, Var, resolve, word
from launcher.yamlread import Key, Reader

NPROCS = Var("nprocs")
SCRIPT = "task/accelerate-node.sh"  # in the container (or bare) on each node: launcher/task/


@dataclass(frozen=True)
class AccelerateOptions:
    config_file: str = ""  # accelerate's --config_file; "": a per-job file on each node


class Accelerate(LaunchMode):
    name = "accelerate"
    keys = by_name(
        *PER_NODE_KEYS.values(),
        Key(('launch.config_file',),
            'generated per job',
            'your accelerate config file (`--config_file`, path as the node sees it) '
            'instead of the generated minimal one; `$HF_HOME/accelerate/default_config.yaml` '
            'is never read',
            why="it is accelerate's --config_file (mode accelerate)"),
    )
    default_command = ("accelerate", "launch")
    one_agent = True

    def options(self, r: Reader, m: Mapping[str, Any], site: Site) -> AccelerateOptions:
        if "config_file" not in m:
            return AccelerateOptions()
        return AccelerateOptions(config_file=r.string("launch.config_file", m["config_file"],
                                                      newline=False))

    def check(self, spec: JobSpec) -> None:
        no_requeue(spec, "accelerate launch")
        launch = spec.launch
        if spec.job.nodes * launch.procs_per_node < 2:
            raise SpecError(spec.source, "launch.procs_per_node", "mode accelerate starts at "
                            "least 2 processes in all (accelerate's --multi_gpu); for one "
                            "process use mode torchrun or srun", launch.procs_per_node)

    def plan(self, spec: JobSpec, rt: ContainerRuntime) -> Plan:
        launch = spec.launch
        options: AccelerateOptions = launch.options
        launcher = [*command_argv(spec), "--multi_gpu", word("--num_machines=", NNODES),
                    word("--num_processes=", NPROCS), word("--main_process_ip=", RDZV_HOST),
                    word("--main_process_port=", RDZV_PORT), "--rdzv_backend=static",
                    "--no_python"]
        head = [options.config_file, "1" if spec.job.gpus_per_node == 0 else "0"]
        step = Step(self.comment(spec), tuple(srun_argv(spec, rt, 1)),
                    tuple(node_argv(rt, spec, SCRIPT, head, launcher)))
        return Plan(tasks_per_node=1, step=step, master_env=True,
                    task_kind="ifname",
                    batch=(Raw(f"nprocs=$((nnodes * {launch.procs_per_node}))  "
                               "# accelerate's --num_processes is the total"),))

    def comment(self, spec: JobSpec) -> str:
        launch = spec.launch
        return (f"one {' '.join(launch.command)} per node, "
                f"{processes(launch.procs_per_node)} each, --machine_rank from the node")

    def preview_node(self, spec: JobSpec, plan: Plan, node_rank: int, nnodes: int,
                     values: Values) -> List[str]:
        vals = dict(values, nprocs=str(nnodes * spec.launch.procs_per_node))
        argv = resolve(plan.task, vals)
        argv = argv[next(i for i, a in enumerate(argv) if a.endswith(SCRIPT)) + 1:]
        config, _, n = argv[0], argv[1], int(argv[2])
        rest = argv[3:]
        config = config or "<per-job file>"
        shown = rest[:n] + ["--config_file", config, "--machine_rank", str(node_rank)] + rest[n:]
        return [f"  per node: {' '.join(shlex.quote(a) for a in shown)}"]
