"""Seed tutorial program: print the rank variables, barrier, all_reduce and all_gather checked.

Run under torchrun/torchrun_jsc. Prints one line per rank: `COLLECTIVES_OK rank=R world=W ...`
and exits non-zero on any wrong result.
"""

import os
import socket
import sys

import torch
import torch.distributed as dist


def main() -> int:
    rank, local_rank, world = (int(os.environ[v]) for v in ("RANK", "LOCAL_RANK", "WORLD_SIZE"))
    print(f"rank={rank} local_rank={local_rank} world_size={world} host={socket.gethostname()} "
          f"master={os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')} "
          f"gloo_ifname={os.environ.get('GLOO_SOCKET_IFNAME', '')}", flush=True)
    dist.init_process_group("gloo")
    if (dist.get_rank(), dist.get_world_size()) != (rank, world):
        print(f"process group disagrees with env: {dist.get_rank()}/{dist.get_world_size()}")
        return 1
    dist.barrier()
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    want_sum = world * (world + 1) / 2
    gathered = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(gathered, torch.tensor([float(rank)]))
    got = [int(g.item()) for g in gathered]
    dist.destroy_process_group()
    if t.item() != want_sum or got != list(range(world)):
        print(f"COLLECTIVES_BAD rank={rank} sum={t.item()} want={want_sum} gather={got}")
        return 1
    print(f"COLLECTIVES_OK rank={rank} world={world} sum={int(t.item())} gather={got}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
