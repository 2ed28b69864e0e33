"""The one program every launcher runs: each rank adds rank + 1 with an all_reduce.

Plain torch.distributed (``init_process_group("env://")``): any launcher that sets RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT runs it (torchrun/torchrun_jsc, srun with the
composer's task script, accelerate launch, deepspeed, Ray, submitit). Backend nccl when CUDA
is there, gloo otherwise. Rank 0 prints exactly one line

    SUM_SUMMARY {"world_size": 4, "sum": 10, "expected": 10, "ok": true, "backend": "gloo",
                 "launcher": "accelerate", "hosts": [...], "argv": [...],
                 "t_allreduce": EPOCH}

and every rank exits 1 if the sum is not n(n+1)/2. ``launcher`` is read from the variables
each launcher leaves in its workers' environment (see detect_launcher). ``argv`` is what the
program received, so tests can check that hostile arguments arrive unchanged. ``t_allreduce``
is when rank 0 came out of the first all_reduce (so every rank had reached it): `make bench`
times launchers from sbatch to it.

--kill-rank R: rank R kills itself (SIGKILL) after the first all_reduce while the others
wait in a second one (timeout --timeout s): the launcher must end the job, not the timeout.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Mapping, Optional, Sequence

SUMMARY_PREFIX = "SUM_SUMMARY "


def detect_launcher(env: Mapping[str, str]) -> str:
    """Which launcher started this process, from the variables it sets in its workers."""
    if any(k.startswith("ACCELERATE_") for k in env):
        return "accelerate"  # ACCELERATE_MIXED_PRECISION etc. (accelerate launch)
    if "CROSS_RANK" in env and "LOCAL_SIZE" in env:
        return "deepspeed"  # deepspeed.launcher.launch
    if any(k.startswith("RAY_") for k in env) or "RAY_ADDRESS" in env:
        return "ray"
    if any(k.startswith("SUBMITIT_") for k in env):
        return "submitit"
    if "TORCHELASTIC_RUN_ID" in env:
        return "torchrun"  # torchrun and torchrun_jsc (torch's elastic agent)
    if "OMPI_COMM_WORLD_RANK" in env or "PMIX_RANK" in env:
        return "mpi"
    if "SLURM_PROCID" in env and env.get("RANK") == env.get("SLURM_PROCID"):
        return "srun"
    return "env"


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--kill-rank", type=int, default=None, help="this rank SIGKILLs itself")
    p.add_argument("--timeout", type=float, default=300.0, help="collective timeout, seconds")
    p.add_argument("--local_rank", "--local-rank", type=int, default=None,
                   help="accepted (deepspeed without --no_local_rank passes it); unused")
    args, _ = p.parse_known_args(argv)  # anything else is only reported (argv)
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    import torch
    import torch.distributed as dist

    try:  # every rank of a kit job has it (the kit's hook folder), as has an install of the kit
        from torchrun_jsc_kit import select_device
    except ImportError:  # run by hand from a clone: the clone's, beside this example
        sys.path.append(str(Path(__file__).resolve().parents[1] / "launcher" / "task" / "hook"))
        from torchrun_jsc_kit import select_device

    raw = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(raw)
    # One visible GPU: cuda:0 (psslurm binds each task to one); several: cuda:LOCAL_RANK;
    # GPUs requested but not usable: one line and exit, never a silent CPU run.
    device = select_device(torch)
    cuda = device.type == "cuda"
    backend = "nccl" if cuda else "gloo"
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    total = torch.tensor([rank + 1], dtype=torch.int64, device=device)
    dist.all_reduce(total)
    passed = time.time()  # every rank has contributed once this returns (make bench)
    if args.kill_rank == rank:
        print(f"rank {rank}: killing myself (--kill-rank) at unix time {time.time():.3f}",
              flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    hosts: list = [None] * world
    dist.all_gather_object(hosts, socket.gethostname())
    expected = world * (world + 1) // 2
    ok = int(total.item()) == expected
    if rank == 0:
        summary = {"world_size": world, "sum": int(total.item()), "expected": expected,
                   "ok": ok, "backend": backend, "launcher": detect_launcher(os.environ),
                   "hosts": sorted(set(hosts)), "argv": raw, "t_allreduce": round(passed, 6)}
        print(SUMMARY_PREFIX + json.dumps(summary, sort_keys=True), flush=True)
    if not ok:
        print(f"rank {rank}: sum {int(total.item())}, expected {expected}", file=sys.stderr)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
