"""The distributed sum through Ray Train's own API: a TorchTrainer, its process group, one DDP step.

Run it on a Ray cluster (the `ray` launch mode starts one per job and sets RAY_ADDRESS and
LAUNCH_PROCS_PER_NODE from launch.procs_per_node); needs Ray Train's extras (pandas, pyarrow:
requirements/launchers.txt pins them):

    python3 -u examples/ray_train_sum.py [--procs-per-node N] [--storage-path DIR]

The driver runs one TorchTrainer with ScalingConfig(num_workers = nodes x procs per node,
use_gpu when the cluster has GPUs). Ray Train places the workers and forms the torch.distributed
group itself (MASTER_ADDR = the address Ray advertises for worker 0's node: under the `ray`
mode the node's inter-node address, e.g. jwb0001i's). Each worker all_reduces rank + 1 (as
examples/distributed_sum.py does), then takes one DDP step (ray.train.torch.prepare_model) on
a model seeded identically everywhere and checks that the parameters are still identical on
every worker. Every worker reports through ray.train.report, rank 0 with a checkpoint (the
model and the metrics) that Ray Train stores in the run's folder; the driver reads it back
from there and prints one line

    SUM_SUMMARY {"world_size": 4, "sum": 10, "expected": 10, "ok": true, "ddp_ok": true,
                 "checkpoint_ok": true, "backend": "gloo", "launcher": "ray-train",
                 "hosts": [...], "master_addr": "10.0.0.1", "ifnames": [...]}

and exits 1 unless the sum, the DDP step and the checkpoint are right (or the run failed:
one line why).
Ray Train keeps its run's state under --storage-path (default logs/ray-train in the current
directory: the submit directory, which every node sees); the run's folder is removed when
the run succeeded.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

SUMMARY_PREFIX = "SUM_SUMMARY "
CHECKPOINT_FILE = "summary.json"


def train_loop(config: dict) -> None:
    """One Ray Train worker: the rank + 1 sum, then one DDP step; rank 0 reports both."""
    import socket

    import torch
    import torch.distributed as dist
    import ray.train
    import ray.train.torch

    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    device = ray.train.torch.get_device()
    total = torch.tensor([rank + 1], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    expected = world * (world + 1) // 2

    torch.manual_seed(0)  # the same initial parameters on every worker
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))  # DDP when world > 1
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.full((2, 4), float(rank + 1), device=device)  # different data on every worker
    loss = model(x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()  # DDP averages the gradients over the workers
    optimizer.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    lowest, highest = flat.clone(), flat.clone()
    dist.all_reduce(lowest, op=dist.ReduceOp.MIN)
    dist.all_reduce(highest, op=dist.ReduceOp.MAX)
    ddp_ok = bool(torch.equal(lowest, highest))

    facts = {"host": socket.gethostname(), "ifname": os.environ.get("GLOO_SOCKET_IFNAME", "")}
    everyone: list = [None] * world
    dist.all_gather_object(everyone, facts)
    metrics = {
        "world_size": world, "sum": int(total.item()), "expected": expected,
        "ok": int(total.item()) == expected, "ddp_ok": ddp_ok,
        "backend": dist.get_backend(), "hosts": sorted({f["host"] for f in everyone}),
        "ifnames": sorted({f["ifname"] for f in everyone}),
        "master_addr": os.environ.get("MASTER_ADDR", ""),
    }
    # Every worker reports; rank 0 with a checkpoint (the model and these metrics), which Ray
    # Train copies to the run's storage: the driver gets the metrics from it (Ray Train v2
    # keeps only checkpointed metrics in the Result).
    if rank != 0:
        ray.train.report(metrics)
        return
    with tempfile.TemporaryDirectory() as folder:
        torch.save(model.module.state_dict() if world > 1 else model.state_dict(),
                   os.path.join(folder, "model.pt"))
        with open(os.path.join(folder, CHECKPOINT_FILE), "w", encoding="utf-8") as f:
            json.dump(metrics, f)
        ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


def cluster_shape(nodes: list, procs_per_node: int | None) -> tuple:
    """(workers, GPUs per worker or 0): procs_per_node per alive node, else one per CPU."""
    alive = [n for n in nodes if n["Alive"]]
    per_node = [procs_per_node or int(n["Resources"].get("CPU", 1)) for n in alive]
    gpus = min((int(n["Resources"].get("GPU", 0)) for n in alive), default=0)
    return sum(per_node), gpus


def checkpoint_matches(checkpoint, summary: dict) -> bool:
    """Rank 0's checkpoint, read back by the driver from the run's storage, holds the metrics."""
    if checkpoint is None:
        return False
    with checkpoint.as_directory() as folder:
        try:
            with open(os.path.join(folder, CHECKPOINT_FILE), encoding="utf-8") as f:
                saved = json.load(f)
        except (OSError, ValueError):
            return False
    return all(summary.get(k) == v for k, v in saved.items())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs-per-node", type=int,
                   default=int(os.environ.get("LAUNCH_PROCS_PER_NODE", "0")) or None)
    p.add_argument("--storage-path", default=os.path.join("logs", "ray-train"),
                   help="where Ray Train keeps the run (a folder every node sees)")
    args = p.parse_args()

    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    ray.init()
    workers, gpus = cluster_shape(ray.nodes(), args.procs_per_node)
    storage = os.path.abspath(args.storage_path)
    name = f"sum-{os.environ.get('SLURM_JOB_ID') or os.getpid()}-{int(time.time())}"
    trainer = TorchTrainer(
        train_loop,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=gpus > 0,
                                     resources_per_worker={"CPU": 1}),
        run_config=RunConfig(name=name, storage_path=storage))
    try:
        result = trainer.fit()
    except Exception as exc:  # Ray Train's TrainingFailedError carries the workers' errors
        first = (str(exc).strip().splitlines() or [""])[0].rstrip(":")
        print(f"ray_train_sum: the run failed ({type(exc).__name__}: {first}; the workers' "
              f"errors are above); its state is in {os.path.join(storage, name)}, which every "
              "node must see (--storage-path: a shared folder, not a node-local one)",
              file=sys.stderr, flush=True)
        return 1
    summary = {k: v for k, v in (result.metrics or {}).items() if not k.startswith("_")}
    summary["launcher"] = "ray-train"
    summary["checkpoint_ok"] = checkpoint_matches(result.checkpoint, summary)
    print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    good = summary.get("ok") is True and summary.get("ddp_ok") is True \
        and summary["checkpoint_ok"] and summary.get("world_size") == workers
    if good:
        shutil.rmtree(os.path.join(storage, name), ignore_errors=True)
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
