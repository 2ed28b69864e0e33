"""Checked gloo all_reduce, run by the images' %test under `torchrun_jsc --standalone`.

Each rank contributes rank + 1; every rank checks the sum n(n+1)/2 itself, and rank 0
prints one line `ALLREDUCE_OK world_size=N sum=S` that %test compares exactly.
"""
import sys

import torch
import torch.distributed as dist


def main() -> int:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    value = torch.tensor([float(rank + 1)])
    dist.all_reduce(value)
    expected = world * (world + 1) / 2
    dist.destroy_process_group()
    if value.item() != expected:
        print(f"ALLREDUCE_FAIL rank={rank} got={value.item()} expected={expected}", file=sys.stderr)
        return 1
    if rank == 0:
        print(f"ALLREDUCE_OK world_size={world} sum={value.item():g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
