"""Ray on Slurm: the agent that runs once per node (``python3 "$kit/task/run.py" ray-node``,
launcher/task/run.py, with the image's python3 and ray).

Where it sits: spec -> plan of the ``ray`` mode -> jobscript -> srun starts this module as
one task per node (inside the container when there is one) -> ``ray start --block`` on the
node, and on node 0 the driver (the spec's ``program``) once every node has joined.

Why an agent and not the usual recipe (``ray start --head`` in the background, workers by
srun, ``sleep``, the driver in the batch step) or ``ray symmetric-run``: on a JSC-like
network the head must advertise the address of the inter-node name (``jwb0001i``), not the
hostname's (the recipe's ``hostname --ip-address`` gives 127.0.1.1 on Debian-style hosts
and the workers never join, while the driver runs on one node and exits 0); the driver must
wait until every node joined and say which did not; and the whole cluster must stop on
success, failure and cancel. symmetric-run (Ray >= 2.49) starts the workers without
``--node-ip-address`` (it refuses the option), polls every 5 s for 30 s without naming the
missing nodes, exits 0 when the head fails to start, handles SIGINT only, and stops only its
own node: the workers linger until their raylets time out on the lost GCS (60 s).

Per node (child processes: launcher/task/procs.py): ``ray start --block`` (its processes stay our descendants, so Slurm can always
signal them) with ``--node-ip-address`` = this node's inter-node address, ``--node-name`` =
the Slurm node name, a node-local per-job ``--temp-dir`` (Unix socket paths must stay under
107 bytes), CPUs and GPUs from the allocation, no dashboard. Node 0 starts the head, waits
for every node, runs the driver with RAY_ADDRESS set, then stops its node; the others watch
the head's port and stop their node as soon as it closes. The agent's exit status is the
driver's on node 0; a node whose Ray dies while the head is up exits 1 (srun's
--kill-on-bad-exit then ends the job). The socket interface for gloo/NCCL (GLOO_SOCKET_IFNAME,
NCCL_SOCKET_IFNAME) and MASTER_ADDR reach every Ray worker through the raylet's environment.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from launcher.node.net.probe import socket_env
from launcher.task.procs import PROG, Stop, raise_stop, start, stop
from launcher.task.torchrun_jsc.addresses import LaunchError, address_family, candidates
from launcher.task.torchrun_jsc.decide import Endpoint
from launcher.task.torchrun_jsc import netinfo
from launcher.slurm import expand_nodelist

DEFAULT_JOIN_TIMEOUT_S = 120.0
MIN_OBJECT_STORE_BYTES = 75 * 1024 * 1024  # Ray refuses less (OBJECT_STORE_MINIMUM_MEMORY_BYTES)
PROCS_ENV = "LAUNCH_PROCS_PER_NODE"  # launch.procs_per_node, for the driver
POLL_S = 0.5


@dataclass(frozen=True)
class Options:
    head: Endpoint  # the first node's inter-node name and the GCS port
    suffix: str  # site.hostname_suffix: node name + suffix = inter-node name
    join_timeout: float
    object_store_memory: Optional[int]
    temp_dir: Optional[str]  # default /tmp/ray-JOBID
    ray: str  # the ray executable
    program: Tuple[str, ...]
    procs_per_node: Optional[int] = None


@dataclass(frozen=True)
class Node:
    """This node, from the task's Slurm variables (per task, so read here, not in bash)."""

    name: str  # Slurm's node name (SLURMD_NODENAME)
    rank: int  # SLURM_NODEID
    job_id: str
    expected: Tuple[str, ...]  # every node of the step
    address: str = ""  # inter-node address, filled by the probe
    ifname: str = ""
    cpus: int = 1
    gpus: int = 0
    extra: Dict[str, str] = field(default_factory=dict)


