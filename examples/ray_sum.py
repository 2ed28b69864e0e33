"""examples/distributed_sum.py under Ray: one Ray actor per process slot runs its main().

Run it on a Ray cluster (the `ray` launch mode starts one per job and sets RAY_ADDRESS,
MASTER_ADDR = the first node's inter-node name, each node's GLOO_SOCKET_IFNAME, and
LAUNCH_PROCS_PER_NODE from launch.procs_per_node):

    python3 -u examples/ray_sum.py [--procs-per-node N] [-- DISTRIBUTED_SUM_ARGS...]

The actors are pinned per node (NodeAffinitySchedulingStrategy): the driver's node first, then
the others by Ray node name (the Slurm node name under the `ray` mode), so rank 0 runs on the
node MASTER_ADDR names; it picks a free port there. Each actor sets RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_PORT and calls distributed_sum.main(), which forms the torch.distributed
group (env://) and checks the all_reduce sum of rank + 1. The driver prints rank 0's summary
line (`SUM_SUMMARY {...}`, "launcher": "ray"), then `RAY_PLACEMENT {...}` (nodes, MASTER_ADDR,
each actor's socket interface), and exits 1 unless every rank succeeded. Without
--procs-per-node or LAUNCH_PROCS_PER_NODE each node runs as many actors as it has CPUs in Ray.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import sys
from pathlib import Path

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

EXAMPLES = str(Path(__file__).resolve().parent)  # distributed_sum.py lies beside this file


@ray.remote(num_cpus=1)
class Rank:
    def free_port(self, host: str) -> int:
        with socket.socket() as s:
            s.bind((host, 0))
            return s.getsockname()[1]

    def run(self, rank: int, world: int, local_rank: int, port: int, argv: list) -> dict:
        if EXAMPLES not in sys.path:
            sys.path.insert(0, EXAMPLES)
        import distributed_sum

        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                          MASTER_PORT=str(port))
        out = io.StringIO()
        with contextlib.redirect_stdout(out):  # the driver prints rank 0's summary itself
            rc = distributed_sum.main(argv)
        return {"rank": rank, "rc": rc, "stdout": out.getvalue(),
                "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}


def node_order(nodes: list, own_id: str) -> list:
    """Alive nodes, the driver's first, then by node name."""
    alive = [n for n in nodes if n["Alive"]]
    return sorted(alive, key=lambda n: (n["NodeID"] != own_id, n["NodeName"]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs-per-node", type=int,
                   default=int(os.environ.get("LAUNCH_PROCS_PER_NODE", "0")) or None)
    p.add_argument("sum_args", nargs="*", help="passed to distributed_sum.main()")
    args = p.parse_args()
    ray.init()
    nodes = node_order(ray.nodes(), ray.get_runtime_context().get_node_id())
    actors, local = [], []
    for node in nodes:
        count = args.procs_per_node or int(node["Resources"].get("CPU", 1))
        pin = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        actors += [Rank.options(scheduling_strategy=pin).remote() for _ in range(count)]
        local += list(range(count))
    world = len(actors)
    port = ray.get(actors[0].free_port.remote(nodes[0]["NodeManagerAddress"]))
    results = ray.get([a.run.remote(r, world, local[r], port, args.sum_args)
                       for r, a in enumerate(actors)])
    print(results[0]["stdout"], end="", flush=True)
    placement = {"nodes": [n["NodeName"] for n in nodes],
                 "master_addr": os.environ.get("MASTER_ADDR", ""),
                 "ifnames": sorted({r["ifname"] for r in results})}
    print("RAY_PLACEMENT " + json.dumps(placement, sort_keys=True), flush=True)
    return 0 if all(r["rc"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
