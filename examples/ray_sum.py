"""The distributed sum check as a Ray driver: one Ray actor per process slot forms a
torch.distributed group and all_reduces rank + 1.

Run it on a Ray cluster (the `ray` launch mode starts one per job and sets RAY_ADDRESS,
MASTER_ADDR = the first node's inter-node name, and each node's GLOO_SOCKET_IFNAME):

    python3 -u examples/ray_sum.py [--procs-per-node N]

Rank 0 runs on the driver's node (the first node), so MASTER_ADDR names it; it picks a free
port there. Node order: the driver's node, then the others by Ray node name (the Slurm node
name under the `ray` mode). --procs-per-node defaults to LAUNCH_PROCS_PER_NODE (the mode sets
it from launch.procs_per_node), else each node runs as many actors as it has CPUs in Ray. Prints one line `SUM_SUMMARY {json}` and exits 1 if the sum is wrong.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
class Rank:
    def free_port(self, host: str) -> int:
        with socket.socket() as s:
            s.bind((host, 0))
            return s.getsockname()[1]

    def run(self, rank: int, world: int, local_rank: int, port: int) -> dict:
        import torch
        import torch.distributed as dist

        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(local_rank),
                          MASTER_PORT=str(port))
        dist.init_process_group("gloo", init_method="env://")
        try:
            t = torch.tensor([float(rank + 1)])
            dist.all_reduce(t)
            return {"rank": rank, "host": socket.gethostname(), "sum": int(t.item()),
                    "ifname": os.environ.get("GLOO_SOCKET_IFNAME", ""),
                    "backend": dist.get_backend()}
        finally:
            dist.destroy_process_group()


def node_order(nodes: list, own_id: str) -> list:
    """Alive nodes, the driver's first, then by node name."""
    alive = [n for n in nodes if n["Alive"]]
    return sorted(alive, key=lambda n: (n["NodeID"] != own_id, n["NodeName"]))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs-per-node", type=int,
                   default=int(os.environ.get("LAUNCH_PROCS_PER_NODE", "0")) or None)
    args = p.parse_args()
    ray.init()
    nodes = node_order(ray.nodes(), ray.get_runtime_context().get_node_id())
    per_node = [args.procs_per_node or int(n["Resources"].get("CPU", 1)) for n in nodes]
    actors, local = [], []
    for node, count in zip(nodes, per_node):
        pin = NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)
        actors += [Rank.options(scheduling_strategy=pin).remote() for _ in range(count)]
        local += list(range(count))
    world = len(actors)
    master = os.environ.get("MASTER_ADDR") or nodes[0]["NodeManagerAddress"]
    port = ray.get(actors[0].free_port.remote(nodes[0]["NodeManagerAddress"]))
    results = ray.get([a.run.remote(r, world, local[r], port) for r, a in enumerate(actors)])
    expected = world * (world + 1) // 2
    ok = all(r["sum"] == expected for r in results)
    summary = {"launcher": "ray", "world_size": world, "backend": results[0]["backend"],
               "sum": results[0]["sum"], "expected": expected, "ok": ok,
               "master_addr": master, "nodes": [n["NodeName"] for n in nodes],
               "hosts": sorted({r["host"] for r in results}),
               "ifnames": sorted({r["ifname"] for r in results})}
    print("SUM_SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
