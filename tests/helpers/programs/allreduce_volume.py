"""A program whose traffic is big enough to see on an interface's byte counters: ROUNDS gloo
all_reduce calls of a MIB MiB tensor (defaults 8 x 4 MiB: each rank sends and receives tens of
MiB), far above what Slurm sends a node for a step (some KiB). The lab tests compare the
fabric's and the management network's counters around it (tests/helpers/labnet.py).

Run under torchrun/torchrun_jsc (RANK, WORLD_SIZE, MASTER_ADDR from the agent). Prints one line
per rank, `VOLUME_OK rank=R world=W host=H gloo_ifname=I mib=M rounds=N`, and exits non-zero on a wrong
sum.
"""

import os
import socket
import sys

import torch
import torch.distributed as dist


def main() -> int:
    mib = int(os.environ.get("VOLUME_MIB", "4"))
    rounds = int(os.environ.get("VOLUME_ROUNDS", "8"))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    t = torch.ones(mib * (1 << 20) // 4)
    for _ in range(rounds):
        t.fill_(rank + 1.0)
        dist.all_reduce(t)
    ok = t[0].item() == t[-1].item() == world * (world + 1) / 2
    print(f"VOLUME_{'OK' if ok else 'BAD'} rank={rank} world={world} host={socket.gethostname()}"
          f" gloo_ifname={os.environ.get('GLOO_SOCKET_IFNAME', '')} mib={mib} rounds={rounds}",
          flush=True)
    dist.barrier()
    if tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 8):
        os._exit(0 if ok else 1)  # pytorch/pytorch#56297 (collectives_check.py says why)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
