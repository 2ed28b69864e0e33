"""Launch plans: geometry and the one launch command for each launch mode.

Where it sits: spec -> runtimes + **plans** -> jobscript text. A plan is data: which
job-global variables the script computes at batch scope, the per-node setup command, and
the launch argv (tokens, see launcher.shell). Per-task values (SLURM_PROCID, ...) are only
ever read inside the task, through a constant ``bash -c`` script whose arguments are the
real argv, never at batch scope.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Callable, Dict, List, Tuple

from launcher.ifname import SOCKET_IFNAME_PY
from launcher.runtimes import ContainerRuntime, runtime_for
from launcher.shell import Token, Var, resolve, word
from launcher.model import JobSpec, SpecError

NNODES = Var("nnodes")
NTASKS = Var("ntasks")
RDZV_HOST = Var("rdzv_host")
RDZV_PORT = Var("rdzv_port")
JOB_ID = Var("SLURM_JOB_ID")
TASK_ENV = Var("task_env")  # holds the task script at batch scope, expanded in each task
DEFAULT_PORT_BASE = 29500  # port = 29500 + job id % 1000 unless launch.rdzv_port is set

# Scripts that each started task runs (bash -c "$task_env" task ARGV...), so per-task
# values expand in the task; the real argv comes as arguments ("$@") and is never re-parsed.
# srun mode maps Slurm's per-task variables to what torch's env:// expects.
RANKS_FROM_SLURM = """\
export RANK="$SLURM_PROCID" LOCAL_RANK="$SLURM_LOCALID" WORLD_SIZE="$SLURM_NTASKS" \\
    NODE_RANK="$SLURM_NODEID"
"""
# Without torchrun_jsc nobody picks the socket interface, and gloo/NCCL/Open MPI would use
# the hostname's one, which on JSC-like networks the other nodes cannot reach: unless the
# user or the site profile set one, use the interface that routes to MASTER_ADDR, by the rule
# torchrun_jsc applies (launcher/torchrun_jsc/addresses.py): every address of both families,
# loopback skipped whenever there is another (Debian's 127.0.1.1 for the own hostname), IPv4
# first unless only IPv6 (TORCHRUN_JSC_ADDRESS_FAMILY=auto|ipv4|ipv6|any overrides). NCCL
# matches NCCL_SOCKET_IFNAME as a prefix (ib0 also matches ib01): "=NAME" is the exact form.
# No fallback: an unresolvable MASTER_ADDR ends the task.
SOCKET_IFNAME = """\
if [ -z "${GLOO_SOCKET_IFNAME:-}" ]; then
    hosts=$(getent ahosts "$MASTER_ADDR") || hosts=""
    v4="" v6="" any="" loop=""
    while read -r a _; do
        case "$a" in
            "") ;;
            127.*|::1|::ffff:127.*) loop=${loop:-$a} ;;
            *:*) v6=${v6:-$a} any=${any:-$a} ;;
            *) v4=${v4:-$a} any=${any:-$a} ;;
        esac
    done <<<"$hosts"
    family=${TORCHRUN_JSC_ADDRESS_FAMILY:-auto}
    case "${family,,}" in
        auto) addr=${v4:-$v6} ;;
        ipv4) addr=$v4 ;;
        ipv6) addr=$v6 ;;
        any) addr=$any ;;
        *) echo "TORCHRUN_JSC_ADDRESS_FAMILY: expected auto, ipv4, ipv6 or any, got $family" >&2
           exit 1 ;;
    esac
    [ -n "$any" ] || addr=$loop
    route=$(ip -o route get "$addr") || route=""
    case "$route" in
        "local "*) dev=$(ip -o addr show to "$addr") || dev=""; dev=${dev#*: } ;;
        *" dev "*) dev=${route#* dev } ;;
        *) dev="" ;;
    esac
    dev=${dev%%[[:space:]]*}
    if [ -z "$dev" ]; then echo "no interface reaches MASTER_ADDR=$MASTER_ADDR" >&2; exit 1; fi
    export GLOO_SOCKET_IFNAME="$dev"
fi
export NCCL_SOCKET_IFNAME="${NCCL_SOCKET_IFNAME:-=$GLOO_SOCKET_IFNAME}"
"""
# MPI ranks (Horovod): Open MPI's TCP transport and Horovod's gloo controller likewise.
MPI_IFNAME = """\
export OMPI_MCA_btl_tcp_if_include="${OMPI_MCA_btl_tcp_if_include:-$GLOO_SOCKET_IFNAME}" \\
    HOROVOD_GLOO_IFACE="${HOROVOD_GLOO_IFACE:-$GLOO_SOCKET_IFNAME}"
