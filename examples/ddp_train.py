"""A small, real DDP training program: the workload of every example job and end-to-end test.

Started once per process by torchrun / torchrun_jsc (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT in the env), or as one srun task per GPU (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID;
the jobscript exports MASTER_ADDR/MASTER_PORT). Backend nccl with CUDA, gloo without.

Synthetic regression data, generated deterministically (no downloads), split with a
DistributedSampler; learning rate scaled by the world size. Rank 0 writes a checkpoint every
--checkpoint-every steps (tmp file + os.replace, so a crash never leaves half a file) and a
restarted job resumes from it. Rank 0 ends with exactly one line

    DDP_SUMMARY {"world_size": ..., "steps": ..., "loss_first": ..., "loss_last": ...,
                 "params_identical": ..., "resumed_from_step": ..., "python", "torch",
                 "allowed_cpus_min": ..., ...}

--crash-rank R --crash-step S make rank R die (os._exit(3)) at step S, for failure tests.
--hang-node NODE --hang-step S make the ranks on NODE (SLURMD_NODENAME, else the host name)
stop at step S, alive and making no progress (a sleep: a hung node), for hang tests; run
elsewhere (a spare took the node's place) the step is taken as any other.

Requeue (job.requeue in the spec, torchrun_jsc_kit.StopRequest): the handler for
$REQUEUE_SIGNAL only sets a flag; after each step all ranks agree on it (all_reduce MAX), rank
0 saves the checkpoint, writes $REQUEUE_MARKER and prints one ``DDP_STOPPED {...}`` line, and
every rank exits 0. A
resumed run continues with the very batch it stopped before (epoch and offset from the step),
so an interrupted run ends with the same parameters as an uninterrupted one
(``param_sha256`` in both lines). --step-sleep S makes each step take S seconds more.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import hashlib
import itertools
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

try:  # every rank of a kit job has it (the kit's hook folder), as has an install of the kit
    from torchrun_jsc_kit import StopRequest, select_device
except ImportError:  # run by hand from a clone: the clone's, beside this example
    sys.path.append(str(Path(__file__).resolve().parents[1] / "launcher" / "task" / "hook"))
    from torchrun_jsc_kit import StopRequest, select_device

CHECKPOINT_NAME = "checkpoint.pt"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=40, help="total optimizer steps (default 40)")
    p.add_argument("--batch-size", type=int, default=32, help="per-process batch size")
    p.add_argument("--lr", type=float, default=0.02, help="base learning rate, times world size")
    p.add_argument("--checkpoint-dir", default=None, help="write/resume checkpoints here")
    p.add_argument("--checkpoint-every", type=int, default=10, help="steps between checkpoints")
    p.add_argument("--crash-rank", type=int, default=None, help="this rank exits 3 ...")
    p.add_argument("--crash-step", type=int, default=None, help="... at this step")
    p.add_argument("--hang-node", default=None, help="the ranks on this node hang ...")
    p.add_argument("--hang-step", type=int, default=None, help="... at this step")
    p.add_argument("--timeout", type=float, default=120.0, help="collective timeout, seconds")
    p.add_argument("--step-sleep", type=float, default=0.0, help="seconds added to each step")
    args = p.parse_args(argv)
    if (args.crash_rank is None) != (args.crash_step is None):
        p.error("--crash-rank and --crash-step go together")
    return args


def read_env() -> tuple[int, int, int]:
    """(rank, world_size, local_rank) from torchrun's env, else from srun's."""
    env = os.environ
    if "RANK" in env and "WORLD_SIZE" in env:
        return int(env["RANK"]), int(env["WORLD_SIZE"]), int(env.get("LOCAL_RANK", "0"))
    if "SLURM_PROCID" in env and "SLURM_NTASKS" in env:
        rank, world = int(env["SLURM_PROCID"]), int(env["SLURM_NTASKS"])
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
        return rank, world, int(env.get("SLURM_LOCALID", "0"))
    raise SystemExit("ddp_train.py: no RANK/WORLD_SIZE (torchrun) or SLURM_PROCID/SLURM_NTASKS "
                     "(srun) in the environment; start it with torchrun_jsc or srun")


def make_dataset(n: int = 4096, dim: int = 16) -> TensorDataset:
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g)
    y = torch.tanh(x @ w) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def make_model(dim: int = 16) -> nn.Module:
    torch.manual_seed(0)  # same init everywhere (DDP broadcasts rank 0's anyway)
    return nn.Sequential(nn.Linear(dim, 64), nn.Tanh(), nn.Linear(64, 1))


def save_checkpoint(path: str, step: int, model: nn.Module, opt: torch.optim.Optimizer) -> None:
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # atomic: readers see the old or the new checkpoint, never half


def load_checkpoint(path: str, model: nn.Module, opt: torch.optim.Optimizer) -> int:
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return int(state["step"])


def params_identical(model: nn.Module, world: int) -> bool:
    """all_gather the flattened parameters (a few thousand floats) and compare exactly."""
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(gathered, flat)
    return all(torch.equal(gathered[0], t) for t in gathered[1:])


def param_sha256(model: nn.Module) -> str:
    flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
    return hashlib.sha256(flat.numpy().tobytes()).hexdigest()[:16]


def warm_up(ddp: DistributedDataParallel, loss_fn: nn.Module, data: TensorDataset,
            batch_size: int, device: torch.device) -> None:
    """One forward/backward that is thrown away, so that every counted step (in a fresh run and
    in a resumed one alike) runs with DDP's rebuilt gradient buckets.

    DDP records the order in which gradients become ready during its first backward and
    rebuilds its buckets in that order before the next forward (torch reducer.cpp,
    should_rebuild_buckets). Where a parameter sits in the flat bucket decides the order in
    which gloo's ring allreduce adds its values, so without this a resumed run's first step
    used the initial layout where the uninterrupted run used the rebuilt one, and the
    parameters differed in the last bits (4 gloo ranks, 60 steps, stopped at 11 and resumed).
    Cost: one forward/backward per start, no per-step cost (find_unused_parameters=True,
    the other way to keep one layout, traverses the autograd graph on every step). Nothing of it
    reaches the model: the optimizer does not step and the gradients are dropped.
    """
    x, y = data.tensors[0][:batch_size].to(device), data.tensors[1][:batch_size].to(device)
    loss_fn(ddp(x), y).backward()
    for p in ddp.parameters():
        p.grad = None


def node_name() -> str:
    """The Slurm node this rank runs on (the host name outside Slurm)."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def train(args: argparse.Namespace, rank: int, world: int, device: torch.device,
          stop: StopRequest) -> dict[str, Any]:
    data = make_dataset()
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=7)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = make_model().to(device)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr * world, momentum=0.9)
    ckpt = os.path.join(args.checkpoint_dir, CHECKPOINT_NAME) if args.checkpoint_dir else None
    start = load_checkpoint(ckpt, model, opt) if ckpt else 0
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    loss_fn = nn.MSELoss()
    warm_up(ddp, loss_fn, data, args.batch_size, device)
    losses: list[float] = []
    # Resume with the batch the last run would have taken next: same epoch, same offset.
    step, epoch, skip = start, start // len(loader), start % len(loader)
    stopped = False
    while step < args.steps and not stopped:
        sampler.set_epoch(epoch)
        for x, y in itertools.islice(loader, skip, None):
            if step >= args.steps:
                break
            if rank == args.crash_rank and step == args.crash_step:
                print(f"rank {rank}: crashing on purpose at step {step} at unix time {time.time():.3f}",
                      flush=True)
                os._exit(3)
            if step == args.hang_step and args.hang_node == node_name():
                print(f"rank {rank}: hanging on purpose at step {step} on {args.hang_node} at "
                      f"unix time {time.time():.3f}", flush=True)
                while True:
                    time.sleep(60)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            step += 1
            mean = loss.detach().clone()
            dist.all_reduce(mean)
            losses.append(mean.item() / world)
            time.sleep(args.step_sleep)
            stopped = stop.signal is not None and step < args.steps and stop.agree()
            if rank == 0 and (step % args.checkpoint_every == 0 or step == args.steps or stopped):
                print(f"step {step} loss {losses[-1]:.6f}", flush=True)
                if ckpt:
                    save_checkpoint(ckpt, step, model, opt)
            if stopped:
                break
        epoch, skip = epoch + 1, 0
    # Free DDP (its reducer holds the process group) now, not during interpreter teardown.
    del ddp
    gc.collect()
    # Where each rank ran and which CPUs it may use: a launcher that got one core from Slurm
    # passes that mask to all its workers, and the run is slow with no error anywhere.
    placement: list[Any] = [None] * world
    dist.all_gather_object(placement, (socket.gethostname(), sorted(os.sched_getaffinity(0))))
    return {
        "stopped": stopped,
        "param_sha256": param_sha256(model),
        "attempt": int(os.environ.get("SLURM_RESTART_COUNT")  # psslurm: the JOB_ one only
                       or os.environ.get("SLURM_JOB_RESTART_COUNT") or "0") + 1,
        "world_size": world,
        "steps": step,
        "steps_run": step - start,
        "loss_first": losses[0] if losses else None,
        "loss_last": losses[-1] if losses else None,
        "params_identical": params_identical(model, world),
        "resumed_from_step": start,
        "backend": dist.get_backend(),
        "python": "%d.%d" % sys.version_info[:2],
        "torch": torch.__version__,
        "hosts": sorted({host for host, _ in placement}),
        "allowed_cpus_min": min(len(cpus) for _, cpus in placement),
        "allowed_cpus": sorted({",".join(map(str, cpus)) for _, cpus in placement}),
    }


