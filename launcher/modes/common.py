"""What several launch modes share: batch-scope variables, task scripts, srun/mpirun argv.

Where it sits: spec -> **modes** (each mode module builds on these) -> the job plan -> text.
Per-task values (SLURM_PROCID, ...) are only ever read inside the task, through the kit's task
script (``bash "$kit/node/task.sh" KIND ARGV...``) whose arguments are the real argv, never
at batch scope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence, Tuple, Union

from launcher import kit
from launcher.model import FastInterface, JobSpec, Site, SpecError, SuffixRule
from launcher.runtimes import RUNTIMES
from launcher.runtimes.base import CPUS_PER_NODE, NNODES, ContainerRuntime, gpus_requested
from launcher.shell import Raw, Statement, Token, Var, expansion, expansion_parts, word
from launcher.yamlread import Key, Reader

NTASKS = Var("ntasks")
SUFFIX = Var("host_suffix")  # batch scope: the suffix the site's rule picked (features.site)
RDZV_HOST = Var("rdzv_host")
RDZV_PORT = Var("rdzv_port")
JOB_ID = Var("SLURM_JOB_ID")
# Set by launcher.features.placement at batch scope; every srun the kit writes asks for its
# CPUs on its command line with one of them (Slurm >= 23.11 reads no SRUN_CPUS_PER_TASK):
# CPUS_PER_NODE (launcher.runtimes.base) for one task per node, and
CPUS_PER_TASK = Var("cpus_per_task")  # the launch's srun: the node's CPUs per task it starts
# The task scripts (launcher/node/task.sh KIND): each started task runs
# ``bash "$kit/node/task.sh" KIND ARGV...``, so per-task values expand in the task; the real
# argv comes as arguments and is never re-parsed. KIND srun: ranks from Slurm's per-task
# variables (what torch's env:// expects) and the socket interface; mpi: the socket interface
# for Open MPI and Horovod too; ifname: the socket interface only (the per-node launcher sets
# the ranks). The socket interface: by the one rule of launcher/node/net (the code
# torchrun_jsc runs), where the task script runs: the host's python3, or the image's under
# pyxis.
TASK_KINDS = ("srun", "mpi", "ifname")


IFNAME_NAMES = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
PER_TASK_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK") + IFNAME_NAMES
MPI_TASK_NAMES = IFNAME_NAMES + ("OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE")


def suffix_token(site: Site) -> Token:
    """What follows the node name in an inter-node name (deepspeed's hostfile, Ray's
    --suffix): the fixed suffix, $host_suffix (set at batch scope by the site's rule,
    launcher.features.site), or none (FastInterface: the nodes keep their names)."""
    rule = site.hostname_suffix
    if isinstance(rule, FastInterface):
        return ""
    return SUFFIX if isinstance(rule, SuffixRule) else rule


def by_name(*keys: Key) -> Mapping[str, Key]:
    """A mode's ``keys`` (LaunchMode.keys): its launch keys by name."""
    return {name: key for key in keys for name in key.names}


def program_argv(spec: JobSpec) -> List[Token]:
    """The program's argv: $NAME, ${NAME} and a leading ~ expand in the batch script (the
    job's environment), every other character reaches the program unchanged."""
    return [expansion(arg) for arg in spec.program]


# launch.command's first words that name the kit's own per-node programs: run from the kit
# (python3 "$kit/task/run.py" COMMAND, launcher/task/run.py) with the task's python3, so any
# image with python3 and torch runs them, whatever it contains of the kit.
KIT_PROGRAMS = {"torchrun_jsc": "torchrun_jsc", "jsc-ray-node": "ray-node"}


def command_argv(spec: JobSpec) -> List[Token]:
    """launch.command as argv, expanded like the program's; a kit program from the kit."""
    command = spec.launch.command
    rest = [expansion(arg) for arg in command[1:]]
    if command and command[0] in KIT_PROGRAMS:
        return [*kit.task_python(KIT_PROGRAMS[command[0]]), *rest]
    return [expansion(arg) for arg in command[:1]] + rest


