"""Bench program for the scale section: when each phase of the first step happened.

One line per rank, after a first checked all_reduce:

    PHASES rank=R host=H start=EPOCH imported=EPOCH pg=EPOCH ready=EPOCH cpu=SECONDS

start: the program's first line (the interpreter is up); imported: torch and
torch.distributed imported; pg: init_process_group("gloo") returned (rendezvous through the
store at MASTER_ADDR, or torchrun's); ready: the first all_reduce done. cpu: this process's
user + system CPU seconds until then. Also `READY rank=R t=EPOCH` as bench/programs/ready.py
prints it.
"""

import time

START = time.time()

import os  # noqa: E402
import resource  # noqa: E402
import socket  # noqa: E402
import sys  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

IMPORTED = time.time()


def main() -> int:
    dist.init_process_group("gloo")
    pg = time.time()
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.ones(1)
    dist.all_reduce(t)
    if t.item() != world:
        print(f"BAD all_reduce {t.item()} != {world}", flush=True)
        return 1
    ready = time.time()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    print(f"PHASES rank={rank} host={socket.gethostname()} start={START:.6f} "
          f"imported={IMPORTED:.6f} pg={pg:.6f} ready={ready:.6f} "
          f"cpu={ru.ru_utime + ru.ru_stime:.3f}", flush=True)
    print(f"READY rank={rank} t={ready:.6f}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