"""
EXEC_ARGV = 'exec "$@"\n'
SRUN_TASK_ENV = RANKS_FROM_SLURM + SOCKET_IFNAME + EXEC_ARGV
MPI_TASK_ENV = SOCKET_IFNAME + MPI_IFNAME + EXEC_ARGV
IFNAME_NAMES = ("MASTER_ADDR", "MASTER_PORT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
PER_TASK_NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK") + IFNAME_NAMES
MPI_TASK_NAMES = IFNAME_NAMES + ("OMPI_MCA_btl_tcp_if_include", "HOROVOD_GLOO_IFACE")


@dataclass(frozen=True)
class Plan:
    mode: str
    tasks_per_node: int
    rendezvous: bool  # needs rdzv_host/rdzv_port at batch scope
    master_env: bool  # exports MASTER_ADDR/MASTER_PORT for env:// (srun mode)
    ntasks: bool  # needs ntasks=nnodes*tasks_per_node at batch scope
    setup: Tuple[Token, ...]  # run once per node before the launch; () for none
    starter: Tuple[Token, ...]  # srun/mpirun and their flags
    task: Tuple[Token, ...]  # what each started task runs
    task_env: str  # script each task runs first ("" for none), see SRUN_TASK_ENV
    node_logs: bool

    @property
    def ranks_from_slurm(self) -> bool:
        return self.task_env.startswith(RANKS_FROM_SLURM)

    @property
    def srun_tasks_per_node(self) -> int:
        """Tasks srun starts per node: mpirun's srun starts one daemon per node."""
        return 1 if self.starter[:1] == ("mpirun",) else self.tasks_per_node

    @property
    def launch(self) -> Tuple[Token, ...]:
        return self.starter + self.task


def torchrun_argv(spec: JobSpec) -> List[Token]:
    """torchrun_jsc for one node; the program runs as written (--no-python)."""
    launch = spec.launch
    return [*launch.command, word("--nnodes=", NNODES),
            f"--nproc_per_node={launch.procs_per_node}", "--rdzv_backend=c10d",
            word("--rdzv_endpoint=", RDZV_HOST, ":", RDZV_PORT), word("--rdzv_id=", JOB_ID),
            f"--max_restarts={launch.max_restarts}", "--no-python", *spec.program]


def srun_argv(spec: JobSpec, runtime: ContainerRuntime, tasks_per_node: int,
              extra: Tuple[str, ...] = ()) -> List[Token]:
    """srun with the job's geometry; --kill-on-bad-exit so one dead task ends the step."""
    out: List[Token] = ["srun", "--kill-on-bad-exit=1", *extra, word("--nodes=", NNODES),
                        f"--ntasks-per-node={tasks_per_node}"]
    if spec.job.node_output is not None:
        out.append(f"--output={spec.job.node_output}")
    return out + runtime.srun_flags()


def setup_argv(spec: JobSpec, runtime: ContainerRuntime) -> Tuple[Token, ...]:
    inner = runtime.setup_argv()
    if not inner:
        return ()
    # --ntasks too: the job's SLURM_NTASKS (srun and horovod modes) would otherwise override
    # --ntasks-per-node=1 ("can't honor --ntasks-per-node") and start the set-up per task.
    return ("srun", "--kill-on-bad-exit=1", word("--nodes=", NNODES), word("--ntasks=", NNODES),
            "--ntasks-per-node=1", *inner)


def mpirun_argv(tasks_per_node: int, count: Var) -> List[Token]:
    # Inside a Slurm job Open MPI starts its daemons with srun, so ranks inherit this
    # script's environment; --bind-to none leaves CPU placement to Slurm.
    return ["mpirun", "-np", count, "--map-by", f"ppr:{tasks_per_node}:node",
            "--bind-to", "none", "--tag-output"]


def _plan_torchrun(spec: JobSpec, rt: ContainerRuntime) -> Plan:
    return Plan("torchrun", 1, True, False, False, setup_argv(spec, rt),
                tuple(srun_argv(spec, rt, 1)), tuple(rt.wrap(torchrun_argv(spec))),
                "", spec.job.node_output is not None)


def _scripted_task(spec: JobSpec, rt: ContainerRuntime, names: Tuple[str, ...]) -> List[Token]:
    """bash -c "$task_env" task ARGV: outside the container (it uses the host's ip and
    getent) unless pyxis, which puts the whole task, bash included, in the image."""
    if rt.config.kind == "pyxis":
        return ["bash", "-c", TASK_ENV, "task", *spec.program]
    return ["bash", "-c", TASK_ENV, "task", *rt.wrap(spec.program, names)]


def _task_env(rt: ContainerRuntime, script: str) -> str:
    """Under pyxis the task script runs in the image, which may lack `ip` and `getent`:
    the interface is found with the image's python3 instead (launcher/ifname.py)."""
    return script.replace(SOCKET_IFNAME, SOCKET_IFNAME_PY) if rt.config.kind == "pyxis" \
        else script