def parse_args(argv: Sequence[str]) -> Options:
    p = argparse.ArgumentParser(prog="python3 $kit/task/run.py ray-node", description=(
        "Start Ray on this node of a Slurm step (head on node 0, workers elsewhere) and run "
        "PROGRAM once on node 0 after every node joined."))
    p.add_argument("--head", required=True, metavar="HOST:PORT",
                   help="the first node's inter-node name and the GCS port")
    p.add_argument("--suffix", default="", help="node name + SUFFIX = inter-node name")
    p.add_argument("--join-timeout", type=float, default=DEFAULT_JOIN_TIMEOUT_S,
                   metavar="SECONDS")
    p.add_argument("--object-store-memory", type=int, default=None, metavar="BYTES")
    p.add_argument("--temp-dir", default=None, help="node-local, default /tmp/ray-JOBID")
    p.add_argument("--ray", default="ray", help="the ray command (default: ray on PATH)")
    p.add_argument("--procs-per-node", type=int, default=None, metavar="N",
                   help=f"process slots per node, exported to the driver as {PROCS_ENV}")
    p.add_argument("program", nargs=argparse.REMAINDER)
    ns = p.parse_args(list(argv))
    program = ns.program[1:] if ns.program[:1] == ["--"] else ns.program
    host, sep, port = ns.head.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise LaunchError(f"--head: expected HOST:PORT, got {ns.head!r}")
    if ns.object_store_memory is not None and ns.object_store_memory < MIN_OBJECT_STORE_BYTES:
        raise LaunchError(f"--object-store-memory: Ray needs at least {MIN_OBJECT_STORE_BYTES} "
                          f"bytes, got {ns.object_store_memory}")
    if not ns.join_timeout > 0:
        raise LaunchError(f"--join-timeout: expected seconds > 0, got {ns.join_timeout!r}")
    if not program:
        raise LaunchError("no program to run on the head node (expected: -- PROGRAM ...)")
    return Options(Endpoint(host.strip("[]"), int(port)), ns.suffix, ns.join_timeout,
                   ns.object_store_memory, ns.temp_dir, ns.ray, tuple(program),
                   ns.procs_per_node)


def node_from_env(env: Mapping[str, str]) -> Node:
    """This task's node: name, index and the step's node list, from Slurm's variables."""
    missing = [n for n in ("SLURMD_NODENAME", "SLURM_NODEID", "SLURM_JOB_ID") if n not in env]
    if missing:
        raise LaunchError(f"not inside a Slurm task: {', '.join(missing)} unset "
                          "(run one task per node with srun)")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", "")
    return Node(env["SLURMD_NODENAME"], int(env["SLURM_NODEID"]), env["SLURM_JOB_ID"],
                tuple(expand_nodelist(nodelist)) if nodelist else (env["SLURMD_NODENAME"],))


def allocation(env: Mapping[str, str]) -> Tuple[int, int]:
    """CPUs this task may use (its affinity: what Slurm bound it to) and GPUs it was given."""
    cpus = len(os.sched_getaffinity(0))
    gpus_text = env.get("SLURM_GPUS_ON_NODE", "")
    if gpus_text.isdigit():
        return cpus, int(gpus_text)
    visible = env.get("CUDA_VISIBLE_DEVICES", "")
    return cpus, len([d for d in visible.split(",") if d]) if visible else 0


def own_address(name: str, head: Endpoint, family: str) -> Tuple[str, str]:
    """(address, interface) this node gives Ray: its inter-node name's address where that is
    one of ours on the interface that reaches the head; otherwise the address the kernel uses
    towards the head, as Ray itself would pick (site generic: the plain hostname, which may
    sit on a management network while the rendezvous names the first node's fast
    interface, launcher/node/net/fast.py)."""
    local = netinfo.interface_addresses()
    try:
        mine = [a for a in candidates(name, netinfo.resolve(Endpoint(name, head.port)), family)
                if a in local]
    except LaunchError:
        mine = []
    route = None
    try:
        for target in candidates(head.host, netinfo.resolve(head), family):
            src = netinfo.source_address(target, head.port)
            if src is not None and src in local:
                route = src
                break
    except LaunchError:
        pass
    if mine and (route is None or local[mine[0]] == local[route]):
        return mine[0], local[mine[0]]
    if route is not None:
        return route, local[route]
    raise LaunchError(f"no address of this node reaches the Ray head {head}")