# Rendezvous timeouts that grow with the node count (docs/guide/hangs.md). torch's c10d
# defaults, join_timeout 600 s (every agent in) and read_timeout 60 s (each request to the
# first node's store, the first connect included), are made for a few nodes: at scale the
# agents start minutes apart (containers, imports from a shared file system) and the agents
# that start first give up on a store that is not up yet (meta-pytorch/torchx#1071).
JOIN_TIMEOUT_S = (600, 1)  # base + per node, seconds
READ_TIMEOUT_S = (120, 2)  # base + one second per this many nodes
RDZV_JOIN_TIMEOUT = Var("rdzv_join_timeout")
RDZV_READ_TIMEOUT = Var("rdzv_read_timeout")
RDZV_CONF_USER = Var("rdzv_conf_user")  # ",PET_RDZV_CONF" when set, else ""
_RDZV_CONF_FLAGS = ("--rdzv_conf", "--rdzv-conf")


def rdzv_timeouts(nnodes: int) -> Tuple[int, int]:
    """(join_timeout, read_timeout) in seconds for ``nnodes`` nodes, as the script computes."""
    return (JOIN_TIMEOUT_S[0] + JOIN_TIMEOUT_S[1] * nnodes,
            READ_TIMEOUT_S[0] + nnodes // READ_TIMEOUT_S[1])


def user_rdzv_conf(command: Sequence[str]) -> Optional[str]:
    """The value of the last --rdzv_conf/--rdzv-conf in launch.command (torchrun keeps the
    last), or None when it has none."""
    found = None
    for i, arg in enumerate(command):
        flag, eq, value = arg.partition("=")
        if flag in _RDZV_CONF_FLAGS:
            if eq:
                found = value
            elif i + 1 < len(command):
                found = command[i + 1]
    return found


def rdzv_timeout_lines(spec: JobSpec) -> List[Statement]:
    """Batch scope: the timeouts for this allocation's node count, and PET_RDZV_CONF (torch's
    variable for --rdzv_conf, which the kit's flag would otherwise replace) kept."""
    join_base, join_per_node = JOIN_TIMEOUT_S
    read_base, nodes_per_s = READ_TIMEOUT_S
    out: List[Statement] = [
        Raw("# Rendezvous timeouts grow with the node count (docs/guide/hangs.md); yours "
            "(--rdzv_conf, PET_RDZV_CONF) win."),
        Raw(f"rdzv_join_timeout=$(({join_base} + {join_per_node} * nnodes))"),
        Raw(f"rdzv_read_timeout=$(({read_base} + nnodes / {nodes_per_s}))")]
    if user_rdzv_conf(spec.launch.command) is None:
        out.append(Raw('rdzv_conf_user="${PET_RDZV_CONF:+,${PET_RDZV_CONF}}"'))
    return out


def rdzv_conf_arg(spec: JobSpec) -> Token:
    """--rdzv_conf with the kit's timeouts first and the user's entries after (torch reads the
    entries in order and the last value of a key wins)."""
    parts: List[Union[str, Var]] = ["--rdzv_conf=join_timeout=", RDZV_JOIN_TIMEOUT,
                                    ",read_timeout=", RDZV_READ_TIMEOUT]
    user = user_rdzv_conf(spec.launch.command)
    if user is None:
        parts.append(RDZV_CONF_USER)
    elif user.strip():
        parts += [",", *expansion_parts(user)]
    return word(*parts)


@dataclass(frozen=True)
class TorchrunOptions:
    """The options of the modes that start torchrun_jsc per node (torchrun, mpirun_torchrun)."""

    max_restarts: int = 0  # torchrun's --max_restarts
    numa_binding: Optional[str] = None  # torchrun's --numa-binding (torch >= 2.9); None: off


# torchrun's --numa-binding modes (torch.numa.binding.AffinityMode, torch 2.9 to 2.13): each
# worker bound to CPUs near the GPU of its local rank; torch runs it through numactl.
NUMA_BINDINGS = ("node", "socket", "exclusive", "core-complex")


def torchrun_options(r: Reader, m: Mapping[str, Any]) -> TorchrunOptions:
    numa = m.get("numa_binding")
    return TorchrunOptions(
        max_restarts=r.integer("launch.max_restarts", m.get("max_restarts", 0), 0, 1000),
        numa_binding=None if numa is None else r.choice("launch.numa_binding", numa,
                                                        NUMA_BINDINGS))


def torchrun_argv(spec: JobSpec) -> List[Token]:
    """torchrun_jsc for one node; the program runs as written (--no_python: torch 1.9-1.12's
    torchrun knows only that spelling, later ones both)."""
    launch = spec.launch
    options: TorchrunOptions = launch.options
    return [*command_argv(spec), word("--nnodes=", NNODES),
            f"--nproc_per_node={launch.procs_per_node}", "--rdzv_backend=c10d",
            word("--rdzv_endpoint=", RDZV_HOST, ":", RDZV_PORT), word("--rdzv_id=", JOB_ID),
            rdzv_conf_arg(spec), f"--max_restarts={options.max_restarts}",
            *([f"--numa-binding={options.numa_binding}"] if options.numa_binding else []),
            "--no_python", *program_argv(spec)]


# Tasks of one node fill a socket before the next (Slurm's default within a node is cyclic:
# task 1 would go to the second socket while cuda:1 usually sits on the first).
SOCKET_BY_SOCKET = "--distribution=block:block"
_DISTRIBUTION_KEYS = ("distribution", "m")


def gpu_layout(spec: JobSpec, tasks_per_node: int) -> List[str]:
    """SOCKET_BY_SOCKET for a step of several tasks per node of a GPU job, unless the spec
    chose a distribution in job.sbatch (srun reads SLURM_DISTRIBUTION from the batch step).
    Identical GPUs are numbered in PCI bus order, which follows the sockets, so local rank i
    then runs on the socket of GPU i (cuda:LOCAL_RANK); under psslurm, whose tasks get their
    closest GPU, either layout is right. The device rule (torchrun_jsc_kit.select_device) says so in the job's
    log where it does not hold."""
    if tasks_per_node < 2 or not gpus_requested(spec):
        return []
    if any(key in _DISTRIBUTION_KEYS for key, _ in spec.job.sbatch):
        return []
    return [SOCKET_BY_SOCKET]


def srun_argv(spec: JobSpec, runtime: ContainerRuntime, tasks_per_node: int,
              extra: Tuple[str, ...] = ()) -> List[Token]:
    """srun with the job's geometry; --kill-on-bad-exit so one dead task ends the step."""
    out: List[Token] = ["srun", "--kill-on-bad-exit=1", *extra, word("--nodes=", NNODES),
                        f"--ntasks-per-node={tasks_per_node}",
                        word("--cpus-per-task=", CPUS_PER_TASK),
                        *gpu_layout(spec, tasks_per_node)]
    if spec.job.node_output is not None:
        out.append(f"--output={spec.job.node_output}")
    return out + runtime.srun_flags()


def mpirun_argv(tasks_per_node: int, count: Var) -> List[Token]:
    # Inside a Slurm job Open MPI starts its daemons with srun, so ranks inherit this
    # script's environment; --bind-to none leaves CPU placement to Slurm. That srun is Open
    # MPI's, not the kit's: it asks for no CPU count but sets SLURM_CPU_BIND=none (plm/slurm),
    # so its daemons, and the ranks under them, may use every CPU of the job on their node.
    return ["mpirun", "-np", count, "--map-by", f"ppr:{tasks_per_node}:node",
            "--bind-to", "none", "--tag-output"]


def scripted_task(spec: JobSpec, rt: ContainerRuntime, names: Tuple[str, ...], kind: str,
                  argv: Optional[Sequence[Token]] = None) -> List[Token]:
    """bash "$kit/node/task.sh" KIND ARGV (ARGV: the program unless given): outside the
    container (the host's python3 picks the interface) unless the runtime puts the whole task,
    bash included, in the image (task_script_inside), where the image's python3 does. Either
    way what runs inside goes through ``rt.wrap`` (the stack hook's prelude)."""
    assert kind in TASK_KINDS, kind
    argv = program_argv(spec) if argv is None else argv
    if rt.task_script_inside:
        return rt.wrap([*kit.task_script(kind), *argv], names)
    return [*kit.task_script(kind), *rt.wrap(argv, names)]


def check_mpirun(spec: JobSpec, instead: str) -> None:
    """Refuse a runtime that mpirun cannot start tasks in (the runtime says why, the mode
    what to use ``instead``: a key it takes, never one it refuses)."""
    problem = RUNTIMES[spec.runtime.kind].mpirun_problem
    if problem:
        raise SpecError(spec.source, "runtime.kind", f"{problem}; use {instead} or another "
                        "runtime", spec.runtime.kind)

COMMAND = Key(('launch.command',),
    '`torchrun_jsc` (`[accelerate, launch]`, `deepspeed`, `jsc-ray-node`)',
    'the per-node launcher (ray: the node agent), one word (`torchrun` for comparisons) or a list of words (argv, '
    'e.g. `[torchrun, --log-dir=logs]`); a string with spaces is refused (it would run as one '
    'quoted word)',
    why='it is the per-node launcher of {modes}; put the program in program')
PER_NODE_KEYS = by_name(COMMAND)
TORCHRUN_KEYS = by_name(
    COMMAND,
    Key(('launch.max_restarts',),
        '0',
        'torchrun `--max_restarts`',
        why="it is torchrun's --max_restarts ({modes})"),
    Key(('launch.numa_binding',),
        'unset (off)',
        "torchrun's `--numa-binding`, one of `node`, `socket`, "
        '`exclusive`, `core-complex`: each worker bound to the CPUs near the GPU of its local rank'
        ' ([GPU-NUMA binding](../guide/launch-modes.md#gpu-numa-binding)); needs torch >= 2.9 and '
        '`numactl` in the image, else torchrun_jsc stops in one line',
        why="it is torchrun's --numa-binding ({modes})"),
)


def processes(n: int) -> str:
    return f"{n} process{'es' if n != 1 else ''}"


def node_argv(rt: ContainerRuntime, spec: JobSpec, script: str,
              head: Sequence[Token], launcher: Sequence[Token]) -> List[Token]:
    """One task per node: the task script (socket interface), then, in the container,
    ``bash "$kit/SCRIPT" HEAD... N LAUNCHER... PROGRAM...``: SCRIPT (a file of the kit,
    launcher/task/*-node.sh) gets the launcher's word count N so that it can insert per-node
    options (expanded on the node, e.g. --machine_rank "$SLURM_NODEID") between the launcher
    and the program, which thus reaches the program unchanged."""
    inner: List[Token] = ["bash", kit.file(script), *head, str(len(launcher)), *launcher,
                          *program_argv(spec)]
    return scripted_task(spec, rt, IFNAME_NAMES, "ifname", inner)


def no_requeue(spec: JobSpec, launcher: str) -> None:
    """job.requeue signals every process of the step (scancel --signal): a launcher that does
    not catch the signal dies of it, and with it the node's workers."""
    if spec.job.requeue is not None:
        raise SpecError(spec.source, "job.requeue", f"mode {spec.launch.mode}: {launcher} "
                        "does not survive the checkpoint signal that job.requeue sends to "
                        "every process; use mode torchrun or srun for requeued jobs")