def _plan_srun(spec: JobSpec, rt: ContainerRuntime) -> Plan:
    per_node = spec.launch.procs_per_node
    return Plan("srun", per_node, True, True, False, setup_argv(spec, rt),
                tuple(srun_argv(spec, rt, per_node)),
                tuple(_scripted_task(spec, rt, PER_TASK_NAMES)), _task_env(rt, SRUN_TASK_ENV),
                spec.job.node_output is not None)


def _plan_horovod(spec: JobSpec, rt: ContainerRuntime) -> Plan:
    # MPI gives each rank its rank; the task script only picks the socket interfaces,
    # towards the first node (MASTER_ADDR).
    per_node = spec.launch.procs_per_node
    task = tuple(_scripted_task(spec, rt, MPI_TASK_NAMES))
    if spec.launch.mpi == "srun":
        mpi = (f"--mpi={spec.launch.mpi_plugin}",)
        return Plan("horovod", per_node, True, True, False, setup_argv(spec, rt),
                    tuple(srun_argv(spec, rt, per_node, mpi)), task,
                    _task_env(rt, MPI_TASK_ENV), spec.job.node_output is not None)
    _no_pyxis(spec, rt)
    return Plan("horovod", per_node, True, True, True, setup_argv(spec, rt),
                tuple(mpirun_argv(per_node, NTASKS)), task, MPI_TASK_ENV, False)


def _plan_mpirun_torchrun(spec: JobSpec, rt: ContainerRuntime) -> Plan:
    _no_pyxis(spec, rt)
    return Plan("mpirun_torchrun", 1, True, False, False, setup_argv(spec, rt),
                tuple(mpirun_argv(1, NNODES)), tuple(rt.wrap(torchrun_argv(spec))),
                "", False)


def _no_pyxis(spec: JobSpec, rt: ContainerRuntime) -> None:
    if rt.config.kind == "pyxis":
        raise SpecError(spec.source, "runtime.kind", "pyxis containers start only through "
                        "srun; use launch.mpi: srun or another runtime", "pyxis")


PLANS: Dict[str, Callable[[JobSpec, ContainerRuntime], Plan]] = {
    "torchrun": _plan_torchrun,
    "srun": _plan_srun,
    "horovod": _plan_horovod,
    "mpirun_torchrun": _plan_mpirun_torchrun,
}


def plan_launch(spec: JobSpec) -> Tuple[ContainerRuntime, Plan]:
    """The runtime object and launch plan for a validated spec."""
    runtime = runtime_for(spec)
    return runtime, PLANS[spec.launch.mode](spec, runtime)


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
    _, plan = plan_launch(spec)
    nodes = expand_nodelist(nodelist)
    port = spec.launch.rdzv_port or DEFAULT_PORT_BASE + job_id % 1000
    host = nodes[0] + spec.site.hostname_suffix
    values = {"nnodes": str(len(nodes)), "ntasks": str(len(nodes) * plan.tasks_per_node),
              "rdzv_host": host, "rdzv_port": str(port), "SLURM_JOB_ID": str(job_id),
              "PWD": cwd}
    lines = [f"# preview of {spec.source}: {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
             f"({nodelist}), job id {job_id}, "
             f"mode {plan.mode}, {plan.tasks_per_node} task(s) per node"]
    if plan.rendezvous:
        lines.append(f"# rendezvous endpoint {host}:{port} (first node + site suffix "
                     f"{spec.site.hostname_suffix!r}), rdzv_id {job_id}")
    lines.append("# started by: " + " ".join(resolve(plan.starter, values)))
    if plan.setup:
        lines.append("# once per node first: " + " ".join(resolve(plan.setup, values)))
    task = resolve(plan.task[4:] if plan.task_env else plan.task, values)
    per_node, world = plan.tasks_per_node, len(nodes) * plan.tasks_per_node
    for node_rank, node in enumerate(nodes):
        is_host = "-" if not plan.rendezvous else ("yes" if node_rank == 0 else "no")
        lines.append(f"node {node_rank} {node}: node_rank={node_rank} is_host={is_host}")
        for local in range(per_node):
            rank = node_rank * per_node + local
            env = f"RANK={rank} LOCAL_RANK={local} WORLD_SIZE={world} NODE_RANK={node_rank} " \
                if plan.ranks_from_slurm else ""
            label = "per node" if plan.mode in ("torchrun", "mpirun_torchrun") else f"rank {rank}"
            lines.append(f"  {label}: {env}{' '.join(shlex.quote(a) for a in task)}")
    return "\n".join(lines) + "\n"