def main(argv: list[str] | None = None) -> None:
    stop = StopRequest()  # first: until its handler is in place the signal would be fatal
    args = parse_args(argv)
    if stop.signal is not None and not args.checkpoint_dir:
        # Stopping without a checkpoint would requeue a job that starts over: refuse.
        raise SystemExit(f"ddp_train.py: REQUEUE_SIGNAL={stop.signal.name} needs --checkpoint-dir")
    rank, world, local_rank = read_env()
    # One visible GPU: cuda:0; several: cuda:LOCAL_RANK; GPUs requested but not usable: one
    # line and exit, never a silent CPU run (torchrun_jsc_kit.select_device).
    device = select_device(torch, dict(os.environ, LOCAL_RANK=str(local_rank)))
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if args.checkpoint_dir and rank == 0:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=args.timeout))
    summary = train(args, rank, world, device, stop)
    if rank == 0 and summary["stopped"]:
        stop.mark_stopped(f"step {summary['steps']} of {args.steps}")
        print("DDP_STOPPED " + json.dumps(summary, sort_keys=True), flush=True)
    elif rank == 0:
        print("DDP_SUMMARY " + json.dumps(summary, sort_keys=True), flush=True)
    # Leave together, then skip interpreter teardown: on the 2-node cluster about one run in
    # 15 had a rank abort after its work was done ("terminate called without an active
    # exception", SIGABRT) while peers were already closing their gloo pairs, which turned a
    # finished job into a failed one. Most likely upstream's race of gloo's threads freeing
    # finished work (and its tensors) against interpreter teardown (pytorch/pytorch#179291,
    # #190489, open).
    dist.barrier()
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) >= (2, 8):
        # Before 2.8 destroying a gloo group can deadlock on the GIL (pytorch/pytorch#56297,
        # fixed by #154976); os._exit below releases everything anyway.
        dist.destroy_process_group()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
