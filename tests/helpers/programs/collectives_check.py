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
    ok = t.item() == want_sum and got == list(range(world))
    if ok:
        print(f"COLLECTIVES_OK rank={rank} world={world} sum={int(t.item())} gather={got} "
              f"torch={torch.__version__}", flush=True)
    else:
        print(f"COLLECTIVES_BAD rank={rank} sum={t.item()} want={want_sum} gather={got}",
              flush=True)
    dist.barrier()  # every rank is done with every collective
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 8):
        # pytorch/pytorch#56297: before torch 2.8 (#154976) destroying a gloo group holds the
        # GIL while it joins its threads, which may still need the GIL to free a finished
        # collective's tensors: a deadlock (seen here with 2.4 and 2.5). Leave without it.
        os._exit(0 if ok else 1)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