# Ray's dashboard agent listens on a fixed default port (52365) on every node, so two Ray jobs
# on one node would collide there. Each job takes it from its own GCS port (the rendezvous
# port, unique per job and probed free on the first node: launcher.slurm), offset into
# 21000-21999: below Linux's ephemeral ports, outside Ray's worker range (10002-19999) and the
# rendezvous ports (29500-30499). Ray's other ports default to free ones; its client server
# (10001) starts only where ray[client] is installed (not in the kit's images): Ray refuses
# --ray-client-server-port without it.
DASHBOARD_AGENT_PORT_BASE = 21000


def agent_port(head_port: int) -> int:
    """The dashboard agent's listen port of the job whose GCS is on head_port."""
    return DASHBOARD_AGENT_PORT_BASE + head_port % 1000


def ray_start_argv(opts: Options, node: Node, temp_dir: str) -> List[str]:
    """`ray start` for this node (pure). --block keeps Ray's processes our descendants."""
    out = [opts.ray, "start"]
    if node.rank == 0:
        out += ["--head", f"--port={opts.head.port}", "--include-dashboard=false"]
    else:
        out += [f"--address={opts.head}"]
    out.append(f"--dashboard-agent-listen-port={agent_port(opts.head.port)}")
    out += [f"--node-ip-address={node.address}", f"--node-name={node.name}",
            f"--temp-dir={temp_dir}", f"--num-cpus={node.cpus}", f"--num-gpus={node.gpus}",
            "--disable-usage-stats", "--block"]
    if opts.object_store_memory is not None:
        out.append(f"--object-store-memory={opts.object_store_memory}")
    return out


AUTH_MODE_ENV = "RAY_AUTH_MODE"


def ray_env(env: Mapping[str, str], opts: Options, node: Node, temp_dir: str) -> Dict[str, str]:
    """The environment of `ray start` (and so of every Ray worker on the node) and the driver.

    The user's values win: GLOO_SOCKET_IFNAME, NCCL_SOCKET_IFNAME (launcher/node/net's rule,
    ``probe.socket_env``), MASTER_ADDR."""
    out = dict(env)
    out.update(socket_env(env, node.ifname))
    out.setdefault("MASTER_ADDR", opts.head.host)
    out["RAY_ADDRESS"] = str(opts.head)
    out["RAY_TMPDIR"] = temp_dir
    if opts.procs_per_node is not None:
        out[PROCS_ENV] = str(opts.procs_per_node)
    # SIGTERM makes `ray start --block` drain the node for up to 30 s first: not in a batch job.
    out.setdefault("RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S", "0")
    # Ray >= 2.5x: with RAY_AUTH_MODE unset, `ray start --head` turns token authentication on
    # when ~/.ray/auth_token exists (a local `ray.init()` writes one), but `ray start
    # --address` does not, so every worker is refused ("InvalidAuthToken"; seen in CI after a
    # local ray.init() on the same account). One mode for the whole job: the user's
    # RAY_AUTH_MODE if set (token: then the token must reach every node), else disabled.
    out.setdefault(AUTH_MODE_ENV, "disabled")
    return out


def missing_nodes(expected: Sequence[str], joined: Sequence[str]) -> List[str]:
    return [n for n in expected if n not in set(joined)]


def join_error(head: Endpoint, timeout: float, missing: Sequence[str], total: int) -> str:
    return (f"{PROG}: {len(missing)} of {total} nodes did not join the Ray head at {head} "
            f"within {timeout:g} s: {', '.join(missing)}")


def port_open(ep: Endpoint, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((ep.host, ep.port), timeout=timeout):
            return True
    except OSError:
        return False


def alive_node_names(head: Endpoint) -> List[str]:
    """Node names the GCS reports alive. GcsClient is what `ray symmetric-run` (Ray's own
    CLI) uses for this; the public ray.nodes() would make this agent a Ray driver."""
    from ray._raylet import GcsClient  # only on node 0, only once the port is open
    from ray.core.generated.gcs_pb2 import GcsNodeInfo

    infos = GcsClient(address=str(head)).get_all_node_info(timeout=5)
    return [i.node_name for i in infos.values() if i.state == GcsNodeInfo.ALIVE]


def wait_for_nodes(opts: Options, node: Node, ray_proc: subprocess.Popen,
                   clock: Callable[[], float] = time.monotonic) -> Optional[str]:
    """None once every node is alive in the GCS, else the one-line error."""
    deadline = clock() + opts.join_timeout
    joined: List[str] = []
    while clock() < deadline:
        if ray_proc.poll() is not None:
            return f"{PROG}: the Ray head on {node.name} exited with {ray_proc.returncode}"
        if port_open(opts.head):
            try:
                joined = alive_node_names(opts.head)
            except Exception:  # GCS still starting: ask again
                joined = []
            if not missing_nodes(node.expected, joined):
                return None
        time.sleep(POLL_S)
    return join_error(opts.head, opts.join_timeout, missing_nodes(node.expected, joined),
                      len(node.expected))


def run_head(opts: Options, node: Node, env: Dict[str, str], temp_dir: str) -> int:
    ray_proc = driver = None
    graceful = True
    try:
        ray_proc = start(ray_start_argv(opts, node, temp_dir), env)
        error = wait_for_nodes(opts, node, ray_proc)
        if error is not None:
            print(error, file=sys.stderr, flush=True)
            return 1
        print(f"{PROG}: all {len(node.expected)} nodes joined the Ray head at {opts.head}; "
              "starting the driver", file=sys.stderr, flush=True)
        driver = start(opts.program, env)
        while driver.poll() is None:
            if ray_proc.poll() is not None:
                print(f"{PROG}: the Ray head on {node.name} exited with "
                      f"{ray_proc.returncode} while the driver ran", file=sys.stderr, flush=True)
                stop(driver, "the driver")
                return 1
            time.sleep(POLL_S)
        return driver.returncode if driver.returncode >= 0 else 128 - driver.returncode
    except Stop:
        graceful = False
        raise
    finally:
        stop(driver, "the driver", graceful)
        stop(ray_proc, "ray on " + node.name, graceful)


def run_worker(opts: Options, node: Node, env: Dict[str, str], temp_dir: str,
               clock: Callable[[], float] = time.monotonic) -> int:
    deadline = clock() + opts.join_timeout
    while not port_open(opts.head):
        if clock() >= deadline:
            print(f"{PROG}: {node.name}: the Ray head {opts.head} did not open its port within "
                  f"{opts.join_timeout:g} s", file=sys.stderr, flush=True)
            return 1
        time.sleep(POLL_S)
    ray_proc = None
    graceful = True
    try:
        ray_proc = start(ray_start_argv(opts, node, temp_dir), env)
        while ray_proc.poll() is None:
            if not port_open(opts.head) and not port_open(opts.head):
                return 0  # the head stopped: the job is over
            time.sleep(POLL_S)
        if port_open(opts.head):
            print(f"{PROG}: Ray on {node.name} exited with {ray_proc.returncode} while the "
                  "head is up", file=sys.stderr, flush=True)
            return 1
        return 0
    except Stop:
        graceful = False
        raise
    finally:
        stop(ray_proc, "ray on " + node.name, graceful)


def run(opts: Options, env: Mapping[str, str]) -> int:
    node = node_from_env(env)
    address, ifname = own_address(node.name + opts.suffix, opts.head, address_family(env))
    cpus, gpus = allocation(env)
    node = Node(node.name, node.rank, node.job_id, node.expected, address, ifname, cpus, gpus)
    temp_dir = opts.temp_dir or f"/tmp/ray-{node.job_id}"
    renv = ray_env(env, opts, node, temp_dir)
    try:
        return (run_head if node.rank == 0 else run_worker)(opts, node, renv, temp_dir)
    finally:
        # Always: the session dir also holds spilled objects, and a node-local /tmp fills up
        # job after job. What went wrong is in the task's output (`ray start --block`
        # prints the tail of a dead process's log there).
        shutil.rmtree(temp_dir, ignore_errors=True)


def main(argv: Optional[Sequence[str]] = None) -> int:
    signal.signal(signal.SIGTERM, raise_stop)
    signal.signal(signal.SIGINT, raise_stop)
    try:
        return run(parse_args(sys.argv[1:] if argv is None else argv), os.environ)
    except LaunchError as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 2
    except Stop as e:
        print(f"{PROG}: stopped by signal {e.signum}; Ray stopped on this node",
              file=sys.stderr, flush=True)
        return 128 + e.signum


if __name__ == "__main__":
    sys.exit(main())
